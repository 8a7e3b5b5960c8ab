"""The head's rows as slots (tsd.head.head): any sequence of batches, write-outs (a row
taken, more points arriving, then released) and deletes leaves the head holding exactly
what a plain model of its rows holds: per row its points' qualifiers and values in
arrival order, its point count, and the groups a scan of an hour reads. Rows leave and
come back in the same hour (a slot freed and reused by its own group), so a group's list
of slots must not give a row twice or a row gone. A slot's version changes with every
change of its row's points and when the row leaves: a (slot, version) pair names one
row's points, never two states. Rows whose points are packed (tsd/head/pack.py, here every
one or two points) hold and hand readers exactly what the same rows unpacked do."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tsd.head.pack as row_pack
from tsd.codec import KeyLayout, encode_point
from tsd.config import StorageConfig
from tsd.head import Head
from tsd.storage.base import ScanSpec
from tsd.write.head_flush import HeadSink

BASE = 1356998400
LAYOUT = KeyLayout.from_storage_config(StorageConfig())


def _key(metric: int, hour: int, series: int) -> bytes:
    return metric.to_bytes(3, "big") + (BASE + 3600 * hour).to_bytes(4, "big") + bytes([series])


ROW = st.tuples(st.integers(1, 2), st.integers(0, 1), st.integers(0, 5))
#: ("add", rows, second), ("take", row, points arriving meanwhile), ("discard", row)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(ROW, min_size=1, max_size=6), st.integers(0, 3599)),
        st.tuples(st.just("take"), ROW, st.integers(0, 2)),
        st.tuples(st.just("discard"), ROW),
    ),
    min_size=1,
    max_size=30,
)


def _read(head: Head) -> Any:
    """Everything a reader gets of every row, by key: the snapshot's runs (clean rows of
    seconds points: 2-byte qualifiers) and cells."""
    runs, block = head.snapshot([ScanSpec()]).remaining()
    rows: dict[bytes, Any] = {}
    q_at = v_at = 0
    assert runs.value_lengths is not None
    for key, n, v_len in zip(
        runs.keys, runs.counts.tolist(), runs.value_lengths.tolist(), strict=True
    ):
        rows[key] = (runs.qualifiers[q_at : q_at + 2 * n], runs.values[v_at : v_at + v_len])
        q_at += 2 * n
        v_at += v_len
    for row in block:
        rows[row.key] = row.cells
    return rows


@pytest.mark.slow
@pytest.mark.fallbacks
@settings(max_examples=150, deadline=None)
@given(ops=OPS)
@pytest.mark.parametrize("block_points", [0, 1, 2], ids=["default", "pack1", "pack2"])
def test_slots_hold_what_the_rows_hold(ops: list[tuple], block_points: int) -> None:  # type: ignore[type-arg]
    with pytest.MonkeyPatch.context() as patch:
        if block_points:
            patch.setattr(row_pack, "BLOCK_POINTS", block_points)
        head = Head(LAYOUT)
    plain = Head(LAYOUT)  # never packs at these sizes
    model: dict[bytes, tuple[bytes, bytes, int]] = {}
    batch = 0
    #: (slot, version) -> the row's key and points seen there: one state only, ever (a
    #: reader keeps what it computed of a row by them: tsd/query/head_buckets.py)
    named: dict[tuple[int, int], tuple[bytes, bytes, bytes]] = {}

    def add(keys: list[bytes], second: int) -> None:
        nonlocal batch
        rows = {}
        for key in dict.fromkeys(keys):
            hour = int.from_bytes(key[3:7], "big")
            _, qualifier, value = encode_point(hour + second, second * 7 - 100)
            rows[key] = {qualifier: value}
            q, v, n = model.get(key, (b"", b"", 0))
            model[key] = (q + qualifier, v + value, n + 1)
        _, runs = HeadSink.encode(rows)
        head.add_runs(runs, batch, float(batch))
        plain.add_runs(runs, batch, float(batch))
        batch += 1

    for op in ops:
        if op[0] == "add":
            add([_key(*row) for row in op[1]], op[2])
        elif op[0] == "take":
            key = _key(*op[1])
            taken = head.take(key)
            plain_taken = plain.take(key)
            assert taken == plain_taken
            if taken is None:
                assert key not in model
                continue
            assert (taken.qualifiers, taken.values, taken.count) == model[key]
            for second in range(op[2]):  # points arriving while the row is written out
                add([key], 3000 + second)
            head.release(taken)
            assert plain_taken is not None
            plain.release(plain_taken)
            q, v, n = model[key]
            left = (q[taken.qualifier_bytes :], v[taken.value_bytes :], n - taken.count)
            if left[2]:
                model[key] = left
            else:
                del model[key]
        else:
            key = _key(*op[1])
            head.discard([key])
            plain.discard([key])
            model.pop(key, None)
        assert len(head) == len(model)
        assert head.points == sum(n for _, _, n in model.values())
        assert _read(head) == _read(plain)
        for key, (q, v, n) in model.items():
            row = head.get(key)
            assert row is not None
            assert (bytes(row.qualifiers), bytes(row.values), row.count) == (q, v, n)
        for metric in (1, 2):
            for hour in (0, 1):
                start = _key(metric, hour, 0)[:7]
                stop = _key(metric, hour + 1, 0)[:7]
                found = head.snapshot([ScanSpec(start=start, stop=stop)]).keys()
                assert len(found) == len(set(found))
                assert sorted(found) == sorted(k for k in model if start <= k < stop)
        assert head.all_keys() == sorted(model)
        everything = head.snapshot([ScanSpec()])
        at = zip(everything.slots.tolist(), everything.versions.tolist(), strict=True)
        for key, slot_version in zip(everything.all_keys(), at, strict=True):
            q, v, _ = model[key]
            assert named.setdefault(slot_version, (key, q, v)) == (key, q, v)
    for key in list(model):
        taken = head.take(key)
        assert taken is not None
        head.release(taken)
    assert (len(head), head.points, head.bytes) == (0, 0, 0)
    assert head.oldest_batch() is None


def test_a_row_twice_in_one_batch_takes_both_runs_in_order() -> None:
    # a log record's payload can join parts of one batch (a telnet worker's among them)
    head = Head(LAYOUT)
    key = _key(1, 0, 1)
    first = [encode_point(BASE + s, s)[1:] for s in (10, 20)]
    second = [encode_point(BASE + s, s)[1:] for s in (5, 30)]
    runs = [
        (key, 2, b"".join(q for q, _ in first), b"".join(v for _, v in first)),
        (_key(1, 0, 2), 1, *first[0]),
        (key, 2, b"".join(q for q, _ in second), b"".join(v for _, v in second)),
    ]
    assert head.add_runs(runs, 0, 0.0) == 5
    row = head.get(key)
    assert row is not None
    assert bytes(row.qualifiers) == b"".join(q for q, _ in first + second)
    assert (row.count, row.clean) == (4, False)  # 5 s after 20 s: out of order
    assert len(head) == 2


#: (row, seconds of its run's points) per run of one batch: rows repeat, in or out of order
REPEATED = st.lists(
    st.tuples(st.integers(0, 3), st.lists(st.integers(0, 3599), min_size=1, max_size=4)),
    min_size=1,
    max_size=12,
)


@pytest.mark.slow
@pytest.mark.fallbacks
@settings(max_examples=150, deadline=None)
@given(before=REPEATED, runs=REPEATED)
def test_a_batch_with_rows_repeated_adds_what_its_runs_add_one_by_one(
    before: list[tuple[int, list[int]]], runs: list[tuple[int, list[int]]]
) -> None:
    def run_of(series: int, seconds: list[int]) -> tuple[bytes, int, bytes, bytes]:
        cells = [encode_point(BASE + s, s * 3 - 7)[1:] for s in seconds]
        key = _key(1, 0, series)
        return (key, len(cells), b"".join(q for q, _ in cells), b"".join(v for _, v in cells))

    # unpacked: when a row's tail is packed depends on the batches (its bytes with it)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(row_pack, "BLOCK_POINTS", 1 << 30)
        joined, one_by_one = Head(LAYOUT), Head(LAYOUT)
    for batch, group in enumerate((before, runs)):
        batch_runs = [run_of(series, seconds) for series, seconds in group]
        added = joined.add_runs(batch_runs, batch, float(batch))
        assert added == sum(one_by_one.add_runs([run], batch, float(batch)) for run in batch_runs)
    assert joined.all_keys() == one_by_one.all_keys()
    assert (joined.points, joined.bytes) == (one_by_one.points, one_by_one.bytes)
    for key in joined.all_keys():
        a, b = joined.get(key), one_by_one.get(key)
        assert a is not None
        assert b is not None
        assert (bytes(a.qualifiers), bytes(a.values), a.count, a.clean) == (
            bytes(b.qualifiers),
            bytes(b.values),
            b.count,
            b.clean,
        )
