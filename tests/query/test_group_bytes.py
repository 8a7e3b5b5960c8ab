"""Group-by keys worked out over the series keys' bytes at once (group_key_bytes) give the
groups that keying each series does (plan.group_key, then group.group_series: the spec),
for any UID widths, salt, tag keys missing from some series, several group-by keys and
series left out by the filters, by both of its ways (a few series one by one, more as a
byte matrix); keys of several lengths are left to the spec."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.codec import KeyLayout
from tsd.query import group
from tsd.query.group import group_key_bytes, group_series
from tsd.query.plan import group_key


@st.composite
def _series(draw: st.DrawFn) -> tuple[KeyLayout, list[bytes], list[bytes], list[int]]:
    layout = KeyLayout(
        metric_width=draw(st.integers(1, 3)),
        tagk_width=draw(st.integers(1, 3)),
        tagv_width=draw(st.integers(1, 4)),
        salt_width=draw(st.integers(0, 1)),
    )
    n_tags = draw(st.integers(1, 3))
    tagks = draw(st.lists(st.integers(1, 6), min_size=n_tags, max_size=6, unique=True))
    keys = []
    for _ in range(draw(st.integers(1, 40))):
        chosen = sorted(draw(st.permutations(tagks))[:n_tags])
        tags = b"".join(
            k.to_bytes(layout.tagk_width, "big")
            + draw(st.integers(0, 5)).to_bytes(layout.tagv_width, "big")
            for k in chosen
        )
        keys.append(bytes(layout.salt_width) + b"\x01" * layout.metric_width + tags)
    group_by = [k.to_bytes(layout.tagk_width, "big") for k in draw(st.permutations(tagks))]
    group_by = sorted(group_by[: draw(st.integers(1, len(group_by)))])
    kept = sorted(draw(st.sets(st.integers(0, len(keys) - 1))))
    return layout, keys, group_by, kept


def _spec(
    layout: KeyLayout, keys: list[bytes], group_by: list[bytes], kept: list[int]
) -> list[list[int]]:
    start = layout.salt_width + layout.metric_width
    pair, kw = layout.tag_pair_width, layout.tagk_width
    found: list[bytes | None] = [None] * len(keys)
    for i in kept:
        key = keys[i]
        tags = {key[j : j + kw]: key[j + kw : j + pair] for j in range(start, len(key), pair)}
        found[i] = group_key(layout, tags, group_by)
    return [members for _, members in group_series(found)]


@pytest.mark.slow  # a property run of hundreds of examples: the full suite's
@settings(max_examples=400, deadline=None)
@given(case=_series())
def test_the_byte_matrix_groups_as_keying_each_series(
    case: tuple[KeyLayout, list[bytes], list[bytes], list[int]],
) -> None:
    layout, keys, group_by, kept = case
    start = layout.salt_width + layout.metric_width
    want = _spec(layout, keys, group_by, kept)
    few = group.FEW_SERIES
    try:
        for group.FEW_SERIES in (0, len(keys)):  # the byte matrix, then one by one
            got = group_key_bytes(
                keys,
                start,
                layout.tagk_width,
                layout.tagv_width,
                group_by,
                np.array(kept, np.int64),
            )
            assert got == want
    finally:
        group.FEW_SERIES = few


def test_keys_of_several_lengths_are_left_to_the_spec() -> None:
    _several_lengths()
    few = group.FEW_SERIES
    try:
        group.FEW_SERIES = 0
        _several_lengths()
    finally:
        group.FEW_SERIES = few


def _several_lengths() -> None:
    keys = [b"\x01\x00\x01\x00\x02", b"\x01\x00\x01\x00\x02\x00\x02\x00\x03"]
    kept = np.array([0, 1], np.int64)
    assert group_key_bytes(keys, 1, 2, 2, [b"\x00\x01"], kept) is None
    assert group_key_bytes(keys[:1], 1, 2, 2, [b"\x00\x01"], kept[:1]) == [[0]]
    assert group_key_bytes(keys, 1, 2, 2, [b"\x00\x01"], kept[:0]) == []
