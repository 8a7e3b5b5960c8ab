"""UidCache: the bounded bidirectional name <-> UID map (pure, no storage), over dicts
(the specification) and over the compiled generation tables."""

from collections.abc import Callable

import pytest

from tsd.uid.cache import UidCache, compiled_tables

Make = Callable[[int], UidCache]


@pytest.fixture(params=["dicts", "compiled"])
def make(request: pytest.FixtureRequest) -> Make:
    """UidCache's constructor over dicts or over the compiled tables."""
    if request.param == "compiled" and not compiled_tables():
        pytest.skip("tsd.uid._table is not built (or hidden by TSD_DISABLE_NATIVE)")
    compiled = request.param == "compiled"
    return lambda max_entries: UidCache(max_entries, compiled=compiled)


def uid(n: int) -> bytes:
    return n.to_bytes(3, "big")


def test_put_maps_both_directions_sharing_the_objects() -> None:
    """Over dicts the two directions hold one str and one bytes (the compiled tables hold
    neither: test_put_maps_both_directions)."""
    cache = UidCache(10, compiled=False)
    name = "".join(["sys.cpu", ".user"])  # a fresh str object, not a literal
    raw = uid(7)
    cache.put(name, raw)
    assert cache.get_id("sys.cpu.user") is raw
    assert cache.get_name(uid(7)) is name
    assert (cache.id_entries, cache.name_entries, len(cache)) == (1, 1, 2)


def test_put_maps_both_directions(make: Make) -> None:
    cache = make(10)
    cache.put("sys.cpu.user", uid(7))
    assert cache.get_id("sys.cpu.user") == uid(7)
    assert cache.get_name(uid(7)) == "sys.cpu.user"
    assert (cache.id_entries, cache.name_entries, len(cache)) == (1, 1, 2)


def test_missing_entries_are_none(make: Make) -> None:
    cache = make(10)
    cache.put("a", uid(1))
    assert cache.get_id("b") is None
    assert cache.get_name(uid(2)) is None


@pytest.mark.parametrize("max_entries", [1, 2, 3, 10, 101])
def test_no_direction_ever_exceeds_max_entries(max_entries: int, make: Make) -> None:
    cache = make(max_entries)
    for i in range(1, 20 * max_entries + 5):
        cache.put(f"name{i}", uid(i))
        # read some older entries back too: promotions must respect the bound as well
        cache.get_id(f"name{i // 2}")
        cache.get_name(uid(i // 3))
        assert cache.id_entries <= max_entries
        assert cache.name_entries <= max_entries
    assert cache.evictions > 0


def test_most_recent_entries_always_survive(make: Make) -> None:
    cache = make(100)
    for i in range(1, 1001):
        cache.put(f"name{i}", uid(i))
    # the last half of the budget is always there, in both directions
    for i in range(951, 1001):
        assert cache.get_id(f"name{i}") == uid(i)
        assert cache.get_name(uid(i)) == f"name{i}"
    # and the first ones are long gone
    assert cache.get_id("name1") is None
    assert cache.get_name(uid(1)) is None


def test_entries_in_use_are_not_evicted_by_a_stream_of_new_names(make: Make) -> None:
    cache = make(100)
    hot = [(f"hot{i}", uid(10_000 + i)) for i in range(20)]
    for name, raw in hot:
        cache.put(name, raw)
    for i in range(1, 5001):
        cache.put(f"cold{i}", uid(i))
        if i % 10 == 0:  # the hot set is used at least once per 50 new names
            for name, raw in hot:
                assert cache.get_id(name) == raw
                assert cache.get_name(raw) == name
    for name, raw in hot:
        assert cache.get_id(name) == raw


def test_put_of_a_known_name_replaces_without_double_counting(make: Make) -> None:
    cache = make(4)
    cache.put("a", uid(1))
    cache.put("b", uid(2))
    cache.put("c", uid(3))  # "a" and "b" moved to the old generation
    cache.put("a", uid(9))
    assert cache.get_id("a") == uid(9)
    assert cache.get_name(uid(9)) == "a"
    assert cache.id_entries == 3


def test_discard_name_and_discard_id_touch_one_direction(make: Make) -> None:
    cache = make(10)
    cache.put("a", uid(1))
    cache.put("b", uid(2))
    cache.discard_name("a")
    cache.discard_id(uid(2))
    assert cache.get_id("a") is None
    assert cache.get_name(uid(1)) == "a"
    assert cache.get_id("b") == uid(2)
    assert cache.get_name(uid(2)) is None


def test_clear_drops_everything(make: Make) -> None:
    cache = make(4)
    for i in range(1, 10):
        cache.put(f"n{i}", uid(i))
    cache.clear()
    assert len(cache) == 0
    assert cache.get_id("n9") is None
    assert cache.get_name(uid(9)) is None
    cache.put("again", uid(1))
    assert cache.get_id("again") == uid(1)


def test_max_entries_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        UidCache(0)


def test_put_id_adds_a_forward_only_alias(make: Make) -> None:
    cache = make(10)
    cache.put("??", uid(1))
    cache.put_id("日本", uid(1))
    assert cache.get_id("日本") == uid(1)
    assert cache.get_name(uid(1)) == "??"
    assert (cache.id_entries, cache.name_entries) == (2, 1)


def _contents(cache: UidCache) -> tuple[dict[str, bytes | None], dict[bytes, str | None]]:
    names = [f"n{i}" for i in range(60)]
    return (
        {name: cache.get_id(name) for name in names},
        {uid(i): cache.get_name(uid(i)) for i in range(60)},
    )


@pytest.mark.parametrize("batch", [1, 5, 17, 40])
def test_put_many_caches_as_put_one_by_one(batch: int, make: Make) -> None:
    """In bulk while the young generation has room, one by one past it: either way the
    same entries as the same puts one at a time (including an old entry put again)."""
    one, many = make(30), make(30)
    for start in range(0, 60, batch):
        pairs = [(f"n{i}", uid(i)) for i in range(start, min(60, start + batch))]
        pairs.append((f"n{start // 2}", uid(start // 2)))  # put again, maybe from old
        pairs = list(dict(pairs).items())
        for name, raw in pairs:
            one.put(name, raw)
        many.put_many([name for name, _ in pairs], [raw for _, raw in pairs])
        assert (many.id_entries, many.name_entries) == (one.id_entries, one.name_entries)
    assert _contents(many) == _contents(one)
    assert many.evictions == one.evictions


@pytest.mark.parametrize("asked", [0, 7, 25, 60])
def test_get_ids_answers_as_get_id_one_by_one(asked: int, make: Make) -> None:
    """The bulk read finds what get_id finds, in the order asked, and leaves the cache
    as get_id does: young hits, old hits (promoted), misses, with and without an old
    generation."""
    one, many = make(30), make(30)
    for cache in (one, many):
        for i in range(0, asked, 2):  # past 15 entries the first ones are in old
            cache.put(f"n{i}", uid(i))
    names = [f"n{i}" for i in reversed(range(60))]
    expected_found = {name: u for name in names if (u := one.get_id(name)) is not None}
    expected_misses = [name for name in names if name not in expected_found]
    found, misses = many.get_ids(names)
    assert list(found.items()) == list(expected_found.items())
    assert misses == expected_misses
    assert _contents(many) == _contents(one)
    assert (many.id_entries, many.evictions) == (one.id_entries, one.evictions)
