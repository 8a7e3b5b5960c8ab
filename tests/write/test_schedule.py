"""The compaction schedule: hours become eligible after a grace period, rows are spread."""

from __future__ import annotations

from tsd.write.schedule import CompactionSchedule

HOUR = 1_356_998_400  # 2013-01-01T00:00:00Z, an hour boundary
END = HOUR + 3600


def rows(n: int, prefix: bytes = b"r") -> list[bytes]:
    return [prefix + i.to_bytes(4, "big") for i in range(n)]


def test_nothing_is_taken_before_the_hour_ends_plus_grace() -> None:
    schedule = CompactionSchedule(grace_s=60, spread_s=600)
    for row in rows(10):
        schedule.note(row, HOUR, now=HOUR + 10)
    assert schedule.take(END) == []
    assert schedule.take(END + 59.9) == []
    assert len(schedule) == 10
    assert schedule.next_due() == END + 60


def test_rows_are_released_in_proportion_to_the_time_elapsed() -> None:
    schedule = CompactionSchedule(grace_s=60, spread_s=600)
    noted = rows(100)
    for row in noted:
        schedule.note(row, HOUR, now=HOUR + 1)
    eligible = END + 60
    first = schedule.take(eligible + 60)  # a tenth of the spread
    second = schedule.take(eligible + 300)  # half
    rest = schedule.take(eligible + 600)  # all
    assert (len(first), len(second), len(rest)) == (10, 40, 50)
    assert first + second + rest == sorted(noted)
    assert len(schedule) == 0
    assert schedule.next_due() is None


def test_the_same_row_noted_twice_is_compacted_once() -> None:
    schedule = CompactionSchedule(grace_s=0, spread_s=0)
    schedule.note(b"a", HOUR, now=HOUR)
    schedule.note(b"a", HOUR, now=HOUR + 5)
    assert schedule.take(END) == [b"a"]
    assert schedule.take(END + 1000) == []


def test_a_row_written_after_its_compaction_is_queued_again() -> None:
    schedule = CompactionSchedule(grace_s=60, spread_s=600)
    schedule.note(b"a", HOUR, now=HOUR)
    assert schedule.take(END + 660) == [b"a"]
    schedule.note(b"a", HOUR, now=END + 700)  # a late point
    assert schedule.take(END + 700) == []  # eligible now, its spread starts now
    assert schedule.take(END + 701) == [b"a"]


def test_history_seen_late_is_spread_from_when_it_was_seen() -> None:
    schedule = CompactionSchedule(grace_s=60, spread_s=100)
    now = END + 86_400  # an import of yesterday's data
    for row in rows(50):
        schedule.note(row, HOUR, now=now)
    assert len(schedule.take(now + 10)) == 5
    assert len(schedule.take(now + 100)) == 45


def test_hours_are_taken_oldest_first_and_each_by_its_own_quota() -> None:
    schedule = CompactionSchedule(grace_s=0, spread_s=0)
    schedule.note(b"new", HOUR + 3600, now=HOUR)
    schedule.note(b"old", HOUR, now=HOUR)
    assert schedule.take(END) == [b"old"]
    assert schedule.take(END + 3600) == [b"new"]


def test_take_eligible_empties_every_closed_hour_but_not_the_open_one() -> None:
    schedule = CompactionSchedule(grace_s=60, spread_s=600)
    for row in rows(5):
        schedule.note(row, HOUR, now=HOUR)
    schedule.note(b"open", END, now=END)
    assert schedule.take_eligible(END + 61) == rows(5)
    assert len(schedule) == 1


def test_rows_beyond_the_cap_are_dropped_and_counted() -> None:
    schedule = CompactionSchedule(grace_s=0, spread_s=0, max_rows=3)
    for row in rows(5):
        schedule.note(row, HOUR, now=HOUR)
    assert len(schedule) == 3
    assert schedule.dropped == 2
    assert schedule.take(END) == rows(3)
