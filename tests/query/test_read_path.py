"""The read paths (tsd/query/read_path.py) on a real store: whichever path reads the rows,
the answer is the scan's; the planner picks the path the docs say; a query pinning one
series out of many receives no data cells of other series (counted by the engine's
showStats, from what storage returned)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import tsd.query.engine as engine_module
import tsd.query.reader as reader_module
from tests.query.tsdb_harness import QueryHarness, query_harness
from tsd.config import StorageConfig
from tsd.query.plan import ScanPlan
from tsd.query.read_path import (
    KEY_ONLY,
    MULTI_GET,
    RANGES,
    SCAN,
    KeyRange,
    ReadRequest,
    narrowed_ranges,
    prefix_stop,
    split_keys,
    time_slices,
)
from tsd.storage.base import ScanSpec, Storage
from tsd.storage.embedded import EmbeddedStorage

T0 = 1356998400  # an hour boundary
HOSTS = [f"h{i}" for i in range(6)]
CPUS = [str(i) for i in range(4)]


@pytest.fixture(params=[0, 3], ids=["unsalted", "salted"])
async def harness(
    request: pytest.FixtureRequest, storage: Storage, storage_config: StorageConfig
) -> AsyncIterator[QueryHarness]:
    buckets = request.param
    options = {"salt_width": 1, "salt_buckets": buckets} if buckets else {}
    async with query_harness(storage, storage_config, storage_options=options) as h:
        points: list[tuple[str, dict[str, str], int, int | float]] = []
        for n, host in enumerate(HOSTS):
            for cpu in CPUS:
                for i in range(0, 3 * 3600, 600):  # three hours, a point every 10 min
                    points.append(("m", {"host": host, "cpu": cpu}, T0 + i + n, n * 10 + i % 7))
        # series with one more tag: found by non-explicit queries, never by explicit ones
        points += [("m", {"host": "h1", "cpu": "2", "dc": "x"}, T0 + 30, 2.5)]
        points += [("m", {"host": "h1"}, T0 + 7200 + 5, 7)]
        await h.load(points)
        await h.write_out()  # the paths differ in what they ask storage for
        yield h


QUERIES = [
    ("m=sum:m{host=h1}", RANGES),
    ("m=sum:m{host=h1|h3}", RANGES),
    ("m=none:m{host=h1,cpu=2}", RANGES),
    # cpu's UID is above host's: rows starting with host are read by a key-only pass
    ("m=none:m{cpu=2}", RANGES),
    ("m=none:m{cpu=2|3,dc=x}", RANGES),
    ("m=sum:m{host=h1|h4,cpu=*}", RANGES),
    ("m=sum:explicit_tags:m{host=h1,cpu=*}", RANGES),
    ("m=sum:explicit_tags:m{host=h1}", MULTI_GET),
    ("m=sum:explicit_tags:m{host=h1,cpu=2}", MULTI_GET),
    ("m=none:explicit_tags:m{host=h1|h2,cpu=2|3}", MULTI_GET),
    ("m=sum:m{host=*}", SCAN),
    ("m=sum:10m-avg:m{cpu=*}", SCAN),
    ("m=sum:m", SCAN),
    ("m=sum:m{host=h9}", None),  # no such value: an error whatever the path
]


async def _ask(h: QueryHarness, query: str) -> Any:
    params: dict[str, list[str]] = {"start": [str(T0)], "end": [str(T0 + 3 * 3600 - 1)]}
    for part in query.split("&"):
        key, _, value = part.partition("=")
        params.setdefault(key, []).append(value)
    params["show_stats"] = ["true"]
    try:
        return await h.query(params)
    except Exception as exc:  # the error is part of the answer
        return repr(exc)


def _without_stats(answer: Any) -> Any:
    if not isinstance(answer, list):
        return answer
    return [{k: v for k, v in s.items() if k != "stats"} for s in answer]


@pytest.mark.parametrize(("query", "expected_path"), QUERIES)
async def test_every_path_gives_the_scans_answer(
    harness: QueryHarness, query: str, expected_path: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = await _ask(harness, query)
    if expected_path is not None:
        assert chosen, "the query should find series"
        assert {s["stats"]["readPath"] for s in chosen} == {expected_path}
    paths = [SCAN, KEY_ONLY, RANGES] + ([MULTI_GET] if expected_path == MULTI_GET else [])
    for path in paths:
        monkeypatch.setattr(engine_module, "choose_path", lambda plan, request, p=path: p)
        answer = await _ask(harness, query)
        assert _without_stats(answer) == _without_stats(chosen), path


DOWNSAMPLED = [
    "m=sum:10m-avg:m{cpu=*}",
    "m=sum:30m-sum:m{host=h1}",
    "m=none:20m-count:m{host=h1|h3,cpu=2}",
    "m=avg:1h-sum:m",
]


@pytest.mark.parametrize("query", DOWNSAMPLED)
async def test_rows_reduced_where_storage_reads_them_answer_as_when_reduced_after(
    harness: QueryHarness, query: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A downsampled raw read hands storage the reduction to buckets (reader.py's
    ``_bucket_work``): the embedded store does it in its reader threads, HBase leaves it to
    the reader. Whichever does it, on every path, the answer is the one of a read that
    reduces every block after reading it."""
    prepared: list[bool] = []
    decode = reader_module._OneRead.decode

    async def noted(self: Any, block: Any) -> None:
        prepared.append(block.prepared is not None)
        await decode(self, block)

    monkeypatch.setattr(reader_module._OneRead, "decode", noted)
    chosen = await _ask(harness, query)
    assert isinstance(chosen, list), chosen
    assert chosen
    assert prepared
    # (the blocks of a getRows, of the ranges a key-only pass found, come without)
    assert any(prepared) == isinstance(harness.storage, EmbeddedStorage)
    for path in (SCAN, KEY_ONLY, RANGES):
        monkeypatch.setattr(engine_module, "choose_path", lambda plan, request, p=path: p)
        assert _without_stats(await _ask(harness, query)) == _without_stats(chosen), path
    monkeypatch.setattr(reader_module, "_bucket_work", lambda block, **kwargs: None)
    for path in (SCAN, RANGES):
        monkeypatch.setattr(engine_module, "choose_path", lambda plan, request, p=path: p)
        assert _without_stats(await _ask(harness, query)) == _without_stats(chosen), path


async def test_a_stored_row_the_head_holds_points_of_is_reduced_with_them(
    harness: QueryHarness,
) -> None:
    """A block storage reduced while the head holds points of one of its rows is reduced
    again with the head's points merged in: the new point is in its bucket's answer."""
    query = "m=sum:10m-sum:m{host=h1,cpu=2}"
    before = await _ask(harness, query)
    await harness.load([("m", {"host": "h1", "cpu": "2"}, T0 + 1200 + 33, 1000)])
    after = await _ask(harness, query)
    assert after[0]["dps"][str(T0 + 1200)] == before[0]["dps"][str(T0 + 1200)] + 1000
    assert {k: v for k, v in after[0]["dps"].items() if k != str(T0 + 1200)} == {
        k: v for k, v in before[0]["dps"].items() if k != str(T0 + 1200)
    }


async def test_tsuid_queries_use_a_multi_get(harness: QueryHarness) -> None:
    found = await _ask(harness, "m=none:explicit_tags:m{host=h2,cpu=1}&show_tsuids=true")
    tsuid = found[0]["tsuids"][0]
    params = {"start": [str(T0)], "end": [str(T0 + 3 * 3600 - 1)], "tsuid": [f"sum:{tsuid}"]}
    params["show_stats"] = ["true"]
    answer = await harness.query(params)
    assert answer[0]["stats"]["readPath"] == MULTI_GET
    assert answer[0]["dps"] == found[0]["dps"]


async def test_a_scan_is_cut_in_as_many_reads_as_its_storage_takes_at_once(
    harness: QueryHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Storage.parallel_reads`` slices: the hours of ``m`` in one scan, or in several
    (salted: a scan per bucket either way); the answer the same. Unsalted, the slices are
    whole hours, each cut again at row keys where storage tells its last key cheaply
    (HBase: ``_key_ranges``): the scans partition the one scan's range exactly."""
    storage = harness.storage
    read = storage.scan_blocks
    scans: list[ScanSpec] = []

    def counted(table: str, spec: ScanSpec, stats: Any = None, work: Any = None) -> Any:
        scans.append(spec)
        return read(table, spec, stats, work)

    monkeypatch.setattr(storage, "scan_blocks", counted)
    answers = []
    whole: list[ScanSpec] = []
    for parallel in (1, 3):
        monkeypatch.setattr(storage, "parallel_reads", lambda n=parallel: n)
        scans.clear()
        answers.append(_without_stats(await _ask(harness, "m=sum:m{host=*}")))
        if harness.config.storage.salt_width:
            assert len(scans) == harness.config.storage.salt_buckets
        elif parallel == 1:
            assert len(scans) == 1
            whole = list(scans)
        else:  # hour slices (at most `parallel`), each cut in at most that many by keys
            ordered = sorted(scans, key=lambda spec: spec.start)
            hours_only = all(len(spec.start) == len(whole[0].start) for spec in ordered)
            assert 1 < len(ordered) <= (parallel if hours_only else parallel * parallel)
            assert all(a.stop == b.start for a, b in zip(ordered, ordered[1:], strict=False))
            assert (ordered[0].start, ordered[-1].stop) == (whole[0].start, whole[0].stop)
    assert answers[0]
    assert answers[0] == answers[1]


def test_time_slices_cover_the_range_in_whole_hours() -> None:
    spec = ScanSpec(b"\x01" + T0.to_bytes(4, "big"), b"\x01" + (T0 + 5 * 3600).to_bytes(4, "big"))
    slices = time_slices(spec, T0, T0 + 5 * 3600, 4)
    assert slices[0].start == spec.start
    assert slices[-1].stop == spec.stop
    for a, b in zip(slices, slices[1:], strict=False):
        assert a.stop == b.start
        assert int.from_bytes(a.stop[1:], "big") % 3600 == 0
    assert len(slices) == 3  # 5 hours in slices of 2: 2 + 2 + 1
    assert time_slices(spec, T0, T0 + 3600, 4) == [spec]


@pytest.fixture
async def wide(storage: Storage, storage_config: StorageConfig) -> AsyncIterator[QueryHarness]:
    """10,000 series (100 hosts x 100 cpus), one point each."""
    async with query_harness(storage, storage_config) as h:
        await h.load(
            ("w", {"host": f"h{h_}", "cpu": f"c{c}"}, T0 + 60, h_ * 100 + c)
            for h_ in range(100)
            for c in range(100)
        )
        await h.write_out()  # these tests are about what storage sends
        yield h


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
@pytest.mark.parametrize(
    ("extra", "path"),
    [("none:", RANGES), ("none:", KEY_ONLY), ("none:explicit_tags:", MULTI_GET)],
    ids=["ranges", "key-only", "multi-get"],
)
async def test_pinning_one_series_of_10000_reads_only_its_cells(
    wide: QueryHarness, extra: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path == KEY_ONLY:  # the planner's fallback when there are too many ranges
        monkeypatch.setattr(engine_module, "choose_path", lambda plan, request: KEY_ONLY)
    params = {
        "start": [str(T0)],
        "end": [str(T0 + 3599)],
        "m": [extra + "w{host=h42,cpu=c7}"],
        "show_stats": ["true"],
    }
    answer = await wide.query(params)
    assert [s["dps"] for s in answer] == [{str(T0 + 60): 4207}]
    stats = answer[0]["stats"]
    assert stats["readPath"] == path
    # data cells received: the one series' one cell; other series came as keys at most
    assert stats["columnsFromStorage"] == 1
    assert stats["rowsFromStorage"] == 1
    # keys read apart (HBase: every row's key; the embedded store filters keys itself);
    # the ranges path reads the one range holding only the series' rows
    if path == KEY_ONLY:
        assert 1 <= stats["keyOnlyRows"] <= 10_000
    else:
        assert stats["keyOnlyRows"] == 0


@pytest.mark.parametrize(
    ("first", "last"),
    [
        (b"\x00\x00\x01ABCD\x00\x00\x01\x00\x00\x05", b"\x00\x00\x01ABCD\x00\x00\x01\x00\x27\x10"),
        (b"m\x00", b"m\x00\x00"),
        (b"a", b"b"),
        (b"\x01\xff\xff", b"\x02"),
    ],
)
def test_split_keys_fall_strictly_between(first: bytes, last: bytes) -> None:
    keys = split_keys(first, last, 4)
    assert keys == sorted(set(keys))
    assert all(first < k < last for k in keys)


@pytest.mark.parametrize(
    ("prefix", "stop"), [(b"a", b"b"), (b"a\xff", b"b"), (b"\x00\xff\xff", b"\x01"), (b"\xff", b"")]
)
def test_prefix_stop_is_above_every_key_with_the_prefix(prefix: bytes, stop: bytes) -> None:
    assert prefix_stop(prefix) == stop


def _plan(hours: int = 1, buckets: int = 1) -> ScanPlan:
    specs = tuple(
        ScanSpec(
            bytes([b]) + b"M" + T0.to_bytes(4, "big"),
            bytes([b]) + b"M" + (T0 + hours * 3600).to_bytes(4, "big"),
        )
        for b in range(buckets)
    )
    return ScanPlan(b"M", specs, T0, T0 + hours * 3600)


K1, K3, V = b"\x00\x01", b"\x00\x03", [bytes([0, i]) for i in range(10)]


def _request(pins: list[tuple[bytes, list[bytes]]], decide: bool = True) -> ReadRequest:
    pairs = tuple(tuple(k + v for v in vs) for k, vs in pins)
    return ReadRequest(None, True, pairs, tuple((k, tuple(vs)) for k, vs in pins), decide)


def test_ranges_of_pins() -> None:
    """The lowest possible tag key pinned: no range below it; a key above another pinned one
    leaves the range of tag keys between them (undecided); adjacent values join."""
    hour = b"\x00M" + T0.to_bytes(4, "big")
    ranges = narrowed_ranges(_plan(), _request([(K1, [V[1], V[2], V[5]]), (K3, [V[7]])]))
    expected = []
    for v in (V[1], V[2], V[5]):
        expected += [
            KeyRange(hour + K1 + v, hour + K1 + v + K3, False),
            KeyRange(hour + K1 + v + K3 + V[7], hour + K1 + v + K3 + V[8], True),
        ]
    assert ranges == expected
    # a first pinned key above the lowest UID: rows may start with a lower key
    ranges = narrowed_ranges(_plan(), _request([(K3, [V[1], V[2]])]))
    assert ranges == [
        KeyRange(hour, hour + K3, False),
        KeyRange(hour + K3 + V[1], hour + K3 + V[3], True),
    ]


def test_every_hours_ranges_are_its_own() -> None:
    """Hours after the first take the first's ranges under their own prefix: the same as
    each hour narrowed alone, a tag key and value of ``ff ff`` (its range's stop carries
    into the hour's bytes) included."""
    top = b"\xff\xff"
    for pins in (
        [(K1, [V[1], V[2], V[5]]), (K3, [V[7]])],
        [(K3, [V[1], top])],
        [(K1, [top]), (K3, [V[2], top])],
        [(top, [V[1], top])],  # tag key and value all ff: the stop is the next hour's
        [(K3, [V[2]]), (top, [top])],
    ):
        together = narrowed_ranges(_plan(hours=3), _request(pins))
        alone = []
        for h in range(3):
            hour = ScanPlan(b"M", (ScanSpec(
                b"\x00M" + (T0 + h * 3600).to_bytes(4, "big"),
                b"\x00M" + (T0 + (h + 1) * 3600).to_bytes(4, "big"),
            ),), T0 + h * 3600, T0 + (h + 1) * 3600)  # fmt: skip
            found = narrowed_ranges(hour, _request(pins))
            assert found is not None
            alone += found
        assert together is not None
        # adjacent ranges of consecutive hours join: compare the keys they cover
        assert [(r.start, r.decided) for r in together][0] == (alone[0].start, alone[0].decided)
        assert _covered(together) == _covered(alone)


def _covered(ranges: list[KeyRange]) -> list[KeyRange]:
    """``ranges`` with adjacent ones of the same decision joined."""
    joined: list[KeyRange] = []
    for r in ranges:
        if joined and joined[-1].stop == r.start and joined[-1].decided == r.decided:
            joined[-1] = KeyRange(joined[-1].start, r.stop, r.decided)
        else:
            joined.append(r)
    return joined


def test_ranges_per_hour_and_bucket_and_their_limit() -> None:
    ranges = narrowed_ranges(_plan(hours=3, buckets=2), _request([(K1, [V[1]])]))
    assert ranges is not None
    assert len(ranges) == 6
    assert [r.start[0] for r in ranges] == [0, 0, 0, 1, 1, 1]
    # too many combinations: the first pinned key alone, nothing decided
    many = [bytes([0, i]) for i in range(60)]
    ranges = narrowed_ranges(_plan(hours=2), _request([(K1, many), (K3, many)]))
    assert ranges is not None
    assert not any(r.decided for r in ranges)
    assert narrowed_ranges(_plan(hours=24, buckets=4), _request([(K1, many)])) is None
