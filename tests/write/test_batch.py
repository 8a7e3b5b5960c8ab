"""The batching policy, with an injected clock."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from tsd.codec import KeyLayout, SeriesKey, make_series_key
from tsd.codec.qualifier import encode_points_into
from tsd.wal.record import (
    EncodedPart,
    RowRun,
    SampleBlock,
    decode_row_runs,
    sample_runs,
    seal_part,
)
from tsd.write.batch import Batch, BatchPolicy


def make_batch(max_cells: int = 3, interval_s: float = 1.0) -> Batch:
    return Batch(BatchPolicy(max_cells=max_cells, interval_s=interval_s))


def test_empty_batch_is_never_due_or_full() -> None:
    batch = make_batch()
    assert batch.is_empty()
    assert not batch.is_full()
    assert not batch.is_due(1e12)
    assert batch.due_in(0.0) is None


def test_batch_is_due_interval_after_its_first_cell() -> None:
    batch = make_batch(interval_s=1.0)
    batch.add_cell(b"r", b"\x00\x00", b"\x01", now=10.0)
    batch.add_cell(b"r", b"\x00\x10", b"\x02", now=10.9)  # later cells do not move the deadline
    assert not batch.is_due(10.999)
    assert batch.due_in(10.25) == pytest.approx(0.75)
    assert batch.is_due(11.0)
    assert batch.due_in(12.0) == 0.0


def test_batch_is_full_at_max_cells() -> None:
    batch = make_batch(max_cells=3)
    for i in range(2):
        batch.add_cell(b"r", bytes((0, i << 4)), b"\x01", now=0.0)
    assert not batch.is_full()
    batch.add_cell(b"s", b"\x00\x00", b"\x01", now=0.0)
    assert batch.is_full()
    assert len(batch) == 3


def test_same_cell_twice_keeps_the_last_value_and_counts_once() -> None:
    batch = make_batch()
    batch.add_cell(b"r", b"\x00\x00", b"\x01", now=0.0)
    batch.add_cell(b"r", b"\x00\x00", b"\x02", now=0.0)
    assert len(batch) == 1
    assert list(batch.sorted_cells()) == [(b"r", b"\x00\x00", b"\x02")]


def test_cells_come_out_sorted_by_row_then_qualifier() -> None:
    batch = make_batch(max_cells=100)
    cells = [
        (b"\x00\x00\x02", b"\x00\x10", b"\x01"),
        (b"\x00\x00\x01", b"\xf0\x00\x00\x00", b"\x02"),
        (b"\x00\x00\x01", b"\x00\x20", b"\x03"),
        (b"\x00\x00\x01", b"\x00\x10", b"\x04"),
    ]
    for row, qualifier, value in cells:
        batch.add_cell(row, qualifier, value, now=0.0)
    assert list(batch.sorted_cells()) == sorted(cells)
    assert list(batch.sorted_rows()) == [
        (
            b"\x00\x00\x01",
            [(b"\x00\x10", b"\x04"), (b"\x00\x20", b"\x03"), (b"\xf0\x00\x00\x00", b"\x02")],
        ),
        (b"\x00\x00\x02", [(b"\x00\x10", b"\x01")]),
    ]


@pytest.mark.parametrize(
    ("max_cells", "interval_s"),
    [pytest.param(0, 1.0, id="no_cells"), pytest.param(1, 0.0, id="no_interval")],
)
def test_policy_refuses_nonsense(max_cells: int, interval_s: float) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        BatchPolicy(max_cells=max_cells, interval_s=interval_s)


def test_points_in_bulk_are_encoded_into_cells() -> None:
    layout = KeyLayout()
    series = make_series_key(layout, b"\x00\x00\x01", [(b"\x00\x00\x01", b"\x00\x00\x02")])
    batch = make_batch(max_cells=100)
    t0 = 1356998400
    batch.add_points([(series, t0, 1), (series, t0 + 1, 0.5), (series, t0, 2)])
    assert len(batch) == 2  # the third point replaced the first's cell
    row = series.row_key(t0)
    assert list(batch.sorted_cells()) == [
        (row, b"\x00\x00", b"\x02"),
        (row, b"\x00\x1b", b"\x3f\x00\x00\x00"),
    ]


def test_parts_keep_the_order_of_arrival_in_the_record_and_when_folded() -> None:
    """A part encoded elsewhere (a telnet worker's) joins the batch in arrival order: the
    record and the runs are the parts in order, and folding them into cells lets a later
    point of a cell win, exactly as adding every point here would have."""
    layout = KeyLayout()
    a = make_series_key(layout, b"\x00\x00\x01", [(b"\x00\x00\x01", b"\x00\x00\x02")])
    b = make_series_key(layout, b"\x00\x00\x01", [(b"\x00\x00\x01", b"\x00\x00\x03")])
    t0 = 1356998400
    Points = list[tuple[SeriesKey, int, int | float]]
    first: Points = [(a, t0, 1), (b, t0, 300), (a, t0 + 1, 2.5)]
    worker: Points = [(a, t0, 7), (a, t0 + 2, 70000), (b, t0 + 3600, -1)]
    last: Points = [(a, t0 + 2, 8), (b, t0, 9)]
    rows: dict[bytes, dict[bytes, bytes]] = {}
    encode_points_into(rows, worker)
    part = seal_part(rows, len(worker))
    runs = part.runs

    batch = make_batch(max_cells=100)
    batch.add_points(first)
    batch.add_part(part)
    batch.add_points(last)
    assert len(batch) == 3 + 3 + 2  # points, as the writer counts them
    joined, all_runs = batch.payload_and_runs()
    assert decode_row_runs(joined) == all_runs
    assert [run[0] for run in all_runs] == [
        a.row_key(t0),
        b.row_key(t0),
        *[run[0] for run in runs],
        a.row_key(t0),
        b.row_key(t0),
    ]
    batch.fold()
    everything = make_batch(max_cells=100)
    everything.add_points(first + worker + last)
    assert list(batch.sorted_cells()) == list(everything.sorted_cells())
    assert not batch.parts


def _record_of(points: Sequence[tuple[SeriesKey, int, int | float]]) -> tuple[bytes, list[RowRun]]:
    """The payload and runs of a batch of only ``points``."""
    batch = make_batch(max_cells=100)
    batch.add_points(points)
    return batch.payload_and_runs()


def test_logged_points_stay_out_of_the_record_and_keep_the_order_of_arrival() -> None:
    """Points the log already holds (remote write's parts) stay out of the batch's own
    record and come to the head in arrival order among the others: folding every run lets
    the point sent last win, as adding all here would."""
    layout = KeyLayout()
    a = make_series_key(layout, b"\x00\x00\x01", [(b"\x00\x00\x01", b"\x00\x00\x02")])
    b = make_series_key(layout, b"\x00\x00\x01", [(b"\x00\x00\x01", b"\x00\x00\x03")])
    t0 = 1356998400
    Points = list[tuple[SeriesKey, int, int | float]]
    logged_1: Points = [(a, t0, 1), (b, t0, 2)]
    logged_2: Points = [(a, t0 + 1, 3), (b, t0 + 1, 4)]
    own: Points = [(a, t0, 5), (b, t0 + 2, 6)]
    logged_3: Points = [(a, t0 + 2, 7), (b, t0 + 2, 8)]  # after own's (b, t0 + 2)

    def runs_of(points: Points) -> list[RowRun]:
        rows: dict[bytes, dict[bytes, bytes]] = {}
        encode_points_into(rows, points)
        runs = seal_part(rows, len(points)).runs
        assert isinstance(runs, list)
        return runs

    batch = make_batch(max_cells=100)
    batch.add_logged(runs_of(logged_1), 2, 11)
    batch.add_logged(runs_of(logged_2), 2, 12)
    batch.add_points(own)
    batch.add_logged(runs_of(logged_3), 2, 13)
    assert batch.logged == [11, 12, 13]
    assert batch.logged_cells == 6
    assert len(batch) == 8
    payload, runs = batch.payload_and_runs()
    own_payload, own_runs = _record_of(own)
    assert payload == own_payload  # logged cells are not logged twice
    assert runs == runs_of(logged_1) + runs_of(logged_2) + own_runs + runs_of(logged_3)
    folded = make_batch(max_cells=100)
    for row, count, qualifiers, values in runs:
        folded.add_part(EncodedPart(b"", [(row, count, qualifiers, values)], count))
    folded.fold()
    everything = make_batch(max_cells=100)
    everything.add_points(logged_1 + logged_2 + own + logged_3)
    assert list(folded.sorted_cells()) == list(everything.sorted_cells())
    batch.fold()
    assert list(batch.sorted_cells()) == list(everything.sorted_cells())


def test_logged_samples_come_to_the_head_as_a_run_a_row_in_the_order_of_arrival() -> None:
    """Remote write's parts (samples the log holds, as columns): consecutive ones become
    the head's runs at once, a run a row, in their place among the other parts; folding
    them lets the point sent last win, as adding all here would."""
    layout = KeyLayout()
    a = make_series_key(layout, b"\x00\x00\x01", [(b"\x00\x00\x01", b"\x00\x00\x02")])
    b = make_series_key(layout, b"\x00\x00\x01", [(b"\x00\x00\x01", b"\x00\x00\x03")])
    ms = 1_700_000_000_000
    Points = list[tuple[SeriesKey, int, float]]

    def block_of(points: Points) -> SampleBlock:
        return SampleBlock(
            [series for series, _, _ in points],
            np.array([t for _, t, _ in points], dtype=np.int64),
            np.array([v for _, _, v in points], dtype=np.float64),
        )

    logged_1: Points = [(a, ms, 1.5), (b, ms, 2.5)]
    logged_2: Points = [(a, ms + 1000, 3.5), (b, ms + 1000, 4.5)]
    own: Points = [(a, ms, 5.5), (b, ms + 2000, 6.5)]
    logged_3: Points = [(a, ms + 2000, 7.5), (b, ms + 2000, 8.5)]  # after own's (b, ms + 2000)
    batch = make_batch(max_cells=100)
    for seq, points in ((11, logged_1), (12, logged_2)):
        batch.add_logged(block_of(points), len(points), seq)
    batch.add_points(own)
    batch.add_logged(block_of(logged_3), 2, 13)
    assert batch.logged == [11, 12, 13]
    assert len(batch) == 8
    payload, runs = batch.payload_and_runs()
    own_payload, own_runs = _record_of(own)
    assert payload == own_payload  # logged cells are not logged twice
    first_two = sample_runs([block_of(logged_1), block_of(logged_2)])
    assert [(row, count) for row, count, _, _ in first_two] == [
        (a.row_key(ms // 1000 // 3600 * 3600), 2),
        (b.row_key(ms // 1000 // 3600 * 3600), 2),
    ]
    assert runs == first_two + own_runs + sample_runs([block_of(logged_3)])
    everything = make_batch(max_cells=100)
    everything.add_points(logged_1 + logged_2 + own + logged_3)
    batch.fold()
    assert list(batch.sorted_cells()) == list(everything.sorted_cells())
