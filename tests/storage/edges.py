"""Compacted cells of integers at the edges of the embedded store's fast cell form
(magnitudes below 2**61 stay bit-packed integers, docs/format/embedded.md) and of int64,
shared by the packed round-trip and the points tests."""

from __future__ import annotations

from tsd.codec import compact_row, encode_point

BASE = 1356998400

#: int64's ends and the integers around the fast form's limit, 2**61
EDGE_INTEGERS = (
    -(2**63),
    -(2**63) + 1,
    -(2**61) - 1,
    -(2**61),
    -(2**61) + 1,
    2**61 - 1,
    2**61,
    2**61 + 1,
    2**63 - 2,
    2**63 - 1,
)

#: pairs whose alternation gives the largest deltas: within the form's limit, at it, int64's
EDGE_PAIRS = ((-(2**61) + 1, 2**61 - 1), (-(2**61), 2**61), (-(2**63), 2**63 - 1))


def edge_cells() -> list[tuple[list[int], tuple[bytes, bytes]]]:
    """(integers, compacted cell): each edge integer after 28 zeros (canonical flags of two
    widths: no flags column), then each pair alternating 30 times (8-byte flags throughout):
    long enough that the packed form is not kept verbatim."""
    rows = [[0] * 28 + [value] for value in EDGE_INTEGERS]
    rows += [[pair[i % 2] for i in range(30)] for pair in EDGE_PAIRS]
    out = []
    for values in rows:
        cell = compact_row([encode_point(BASE + i, v)[1:] for i, v in enumerate(values)])
        assert cell is not None
        out.append((values, cell))
    return out
