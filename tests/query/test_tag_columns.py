"""Series tags by column (tsd.query.results.tag_columns / column_facts) and the filters
over them (SeriesFilter.mask_columns): the same facts and the same kept series as the
per-series path, their spec, on random series keys and filters."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.codec import KeyLayout, encode_row_key
from tsd.codec.const import TIMESTAMP_BYTES
from tsd.protocol.m_syntax import make_filter
from tsd.query.filters import SeriesFilter
from tsd.query.group import group_tags
from tsd.query.results import (
    column_facts,
    column_group_tags,
    series_facts,
    series_tag_uids,
    tag_columns,
)
from tsd.query.series import SeriesBatch
from tsd.query.spans import Spans

LAYOUT = KeyLayout()
METRIC = b"\x00\x00\x07"
TAGKS = {b"\x00\x00\x01": "host", b"\x00\x00\x02": "dc", b"\x00\x00\x03": "rack"}
VALUES = ["web01", "web02", "db01", "a.tsdb.net", "WEB03", "x"]


def series_key(tags: dict[bytes, bytes]) -> bytes:
    key = encode_row_key(LAYOUT, METRIC, 0, list(tags.items()))
    at = LAYOUT.tags_start - TIMESTAMP_BYTES
    return key[:at] + key[LAYOUT.tags_start :]


def spans_of(keys: list[bytes], points: list[int]) -> Spans:
    offsets = np.concatenate(([0], np.cumsum(points))).astype(np.int64)
    n = int(offsets[-1])
    batch = SeriesBatch(np.arange(n, dtype=np.int64), np.zeros(n), offsets)
    return Spans(keys, batch, [[] for _ in keys])


tag_sets = st.lists(
    st.fixed_dictionaries(
        {k: st.sampled_from(range(len(VALUES))) for k in (b"\x00\x00\x01", b"\x00\x00\x02")}
    ),
    min_size=1,
    max_size=25,
)
filters = st.lists(
    st.tuples(
        st.sampled_from(
            ["literal_or", "not_literal_or", "iliteral_or", "wildcard", "iwildcard", "regexp"]
        ),
        st.sampled_from(["host", "dc", "rack"]),
        st.sampled_from(["web01|db01", "*", "web*", "*.net", "web0[12]", "x"]),
    ),
    max_size=3,
)


def _names() -> tuple[dict[bytes, str], dict[bytes, str]]:
    tagv = {i.to_bytes(3, "big"): v for i, v in enumerate(VALUES)}
    return TAGKS, tagv


@pytest.mark.slow
@pytest.mark.fallbacks
@settings(max_examples=150, deadline=None)
@given(tag_sets, filters, st.booleans(), st.booleans())
def test_columns_give_the_per_series_facts_and_filters(
    sets: list[dict[bytes, int]],
    spec: list[tuple[str, str, str]],
    explicit: bool,
    absent: bool,
) -> None:
    uniq = {tuple(sorted(t.items())): t for t in sets}
    tags = [{k: v.to_bytes(3, "big") for k, v in t.items()} for t in uniq.values()]
    keys = sorted(series_key(t) for t in tags)
    spans = spans_of(keys, [i % 3 for i in range(len(keys))])
    columns = tag_columns(LAYOUT, keys)
    assert columns is not None
    tagk_names, tagv_names = _names()
    want = series_facts(LAYOUT, spans, series_tag_uids(LAYOUT, keys), tagk_names, tagv_names)
    got = column_facts(LAYOUT, spans, columns, tagk_names, tagv_names)
    assert list(got.tags) == want.tags
    assert [list(t.items()) for t in got.tags] == [list(t.items()) for t in want.tags]
    assert list(got.tag_uids) == want.tag_uids
    assert [list(t) for t in got.tag_uids] == [list(t) for t in want.tag_uids]
    assert list(got.tsuids) == want.tsuids
    assert got.tsuids[-1] == want.tsuids[-1]
    assert got.tags[1:3] == want.tags[1:3]
    assert got.has_points == want.has_points
    fs = [
        make_filter(t, k, e, False)
        for t, k, e in spec
        if ("*" in e) == (t in ("wildcard", "iwildcard"))
        or t in ("literal_or", "not_literal_or", "iliteral_or")
    ]
    if absent:
        fs.append(make_filter("not_key", "rack", "", False))
    assert got.columns is not None
    keep = SeriesFilter(fs, explicit).mask_columns(got.columns, len(got.tags))
    np.testing.assert_array_equal(keep, SeriesFilter(fs, explicit).mask(want.tags))


@pytest.mark.slow
@pytest.mark.fallbacks
@settings(max_examples=150, deadline=None)
@given(tag_sets, st.data())
def test_a_groups_tags_by_column_are_group_tags(
    sets: list[dict[bytes, int]], data: st.DataObject
) -> None:
    """column_group_tags (a group's tags and aggregateTags from the columns) answers
    group_tags' (its spec) for any members: the same tags, the same order."""
    uniq = {tuple(sorted(t.items())): t for t in sets}
    tags = [{k: v.to_bytes(3, "big") for k, v in t.items()} for t in uniq.values()]
    keys = sorted(series_key(t) for t in tags)
    columns = tag_columns(LAYOUT, keys)
    assert columns is not None
    facts = column_facts(LAYOUT, spans_of(keys, [1] * len(keys)), columns, *_names())
    assert facts.columns is not None
    members = sorted(
        data.draw(st.sets(st.integers(0, len(keys) - 1), min_size=2)) if len(keys) > 1 else [0]
    )
    got = column_group_tags(facts.columns, members)
    want = group_tags([facts.tags[i] for i in members])
    assert got == want
    assert list(got[0].items()) == list(want[0].items())


def test_keys_of_other_shapes_have_no_columns() -> None:
    host, dc = b"\x00\x00\x01", b"\x00\x00\x02"
    one = series_key({host: b"\x00\x00\x01"})
    two = series_key({host: b"\x00\x00\x01", dc: b"\x00\x00\x02"})
    assert tag_columns(LAYOUT, [one, two]) is None  # of two lengths
    other = series_key({dc: b"\x00\x00\x01"})
    assert tag_columns(LAYOUT, [one, other]) is None  # another tag key at one position
    assert tag_columns(LAYOUT, []) is None
    columns = tag_columns(LAYOUT, [one, one[:-3] + b"\x00\x00\x09"])
    assert columns is not None
    assert columns.tagks == [host]
    assert columns.uniques == [[b"\x00\x00\x01", b"\x00\x00\x09"]]
    assert columns.inverse[0].tolist() == [0, 1]


@pytest.mark.slow
@pytest.mark.fallbacks
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.integers(0, 300)), max_size=3),
        min_size=1,
        max_size=30,
    )
)
def test_a_few_keys_read_one_by_one_give_the_byte_matrix_columns(
    tag_lists: list[list[tuple[int, int]]],
) -> None:
    # A few series (results.FEW_COLUMN_SERIES) are read key by key, more as a byte matrix:
    # the same columns, or None for both (keys of several lengths, a position with several
    # tag keys).
    from tsd.query import results

    keys = [
        METRIC + b"".join(k.to_bytes(3, "big") + v.to_bytes(3, "big") for k, v in tags)
        for tags in tag_lists
    ]
    few_default = results.FEW_COLUMN_SERIES
    try:
        results.FEW_COLUMN_SERIES = len(keys)
        few = tag_columns(LAYOUT, keys)
        results.FEW_COLUMN_SERIES = 0
        matrix = tag_columns(LAYOUT, keys)
    finally:
        results.FEW_COLUMN_SERIES = few_default
    assert (few is None) == (matrix is None)
    if few is not None and matrix is not None:
        assert few.tagks == matrix.tagks
        assert few.uniques == matrix.uniques
        assert [i.tolist() for i in few.inverse] == [i.tolist() for i in matrix.inverse]
        assert all(i.dtype == np.int64 for i in few.inverse)
