"""Row keys' lengths and base times (tsd.query.decode.key_times): the compiled helper's
one pass gives what the Python path, its spec, gives; keys it cannot read (too short, not
bytes) send it to the Python path rather than to a wrong answer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsd.codec import KeyLayout, encode_row_key
from tsd.query import decode as decode_module
from tsd.query.decode import base_times_s, key_times, key_times_python

LAYOUT = KeyLayout()
compiled = pytest.mark.skipif(decode_module._C is None, reason="the C helper is not built")


@st.composite
def row_keys(draw: st.DrawFn) -> list[bytes]:
    """Row keys of one metric, 0-3 tag pairs each (so of several lengths or one)."""
    keys = []
    for _ in range(draw(st.integers(1, 30))):
        base = draw(st.integers(0, 2**32 - 1))
        base -= base % 3600
        pairs = draw(st.integers(0, 3))
        tags = [
            (bytes([0, 0, k + 1]), draw(st.binary(min_size=3, max_size=3))) for k in range(pairs)
        ]
        keys.append(encode_row_key(LAYOUT, b"\x00\x00\x07", base, tags))
    return keys


@pytest.mark.slow
@pytest.mark.fallbacks
@compiled
@settings(max_examples=200, deadline=None)
@given(row_keys())
def test_compiled_key_times_agree_with_python(keys: list[bytes]) -> None:
    lengths, bases = key_times(LAYOUT, keys)
    want_lengths, want_bases = key_times_python(LAYOUT, keys)
    assert lengths.dtype == np.int64
    assert bases.dtype == np.int64
    np.testing.assert_array_equal(lengths, want_lengths)
    np.testing.assert_array_equal(bases, want_bases)
    assert lengths.tolist() == [len(k) for k in keys]
    at = LAYOUT.tags_start - 4
    assert bases.tolist() == [int.from_bytes(k[at : at + 4], "big") for k in keys]


@compiled
def test_compiled_helper_refuses_what_it_cannot_read() -> None:
    at = LAYOUT.tags_start - 4
    assert decode_module._C.key_times([b"\x00" * (at + 3)], at) is None
    assert decode_module._C.key_times([bytearray(at + 4)], at) is None
    assert decode_module._C.key_times([b"\x00" * at + b"\x00\x00\x0e\x10", "x"], at) is None


def test_key_times_of_no_keys_and_of_a_short_key() -> None:
    lengths, bases = key_times(LAYOUT, [])
    assert len(lengths) == len(bases) == 0
    key = encode_row_key(LAYOUT, b"\x00\x00\x07", 7200, [])
    short = key[:-1]  # the Python path reads what is there
    lengths, bases = key_times(LAYOUT, [key, short])
    assert lengths.tolist() == [len(key), len(short)]
    assert base_times_s(LAYOUT, [key]).tolist() == [7200]
