"""tsd.recent.RecentMap: bounded, least recently used out first, a hit a plain dict.get."""

from __future__ import annotations

import random

import pytest

from tsd.recent import RecentMap, young_bound


def test_never_holds_more_than_its_bound_and_counts_what_it_evicts() -> None:
    refs: RecentMap[int, str] = RecentMap(100)
    for n in range(1000):
        refs.remember(n, f"r{n}")
        assert refs.entries() <= 100
    assert refs.entries() == 100
    assert refs.evictions == 900
    # the newest are held (in the map or recallable), the oldest are not
    assert all(refs.lookup(n) == f"r{n}" for n in range(900, 1000))
    assert all(refs.lookup(n) is None for n in range(800))


def test_entries_in_use_survive_a_stream_of_new_ones() -> None:
    """20 series in use (each looked up as a point would: get, then recall on a miss)
    and a new series every 10 of their points, with a bound of 100: none of the 20 is
    ever evicted, and most of their points need no more than dict.get."""
    refs: RecentMap[str, int] = RecentMap(100)
    hot = [f"hot{n}" for n in range(20)]
    for key in hot:
        refs.remember(key, 1)
    slow_paths = 0
    accesses = 100_000
    for n in range(accesses):
        if n % 10 == 0:
            refs.remember(f"new{n}", 0)
        key = hot[n % len(hot)]
        if refs.get(key) is None:  # the hot loop's miss
            slow_paths += 1
            assert refs.recall(key) == 1, (n, key)
        assert refs.entries() <= 100
    assert refs.evictions > accesses // 10 - 100  # the new ones went
    # a recall per series in use each time the map turns (every 50 entries in it)
    assert slow_paths <= accesses // 10, slow_paths
    assert all(refs.lookup(key) == 1 for key in hot)


def test_least_recently_used_go_first() -> None:
    refs: RecentMap[int, int] = RecentMap(10)
    for n in range(10):
        refs.remember(n, n)  # 0-8 old (the young generation held 9: young_bound), 9 young
    refs.remember(10, 10)  # 0 goes
    assert refs.lookup(0) is None
    assert refs.recall(2) == 2  # used again
    for n in range(11, 16):
        refs.remember(n, n)
    # gone in order 1, 3, 4, 5, 6 (2 was used again)
    assert [n for n in range(10) if refs.lookup(n) is not None] == [2, 7, 8, 9]


def test_a_key_remembered_again_is_not_counted_twice() -> None:
    refs: RecentMap[int, int] = RecentMap(4)
    for n in range(5):
        refs.remember(n, n)  # 0 evicted; 1 and 2 old (behind 0), 3 and 4 young
    assert refs.evictions == 1
    for n in (1, 2, 3, 1, 4):
        refs.remember(n, n * 10)  # moved from old, or replaced in the map
    assert refs.entries() == 4
    assert refs.evictions == 1
    assert {n: refs.lookup(n) for n in range(5)} == {0: None, 1: 10, 2: 20, 3: 30, 4: 40}


def test_random_use_against_a_model() -> None:
    """Against an exact model of its rule: at most the bound, and nothing it holds ever
    differs from what was last remembered."""
    rng = random.Random(26)
    refs: RecentMap[int, int] = RecentMap(64)
    latest: dict[int, int] = {}
    for step in range(20_000):
        key = int(rng.paretovariate(1.2)) % 500
        if rng.random() < 0.5:
            refs.remember(key, step)
            latest[key] = step
        else:
            got = refs.lookup(key)
            assert got is None or got == latest[key]
        assert refs.entries() <= 64
    refs.clear()
    assert refs.entries() == 0
    assert refs.lookup(1) is None


def test_the_bound_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RecentMap(0)
    one: RecentMap[str, int] = RecentMap(1)
    one.remember("a", 1)
    one.remember("b", 2)
    assert (one.lookup("a"), one.lookup("b"), one.entries()) == (None, 2, 1)


@pytest.mark.parametrize("burst", [10, 60, 250])
def test_remember_many_is_remember_of_each(burst: int) -> None:
    """A burst remembered at once (one dict update when it fits the young generation and
    old is empty, one by one else) leaves the map as remembering each in turn does."""
    one_by_one: RecentMap[int, int] = RecentMap(100)
    at_once: RecentMap[int, int] = RecentMap(100)
    for start in range(0, 600, burst):
        keys = list(range(start, start + burst))
        for key in keys:
            one_by_one.remember(key, -key)
        at_once.remember_many(keys, [-key for key in keys])
        assert at_once.entries() <= 100
        assert dict(at_once) == dict(one_by_one)
        assert at_once.evictions == one_by_one.evictions
        assert all(at_once.lookup(k) == one_by_one.lookup(k) for k in range(start + burst))


@pytest.mark.parametrize("in_use", [700, 701])
def test_series_in_use_up_to_seven_eighths_of_the_bound_are_hits(in_use: int) -> None:
    """A point per series per interval (bench/cardinality's cycle): with every series in
    the young generation no point after the first interval takes the slow path; at half
    the bound (the rule before issue 26) 4 M series of a 5 M bound took it every point."""
    bound = 800
    assert young_bound(bound) == 700
    refs: RecentMap[int, int] = RecentMap(bound)
    slow_paths = 0
    for interval in range(5):
        for key in range(in_use):
            if refs.get(key) is None:
                if interval:
                    slow_paths += 1
                if refs.recall(key) is None:
                    refs.remember(key, key)
    # one more than the young generation holds: a turn an interval, and a slow path for
    # most points
    if in_use <= 700:
        assert slow_paths == 0
    else:
        assert slow_paths > in_use * 4 // 2, slow_paths
    assert refs.evictions == 0


def test_more_in_use_than_the_young_generation_take_the_slow_path_once_per_turn() -> None:
    refs: RecentMap[int, int] = RecentMap(100)
    for key in range(95):  # more than young_bound(100) = 88: a turn every 88 insertions
        refs.remember(key, key)
    recalls = sum(refs.get(key) is None and refs.recall(key) == key for key in range(95))
    assert 0 < recalls <= 95
    assert refs.evictions == 0
