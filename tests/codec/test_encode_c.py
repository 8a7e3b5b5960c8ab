"""The compiled ingest helpers (tsd/codec/_encode.c, tsd/protocol/_parse.c) answer exactly
as their Python specifications: python_take_known_puts (telnet lines of known series typed) and
python_encode_points_into (points into a batch's cells), on the same generated inputs,
values bit for bit, errors alike. The other tests of both functions run the compiled
one wherever it is built."""

from __future__ import annotations

import gc
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsd.native as native
from tests.protocol.test_telnet_known_puts import put_lines
from tsd.codec.qualifier import (
    _INT1_BYTES,
    _SECONDS_QUALIFIERS,
    encode_point,
    python_encode_points_into,
)
from tsd.codec.rowkey import (
    KeyLayout,
    SeriesKey,
    make_series_key,
    python_series_keys,
    python_tag_suffix,
)
from tsd.errors import CodecError
from tsd.protocol.telnet import put_line_key, python_take_known_puts, python_take_new_plain

pytestmark = pytest.mark.slow  # many generated inputs

C: Any = native.load("tsd.codec._encode")
#: the parsers' helper (tsd/protocol/_parse.c), which encodes with the same cell format
P: Any = native.load("tsd.protocol._parse")

needs_c = pytest.mark.skipif(
    C is None or P is None, reason="tsd/codec/_encode.c or tsd/protocol/_parse.c is not built"
)


def _bits(point: tuple[Any, int, int | float]) -> tuple[Any, int, type, bytes]:
    series, timestamp, value = point
    raw = struct.pack(">d", value) if isinstance(value, float) else str(value).encode()
    return series, timestamp, type(value), raw


@needs_c
@settings(max_examples=400, deadline=None)
@given(st.lists(put_lines, max_size=30), st.integers(0, 40), st.integers(0, 40), st.data())
def test_take_known_puts_as_python(lines: list[bytes], start: int, limit: int, data: Any) -> None:
    known: dict[bytes, str] = {}
    for line in lines:
        if len(line.split(b" ", 4)) == 5 and data.draw(st.booleans()):
            known[put_line_key(line)] = f"series {len(known)}"
    lines_or_none: list[bytes | None] = [*lines]
    if lines and data.draw(st.booleans()):
        lines_or_none[data.draw(st.integers(0, len(lines) - 1))] = None  # a line too long
    c_out: list[tuple[str, int, int | float]] = []
    py_out: list[tuple[str, int, int | float]] = []
    c_stop = P.take_known_puts(lines_or_none, start, known, c_out, limit)
    py_stop = python_take_known_puts(lines_or_none, start, known, py_out, limit)
    assert c_stop == py_stop
    assert [_bits(p) for p in c_out] == [_bits(p) for p in py_out]


@needs_c
@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(put_lines, st.sampled_from([b"version", b"", b"put m 1 2 k=v"])), max_size=30
    ),
    st.integers(-1, 40),
    st.integers(-1, 40),
    st.integers(0, 9),
    st.data(),
)
def test_take_new_plain_as_python(
    lines: list[bytes], start: int, limit: int, max_tags: int, data: Any
) -> None:
    """A run of plain puts of new series parsed in one call: the same items (ParsedPut,
    the same points bit for bit) and the same stop (a line not plain, too long, or of a
    known series) as the Python loop over parse_plain_put."""
    known: dict[bytes, str] = {}
    for line in lines:
        if len(line.split(b" ", 4)) == 5 and data.draw(st.booleans()):
            known[put_line_key(line)] = "known"
    lines_or_none: list[bytes | None] = [*lines]
    if lines and data.draw(st.booleans()):
        lines_or_none[data.draw(st.integers(0, len(lines) - 1))] = None  # a line too long
    c_out: list[list[Any]] = [[], [], [], [], []]
    py_out: list[list[Any]] = [[], [], [], [], []]
    args = (lines_or_none, start, limit, known, max_tags)
    c_stop = P.take_new_plain(*args, *c_out)
    py_stop = python_take_new_plain(*args, *py_out)
    assert c_stop == py_stop
    assert _columns_bits(c_out) == _columns_bits(py_out)
    assert len({len(column) for column in c_out}) == 1  # one entry a line in each column


def _columns_bits(columns: list[list[Any]]) -> list[Any]:
    """The columns (keys, metrics, tags, timestamps, values), values bit for bit with
    their types."""
    keys, metrics, tags, timestamps, values = columns
    typed = [_bits((None, stamp, value)) for stamp, value in zip(timestamps, values, strict=True)]
    return [keys, metrics, tags, list(map(type, timestamps)), typed]


DECIMALS = st.builds(
    lambda sign, whole, fraction: sign + whole + b"." + fraction,
    st.sampled_from([b"", b"-"]),
    st.text("0123456789", max_size=17).map(str.encode),
    st.text("0123456789", max_size=17).map(str.encode),
).filter(lambda text: text.strip(b"-.") != b"")


@needs_c
@settings(max_examples=2000, deadline=None)
@given(st.lists(DECIMALS, min_size=1, max_size=50))
def test_plain_decimals_typed_as_python_types_them(texts: list[bytes]) -> None:
    """A decimal of up to 15 digits is typed without strtod (one division by an exact
    power of ten); longer ones by strtod: either way the same double as float() gives,
    bit for bit (-0.0 included)."""
    lines = [b"put m 1 " + text + b" k=v" for text in [*texts, b"-0.0", b"-.0"]]
    out: list[tuple[str, int, int | float]] = []
    assert P.take_known_puts(lines, 0, {b"m k=v": "s"}, out, len(lines)) == len(lines)
    typed = [struct.pack(">d", value) for _, _, value in out]
    assert typed == [struct.pack(">d", float(line.split(b" ")[3])) for line in lines]


SERIES = [
    make_series_key(KeyLayout(), b"\x00\x00\x01", [(b"\x00\x00\x01", bytes((0, 0, i)))])
    for i in range(3)
]
TIMESTAMPS = st.one_of(
    st.integers(0, 2**32 - 1),
    st.integers(1_356_998_400, 1_356_998_400 + 7200),
    st.integers(10**12, 10**13 - 1),  # milliseconds
    st.integers(-5, 2**64),  # out of range: encode_point's error
)
VALUES = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(-(2**31) - 2, 2**31 + 1),
    st.sampled_from([0, -1, 127, 128, -128, -129, 32767, 32768, -32768, -32769, True]),
    st.floats(),
    st.floats(width=32),
    st.sampled_from([3.4028235e38, 3.4028236e38, 1e-46, -0.0, float("nan"), float("inf")]),
)


def _encode(encoder: Any, points: list[tuple[Any, int, Any]]) -> tuple[Any, Any]:
    rows: dict[bytes, dict[bytes, bytes]] = {}
    try:
        return encoder(rows, points), rows
    except CodecError as exc:
        return ("error", exc.message), rows


@needs_c
@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(SERIES), TIMESTAMPS, VALUES), max_size=20))
def test_encode_into_as_python(points: list[tuple[Any, int, Any]]) -> None:
    def compiled(rows: dict[bytes, dict[bytes, bytes]], pts: list[Any]) -> int:
        return int(C.encode_into(rows, pts, _SECONDS_QUALIFIERS, _INT1_BYTES, encode_point))

    assert _encode(compiled, points) == _encode(python_encode_points_into, points)


@needs_c
@settings(max_examples=400, deadline=None)
@given(st.lists(put_lines, max_size=30), st.integers(0, 40), st.data())
def test_take_known_into_as_python(lines: list[bytes], limit: int, data: Any) -> None:
    """Typing and encoding in one pass: the cells of python_take_known_puts's points
    encoded by python_encode_points_into, the same counts."""
    known: dict[bytes, Any] = {}
    for line in lines:
        if len(line.split(b" ", 4)) == 5 and data.draw(st.booleans()):
            known[put_line_key(line)] = SERIES[len(known) % len(SERIES)]
    c_rows: dict[bytes, dict[bytes, bytes]] = {}
    c_stop, c_taken, c_added = P.take_known_into(
        lines, 0, known, c_rows, limit, _SECONDS_QUALIFIERS, _INT1_BYTES, encode_point
    )
    points: list[tuple[Any, int, int | float]] = []
    py_stop = python_take_known_puts(lines, 0, known, points, limit)
    py_rows: dict[bytes, dict[bytes, bytes]] = {}
    py_added = python_encode_points_into(py_rows, points)
    assert (c_stop, c_taken, c_added) == (py_stop, len(points), py_added)
    assert c_rows == py_rows


@needs_c
def test_rows_of_interleaved_series_and_hours_as_python() -> None:
    """The compiled encoder reads a series' last row key from its slots (no call) when
    the hour is the one asked last, and asks ``row_key`` otherwise: points of three
    series alternating, their hours going back and forth, land in the rows Python
    gives them."""
    base = 1_356_998_400
    points: list[tuple[Any, int, Any]] = [
        (SERIES[i % 3], base + (i % 7) * 1_000 + i, i if i % 2 else i / 4) for i in range(60)
    ]

    def compiled(rows: dict[bytes, dict[bytes, bytes]], pts: list[Any]) -> int:
        return int(C.encode_into(rows, pts, _SECONDS_QUALIFIERS, _INT1_BYTES, encode_point))

    c_added, c_rows = _encode(compiled, points)
    py_added, py_rows = _encode(python_encode_points_into, points)
    assert (c_added, c_rows) == (py_added, py_rows)
    assert len(c_rows) == 3 * 2  # three series over two hours
    for series, timestamp, _ in points:
        assert series.row_key(timestamp - timestamp % 3600) in c_rows


def _row_key_not_called(series: SeriesKey, base_time_s: int) -> bytes:
    raise AssertionError("the compiled encoder called row_key: a slot it reads is missing")


@needs_c
@pytest.mark.parametrize("salt", [b"", b"\x02"])
def test_a_new_series_row_key_is_built_and_kept_as_row_key_keeps_it(salt: bytes) -> None:
    """A series' first point of an hour (a new series, or a new hour) makes its row key
    without calling row_key: the key row_key makes, kept in the slots row_key keeps it
    in (the next point of the hour reads them), the hour's int shared between series;
    timestamps in milliseconds and past 2**32 seconds' hours included."""
    hours = [1_356_998_400, 1_357_002_000, 4_294_965_600]
    for timestamp in (hours[0] + 5, hours[1] + 7, hours[2] + 1, 1_356_998_400_123):
        made = [SeriesKey(salt, b"\x00\x00\x01", bytes((0, 0, 1, 0, 0, i))) for i in range(3)]
        spec = [SeriesKey(salt, b"\x00\x00\x01", bytes((0, 0, 1, 0, 0, i))) for i in range(3)]
        rows: dict[bytes, dict[bytes, bytes]] = {}
        with pytest.MonkeyPatch.context() as patch:  # the key is made in C, not asked for
            patch.setattr(SeriesKey, "row_key", _row_key_not_called)
            C.encode_into(
                rows,
                [(s, timestamp, 1) for s in made],
                _SECONDS_QUALIFIERS,
                _INT1_BYTES,
                encode_point,
            )
        seconds = timestamp // 1000 if timestamp > 2**32 else timestamp
        base = seconds - seconds % 3600
        assert list(rows) == [s.row_key(base) for s in spec]
        for series, expected in zip(made, spec, strict=True):
            assert (series._last_base, series._last_key) == (base, expected.row_key(base))
            assert series.row_key(base) is series._last_key
        assert made[0]._last_base is made[2]._last_base


_UID = st.binary(min_size=1, max_size=4)


@needs_c
@settings(max_examples=400, deadline=None)
@given(
    pairs=st.lists(st.tuples(_UID, _UID), max_size=10),
    widths=st.sampled_from([(1, 1), (2, 3), (3, 3), (4, 2)]),
)
def test_tag_suffix_answers_as_its_python_version(
    pairs: list[tuple[bytes, bytes]], widths: tuple[int, int]
) -> None:
    """The tag pairs joined in tag key order, or None for a pair of other widths or a tag
    key given twice (make_series_key then raises the encoder's error)."""
    tagk_width, tagv_width = widths
    assert C.tag_suffix(pairs, tagk_width, tagv_width) == python_tag_suffix(
        pairs, tagk_width, tagv_width
    )
    assert C.tag_suffix(tuple(pairs), tagk_width, tagv_width) == python_tag_suffix(
        tuple(pairs), tagk_width, tagv_width
    )


_NAMES = st.sampled_from(["a", "b", "c", "host", "dc", "x"])
#: a UID batch's answer: some names with UIDs (of the widths, or not), others without
_UID_MAPS = st.dictionaries(_NAMES, st.binary(min_size=1, max_size=4), max_size=6)


def _slots(key: SeriesKey | None) -> tuple[Any, ...] | None:
    names = ("salt", "metric_uid", "_prefix", "_tsuid", "_last_base", "_last_key")
    return None if key is None else tuple(getattr(key, name) for name in names)


@needs_c
@settings(max_examples=400, deadline=None)
@given(
    series=st.lists(
        st.tuples(_NAMES, st.lists(st.tuples(_NAMES, _NAMES), max_size=4).map(tuple)),
        max_size=12,
    ),
    metric_uids=_UID_MAPS,
    key_uids=_UID_MAPS,
    value_uids=_UID_MAPS,
    widths=st.sampled_from([(1, 1, 1), (3, 3, 3), (2, 1, 3), (4, 2, 2)]),
)
def test_series_keys_answer_as_their_python_version(
    series: list[tuple[str, tuple[tuple[str, str], ...]]],
    metric_uids: dict[str, bytes],
    key_uids: dict[str, bytes],
    value_uids: dict[str, bytes],
    widths: tuple[int, int, int],
) -> None:
    """A burst's row-key templates made at once: slot for slot the SeriesKey the Python
    version makes, which is make_series_key's; None where a name has no UID, a UID is of
    another width or a tag key repeats (the per-series path then says which)."""
    metrics = [metric for metric, _ in series]
    tags_list = [tags for _, tags in series]
    args = (metrics, tags_list, metric_uids, key_uids, value_uids, *widths)
    made = C.series_keys(SeriesKey, *args)
    expected = python_series_keys(SeriesKey, *args)
    assert list(map(_slots, made)) == list(map(_slots, expected))
    layout = KeyLayout(*widths)
    for (metric, tags), key in zip(series, expected, strict=True):
        if key is None:
            continue
        pairs = [(key_uids[k], value_uids[v]) for k, v in tags]
        assert _slots(key) == _slots(make_series_key(layout, metric_uids[metric], pairs))
        assert key.row_key(3600) == make_series_key(layout, key.metric_uid, pairs).row_key(3600)


@needs_c
def test_series_keys_made_in_bulk_are_left_to_reference_counting() -> None:
    """A burst's templates hold bytes and ints only (the row-key cache too, once used):
    the cyclic collector does not walk them (millions live at a million series)."""
    (key,) = C.series_keys(
        SeriesKey, ["m"], [(("h", "a"),)], {"m": b"\1"}, {"h": b"\1"}, {"a": b"\2"}, 1, 1, 1
    )
    key.row_key(3600)
    assert not gc.is_tracked(key)
    assert all(type(value) in (bytes, int) for value in _slots(key) or ())


_METRICS = ["sys.cpu", "sys.mem", "m"]
_TAGS = [{"host": "a"}, {"host": "b", "dc": "lga"}, {}]


@needs_c
@settings(max_examples=300, deadline=None)
@given(
    points=st.lists(
        st.tuples(
            st.sampled_from(_METRICS),
            st.integers(1, 2**32),
            st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(-1e18, 1e18)),
            st.sampled_from(_TAGS),
        ),
        min_size=1,
        max_size=20,
    ),
    known_keys=st.sets(st.tuples(st.sampled_from(_METRICS), st.integers(0, len(_TAGS) - 1))),
)
def test_known_usual_points_answers_as_its_python_version(
    points: list[tuple[str, int, int | float, dict[str, str]]],
    known_keys: set[tuple[str, int]],
) -> None:
    """A decoded /api/put body's points of known series, or None once one is unknown."""
    import orjson

    from tsd.protocol.put_json import _USUAL_BODY, python_known_usual_points
    from tsd.write.ingest import RefCache

    body = orjson.dumps(
        [{"metric": m, "timestamp": t, "value": v, "tags": tags} for m, t, v, tags in points]
    )
    usual = _USUAL_BODY.decode(body)
    known = RefCache(100)
    for metric, tags_at in known_keys:
        series: Any = object()  # stands for a series' ref: only its identity is compared
        known[metric.encode() + b"\xff" + orjson.dumps(_TAGS[tags_at])] = series
    answer = P.known_usual_points(usual, known)
    assert answer == python_known_usual_points(usual, known)
    assert answer == python_known_usual_points(usual, dict(known))


@needs_c
def test_known_usual_points_reads_other_objects_through_their_attributes() -> None:
    """Objects that are not the decoder's structs (no slots to read) give the same
    answer through getattr, and one without a field raises as getattr does."""
    from types import SimpleNamespace

    from tsd.protocol.put_json import python_known_usual_points

    series: Any = object()
    known = {b'm\xff{"a":"b"}': series}
    usual: Any = [SimpleNamespace(metric="m", timestamp=5, value=1.5, tags=b'{"a":"b"}')] * 3
    assert P.known_usual_points(usual, known) == [(series, 5, 1.5)] * 3
    assert P.known_usual_points(usual, known) == python_known_usual_points(usual, known)
    with pytest.raises(AttributeError):
        P.known_usual_points([SimpleNamespace(metric="m")], known)


@needs_c
@pytest.mark.parametrize("metric", ["m", "métrique", "m\ud800", "m\xff"])
def test_usual_keys_of_any_metric_are_built_as_python_builds_them(metric: str) -> None:
    """Non-ASCII and lone-surrogate metrics (JSON allows "\\ud800") key the same bytes in
    C as in usual_key, so either finds the other's series; no key crosses the 0xFF."""
    from types import SimpleNamespace

    from tsd.protocol.put_json import python_known_usual_points, usual_key

    point: Any = SimpleNamespace(metric=metric, timestamp=5, value=1, tags=b'{"a":"b"}')
    series: Any = object()
    known = {usual_key(point): series}
    assert P.known_usual_points([point], known) == [(series, 5, 1)]
    assert python_known_usual_points([point], known) == [(series, 5, 1)]
    other: Any = SimpleNamespace(metric=metric + "\xff", timestamp=5, value=1, tags=b'{"a":"b"}')
    assert P.known_usual_points([other], known) is None


@needs_c
def test_take_new_plain_tags_are_left_to_reference_counting() -> None:
    """A line's tag tuple and its pairs hold str only: made untracked, as the cyclic
    collector's first pass would leave them; a repeated tag's pair is shared."""
    lines: list[bytes | None] = [b"put m 1 2 host=a dc=lga", b"put m 1 2 host=b dc=lga"]
    columns: list[list[Any]] = [[], [], [], [], []]
    assert P.take_new_plain(lines, 0, 2, {}, 8, *columns) == 2
    first, second = columns[2]
    assert first == (("dc", "lga"), ("host", "a"))
    assert not any(map(gc.is_tracked, [first, second, *first, *second]))
    assert first[0] is second[0]


@needs_c
def test_take_new_plain_from_a_negative_start_stops_where_python_does() -> None:
    """The run ends at min(len(lines), start + limit), taken before start is clamped."""
    lines: list[bytes | None] = [b"put m 1 2 k=v", b"put m 1 2 k=w", b"put m 1 2 k=x"]
    for start in (-3, -1, 0, 1, 3, 5):
        for limit in (-1, 0, 1, 2, 5):
            c_out: list[list[Any]] = [[], [], [], [], []]
            py_out: list[list[Any]] = [[], [], [], [], []]
            args: tuple[list[bytes | None], int, int, dict[bytes, str], int] = (
                lines,
                start,
                limit,
                {},
                1,
            )
            c_stop = P.take_new_plain(*args, *c_out)
            py_stop = python_take_new_plain(*args, *py_out)
            assert (c_stop, c_out) == (py_stop, py_out)
