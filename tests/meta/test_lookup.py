"""Series lookup: OpenTSDB's m= grammar and matching rules, answered from the meta table with
meta tracking off and on, without reading the data table."""

from __future__ import annotations

from typing import Any

import pytest

from tests.meta.conftest import NOW_S, MakeEnv, MetaEnv
from tests.uid.hooked_storage import HookedStorage
from tests.write.points import add
from tsd.data_points import DataPoint, make_tags
from tsd.errors import BadRequestError, NoSuchUniqueName
from tsd.meta.lookup import LookupQuery, parse_lookup_m
from tsd.storage.base import Storage


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("sys.cpu", ("sys.cpu", []), id="metric_only"),
        pytest.param("sys.cpu{}", ("sys.cpu", []), id="empty_braces"),
        pytest.param("sys.cpu{host=*}", ("sys.cpu", [("host", "*")]), id="wildcard_value"),
        pytest.param("m{*=web01}", ("m", [("*", "web01")]), id="wildcard_key"),
        pytest.param("m{=web01,dc=}", ("m", [(None, "web01"), ("dc", None)]), id="bare_sides"),
        pytest.param("{host=web01}", (None, [("host", "web01")]), id="no_metric"),
        pytest.param("m{host=a,host=b}", ("m", [("host", "a"), ("host", "b")]), id="repeated_key"),
    ],
)
def test_parse_lookup_m(text: str, expected: tuple[str | None, list[Any]]) -> None:
    assert parse_lookup_m(text) == expected


@pytest.mark.parametrize(
    ("text", "details"),
    [
        pytest.param("", "Metric string was empty", id="empty"),
        pytest.param("m{host=a", "Missing '}' at the end of: m{host=a", id="unclosed"),
        pytest.param("{}", "Missing metric and tags: {}", id="nothing"),
        pytest.param("m{h}", "When parsing tag 'h': Missing tag pair", id="short_tag"),
        pytest.param("m{a=b=c}", "When parsing tag 'a=b=c': invalid tag: a=b=c", id="two_equals"),
    ],
)
def test_parse_lookup_m_errors(text: str, details: str) -> None:
    with pytest.raises(BadRequestError) as caught:
        parse_lookup_m(text)
    assert (caught.value.message, caught.value.details) == ("Unable to parse query", details)


SERIES = [
    ("sys.cpu.user", {"host": "web01", "dc": "lga"}),
    ("sys.cpu.user", {"host": "web02", "dc": "lga"}),
    ("sys.cpu.user", {"host": "web03", "dc": "sjc"}),
    ("sys.cpu.user", {"host": "web01"}),
    ("sys.mem", {"host": "web01", "dc": "lga"}),
]

TRACKING_MODES = [
    pytest.param({}, id="tracking_off"),
    pytest.param({"meta_enable_tsuid_tracking": True}, id="tracking_on"),
    pytest.param(
        {"meta_enable_tsuid_tracking": True, "meta_enable_realtime_ts": True}, id="realtime_ts"
    ),
]


async def loaded(
    make_env: MakeEnv, core: dict[str, bool] | None = None, store: Storage | None = None
) -> MetaEnv:
    env = await make_env(store=store, **(core or {}))
    for metric, tags in SERIES:
        await env.write(metric, NOW_S, 1, **tags)
    return env


async def found(env: MetaEnv, m: str, limit: int = 0) -> list[tuple[str, dict[str, str]]]:
    metric, tags = parse_lookup_m(m)
    result = await env.meta.lookup.lookup(LookupQuery(metric, tuple(tags), limit))
    return [await env.meta.lookup.describe(tsuid) for tsuid in result.tsuids]


def series(*indexes: int) -> list[tuple[str, dict[str, str]]]:
    return sorted((SERIES[i] for i in indexes), key=repr)


#: m= -> the series it finds (OpenTSDB's rules, TimeSeriesLookup's class comment)
MATCHES = {
    "sys.cpu.user": series(0, 1, 2, 3),
    "{host=web01}": series(0, 3, 4),  # no metric: every metric
    "*{host=web01}": series(0, 3, 4),
    "sys.cpu.user{host=web01,host=web02}": series(0, 1, 3),  # values of a key ORed
    "sys.cpu.user{host=web01,dc=lga}": series(0),  # keys ANDed
    "sys.cpu.user{dc=*}": series(0, 1, 2),
    "sys.cpu.user{dc=}": series(0, 1, 2),
    "sys.cpu.user{host=web02,host=*}": series(0, 1, 2, 3),  # the wildcard wins
    "sys.cpu.user{*=lga}": series(0, 1),  # a value under any key
    "sys.cpu.user{=sjc}": series(2),
    "sys.cpu.user{*=lga,*=sjc}": series(0, 1, 2),  # such values ORed
    "sys.cpu.user{host=web01,*=lga}": series(0),
    "sys.cpu.user{*=*}": series(0, 1, 2, 3),
}


@pytest.mark.parametrize("core", TRACKING_MODES)
async def test_lookup_matches_like_opentsdb(make_env: MakeEnv, core: dict[str, bool]) -> None:
    env = await loaded(make_env, core)
    answers = {m: sorted(await found(env, m), key=repr) for m in MATCHES}
    assert answers == MATCHES


async def test_lookup_limit(make_env: MakeEnv) -> None:
    env = await loaded(make_env)
    assert len(await found(env, "sys.cpu.user", limit=2)) == 2
    assert len(await found(env, "sys.cpu.user", limit=0)) == 4
    assert len(await found(env, "sys.cpu.user", limit=-1)) == 4


async def test_lookup_of_unknown_names_raises(make_env: MakeEnv) -> None:
    env = await loaded(make_env)
    for m in ("nope", "sys.cpu.user{nokey=*}", "sys.cpu.user{host=nohost}"):
        with pytest.raises(NoSuchUniqueName):
            await found(env, m)


async def test_lookup_tags_come_in_java_hashmap_order(make_env: MakeEnv) -> None:
    env = await loaded(make_env)
    # OpenTSDB's Tags.resolveIdsAsync fills a HashMap: "host" comes before "dc".
    assert [list(tags) for _, tags in await found(env, "sys.cpu.user{dc=lga}")] == [
        ["host", "dc"],
        ["host", "dc"],
    ]


@pytest.mark.parametrize("core", TRACKING_MODES)
async def test_lookup_never_reads_the_data_table(
    make_env: MakeEnv, storage: Storage, core: dict[str, bool]
) -> None:
    hooked = HookedStorage(storage)
    scanned: list[str] = []

    async def note(table: str, spec: Any) -> None:
        scanned.append(table)

    env = await loaded(make_env, core, store=hooked)
    hooked.hooks["scan"] = note
    assert len(await found(env, "sys.cpu.user{host=*}")) == 4
    assert scanned == [env.config.storage.meta_table]


async def test_a_series_is_found_right_after_its_first_point(make_env: MakeEnv) -> None:
    env = await make_env(start_tracker=False)
    await add(env.ingest, DataPoint("sys.cpu.user", NOW_S, 1, make_tags({"host": "web09"})))
    # Nothing flushed yet: the lookup itself writes what the tracker has queued.
    assert await found(env, "sys.cpu.user") == [("sys.cpu.user", {"host": "web09"})]
