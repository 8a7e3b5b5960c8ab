"""Telnet over real sockets: what collectors send, what was stored, what bad input gets."""

from __future__ import annotations

import asyncio

import pytest

from tests.server.conftest import MakeTsd
from tests.server.support import TelnetClient, eventually, stored, telnet_idle
from tests.write.readback import StoredPoint
from tsd.daemon import Daemon
from tsd.data_points import make_tags
from tsd.protocol.telnet import TELNET_REF_CACHE

T = 1_795_236_716


def sp(metric: str, ts_ms: int, value: int | float, **tags: str) -> StoredPoint:
    return StoredPoint(metric, make_tags(tags), ts_ms, value)


@pytest.mark.each_backend
async def test_put_is_silent_and_stored(tsd: Daemon) -> None:
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"put sys.cpu.user 1356998400 42.5 host=web01 cpu=0\n")
    assert await client.sync() == []  # nothing came back for the put
    assert await stored(tsd) == [sp("sys.cpu.user", 1356998400_000, 42.5, cpu="0", host="web01")]
    await client.close()


@pytest.mark.each_backend
async def test_collectd_write_tsdb_replay(tsd: Daemon) -> None:
    """CRLF, double and trailing spaces, unsigned counters above 2**63 refused line by line."""
    client = await TelnetClient.connect(tsd.port)
    lines = (
        f"put memory.used.memory {T} 110944256 fqdn=cd-test-host  env=test\r\n"
        f"put load.load.shortterm {T} 0.5703125 fqdn=cd-test-host  env=test\r\n"
        f"put if.octets.rx {T} 18446744073709551615 fqdn=cd-test-host  env=test\r\n"
        f"put cpu.0.cpu.user {T + 87} 5407 fqdn=cd-test-host  \r\n"
    ).encode()
    await client.send(lines[:700])  # collectd writes 1428-byte buffers: lines split anywhere
    await client.send(lines[700:])
    assert await client.sync() == [b"put: invalid value: Value too long: 18446744073709551615"]
    assert await stored(tsd) == [
        sp("cpu.0.cpu.user", (T + 87) * 1000, 5407, fqdn="cd-test-host"),
        sp("load.load.shortterm", T * 1000, 0.5703125, env="test", fqdn="cd-test-host"),
        sp("memory.used.memory", T * 1000, 110944256, env="test", fqdn="cd-test-host"),
    ]
    await client.close()


@pytest.mark.each_backend
async def test_tcollector_replay(tsd: Daemon) -> None:
    """The version probe, one sendall of LF lines, 13-digit millisecond timestamps."""
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"version\n")
    assert (await client.line()).startswith(b"tsd ")
    assert (await client.line()).startswith(b"Built on ")
    await client.send(
        b"put tcollector.reader.lines_collected 1795236835 4  env=test host=vm\n"
        b"put test.const 1795236834 42 dev=sda env=test host=vm\n"
        b"put test.float 1795236834 0.000 env=test host=vm\n"
        b"put test.ms 1795236834123 0 env=test host=vm\n"
    )
    assert await client.sync() == []
    assert await stored(tsd) == [
        sp("tcollector.reader.lines_collected", 1795236835_000, 4, env="test", host="vm"),
        sp("test.const", 1795236834_000, 42, dev="sda", env="test", host="vm"),
        sp("test.float", 1795236834_000, 0.0, env="test", host="vm"),
        sp("test.ms", 1795236834123, 0, env="test", host="vm"),
    ]
    await client.close()


@pytest.mark.each_backend
async def test_telegraf_replay_closes_right_after_its_last_line(tsd: Daemon) -> None:
    """Connect-and-close at start-up, then a connection per flush: one write per line,
    fixed six decimals, no tags -> a trailing space, then close without reading."""
    probe = await TelnetClient.connect(tsd.port)
    await probe.close()
    client = await TelnetClient.connect(tsd.port)
    lines = [
        f"put mem_used {T} 0.500000 host=vm\n",
        f"put disk_free {T} 12345678901234567890.000000 host=vm path=/\n",
        f"put net_bytes {T} 18446744073709551615 host=vm\n",  # uint64: refused
        *(f"put cpu_usage_idle {T + i} {i}.250000 cpu=cpu-total host=vm\n" for i in range(200)),
    ]
    for line in lines:
        client.writer.write(line.encode())
    await client.close()
    await telnet_idle(tsd)
    points = await stored(tsd)
    assert len(points) == 202
    assert sp("mem_used", T * 1000, 0.5, host="vm") in points
    assert sp("disk_free", T * 1000, 12345678901234567890.0, host="vm", path="/") in points
    assert sp("cpu_usage_idle", (T + 199) * 1000, 199.25, cpu="cpu-total", host="vm") in points


@pytest.mark.each_backend
async def test_potsdb_replay(tsd: Daemon) -> None:
    """A probe connection closed without sending, then one sendall per line, never read."""
    probe = await TelnetClient.connect(tsd.port)
    await probe.close()
    client = await TelnetClient.connect(tsd.port)
    for line in (
        b"put potsdb.float 1795237078 0.1 dev=sda host=vm\n",
        b"put potsdb.tiny 1795237078 1e-07 dev=sda host=vm\n",
    ):
        await client.send(line)
    await client.close()
    await telnet_idle(tsd)
    assert await stored(tsd) == [
        sp("potsdb.float", 1795237078_000, 0.1, dev="sda", host="vm"),
        sp("potsdb.tiny", 1795237078_000, 1e-07, dev="sda", host="vm"),
    ]


async def test_lines_fed_one_byte_at_a_time(tsd: Daemon) -> None:
    client = await TelnetClient.connect(tsd.port)
    for byte in b"put a.b 1356998400 1 h=x\r\nput a.b 1356998401 2 h=x\n":
        await client.send(bytes((byte,)))
    assert await client.sync() == []
    assert [p.value for p in await stored(tsd)] == [1, 2]
    await client.close()


BAD_LINES = [
    pytest.param(
        b"put x",
        b"put: illegal argument: not enough arguments (need least 4, got 1)",
        id="few_args",
    ),
    pytest.param(
        b"put m 12x 1 h=a", b"put: invalid value: Invalid character 'x' in 12x", id="bad_timestamp"
    ),
    pytest.param(
        b"put m 0 1 h=a", b"put: illegal argument: invalid timestamp: 0", id="zero_timestamp"
    ),
    pytest.param(b"put m 1 nan h=a", b"put: invalid value: Invalid character 'n' in nan", id="nan"),
    pytest.param(
        b"put m 1 1e400 h=a",
        b"put: illegal argument: value is NaN or Infinite: Infinity for metric=m timestamp=1",
        id="infinite",
    ),
    pytest.param(b"put m 1 1 foo", b"put: illegal argument: invalid tag: foo", id="bad_tag"),
    pytest.param(
        b"put m 1 1 ",
        b"put: illegal argument: Need at least one tag (metric=m, tags={})",
        id="no_tags",
    ),
    pytest.param(b"put  1 1 h=a", b"put: illegal argument: empty metric name", id="empty_metric"),
    pytest.param(
        b"put m 1 1 a=b a=c",
        b"put: illegal argument: duplicate tag: a=c, tags={a=b}",
        id="duplicate_tag",
    ),
    pytest.param(
        b"put m 99999999999999 1 h=a",
        b"put: illegal argument: bad timestamp=99999999999999 when trying to add value=[1]/0"
        b" to metric=m, tags={h=a}",
        id="timestamp_too_big",
    ),
    pytest.param(
        b"put m\x01 1 1 h=a",
        b'put: illegal argument: Invalid metric name ("m\x01"): illegal character: \x01',
        id="bad_char",
    ),
    pytest.param(b"bogus", b"unknown command: bogus.  Try `help'.", id="unknown_command"),
    pytest.param(b"", b"unknown command: .  Try `help'.", id="empty_line"),
    pytest.param(b"PUT m 1 1 h=a", None, id="uppercase_is_http"),
]


@pytest.mark.parametrize(("line", "reply"), BAD_LINES)
async def test_bad_line_gets_opentsdb_error_and_connection_lives_on(
    tsd: Daemon, line: bytes, reply: bytes | None
) -> None:
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"put ok 1356998400 1 h=a\n" + line + b"\nput ok 1356998401 2 h=a\n")
    if reply is None:  # OpenTSDB's first-byte rule: that is not telnet at all
        await client.close()
        client = await TelnetClient.connect(tsd.port)
        await client.send(line + b"\n")
        await client.send(b"\r\n")
        assert (await client.line()).startswith(b"HTTP/1.0 400 Bad Request")
        await client.close()
        return
    assert await client.sync() == [reply]
    assert [p.value for p in await stored(tsd)] == [1, 2]
    await client.close()


async def test_overlong_line_is_refused_and_connection_lives_on(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(**{"tsd.rpc.telnet.max_line": "64"})
    client = await TelnetClient.connect(daemon.port)
    long_line = b"put m 1356998400 1 " + b"k=" + b"v" * 200
    await client.send(long_line[:100])
    await client.send(long_line[100:] + b"\nput m 1356998401 2 h=a\n")
    assert await client.sync() == [b"error: line too long: more than 64 bytes; line discarded"]
    assert [p.value for p in await stored(daemon)] == [2]
    await client.close()


async def test_unknown_metric_without_auto_create(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(**{"tsd.core.auto_create_metrics": "false"})
    client = await TelnetClient.connect(daemon.port)
    await client.send(b"put no.such 1356998400 1 h=a\n")
    assert await client.sync() == [b"put: unknown metric: No such name for 'metrics': 'no.such'"]
    await client.close()


async def test_help_stats_dropcaches_exit(tsd: Daemon) -> None:
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"put m 1356998400 1 h=a\nhelp\n")
    assert await client.line() == (
        b"available commands: stats dropcaches version exit help put rollup histogram diediedie "
    )
    await client.send(b"stats\n")
    stats = [await client.line() for _ in range(3)]
    assert stats[0].startswith(b"tsd.")
    assert all(line.split(b" ")[-1].startswith(b"host=") for line in stats)
    assert await client.sync() != []  # the rest of the stats lines
    await client.send(b"dropcaches\n")
    assert await client.line() == b"Caches dropped."
    await client.send(b"put m 1356998401 2 h=a\nexit\nput m 1356998402 3 h=a\n")
    assert await client.reader.read() == b""  # closed by the server
    await client.close()
    await telnet_idle(tsd)
    assert [p.value for p in await stored(tsd)] == [1, 2]


async def test_stats_count_what_was_received(tsd: Daemon) -> None:
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"put m 1356998400 1 h=a\nput m 1356998401 x h=a\n")
    await client.sync()
    await client.send(b"stats\n")
    lines = [line for line in await client.sync()]
    by_name = {
        b" ".join([line.split(b" ")[0], *line.split(b" ")[3:-1]]): line.split(b" ")[2]
        for line in lines
    }
    assert by_name[b"tsd.datapoints.added type=all"] == b"1"
    assert by_name[b"tsd.rpc.errors type=invalid_values"] == b"1"
    assert by_name[b"tsd.rpc.received type=telnet"] == b"4"  # put, put, version, stats
    await client.close()


async def test_read_only_mode_has_no_put(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(**{"tsd.mode": "ro"})
    client = await TelnetClient.connect(daemon.port)
    await client.send(b"put m 1356998400 1 h=a\nhelp\n")
    assert await client.line() == b"unknown command: put.  Try `help'."
    assert (
        await client.line() == b"available commands: stats dropcaches version exit help diediedie "
    )
    await client.close()


async def test_no_diediedie_makes_it_unknown(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(**{"tsd.no_diediedie": "true"})
    client = await TelnetClient.connect(daemon.port)
    await client.send(b"diediedie\n")
    assert await client.line() == b"unknown command: diediedie.  Try `help'."
    await client.close()


async def test_diediedie_from_loopback_asks_for_shutdown(tsd: Daemon) -> None:
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"put m 1356998400 1 h=a\ndiediedie\n")
    assert await client.line() == b"Cleaning up and exiting now."
    await tsd.wait_for_shutdown_request()
    await client.close()


async def test_many_connections_at_once(tsd: Daemon) -> None:
    async def one(n: int) -> None:
        client = await TelnetClient.connect(tsd.port)
        await client.send(
            b"".join(b"put conc %d %d h=c%d\n" % (1356998400 + i, n, n) for i in range(50))
        )
        assert await client.sync() == []
        await client.close()

    await asyncio.gather(*(one(n) for n in range(20)))
    assert len(await stored(tsd)) == 1000
    await eventually(lambda: tsd.listener.open_connections() == 0)


@pytest.mark.slow
async def test_idle_connection_is_closed_after_socket_timeout(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(**{"tsd.core.socket.timeout": "1"})
    client = await TelnetClient.connect(daemon.port)
    await client.send(b"put idle.m 1356998400 1 h=a\n")
    assert await client.reader.read() == b""  # closed by the server once idle
    await client.close()
    assert [p.value for p in await stored(daemon)] == [1]


async def test_more_series_than_the_series_cache_holds_are_all_stored(make_tsd: MakeTsd) -> None:
    """tsd.core.series_cache.size bounds the series refs kept: past it they are dropped and
    points are resolved again as new series (their UIDs cached), none lost or split."""
    tsd = await make_tsd(**{"tsd.core.series_cache.size": "3"})
    client = await TelnetClient.connect(tsd.port)
    for offset in range(2):
        lines = [f"put card.m {T + offset} {n + offset} host=h{n}\n" for n in range(7)]
        await client.send("".join(lines).encode())
    assert await client.sync() == []
    # the bound held (telnet's series are kept under their lines' keys only)
    assert len(tsd.ingest.ref_cache(TELNET_REF_CACHE)) <= 3
    assert not tsd.ingest._refs
    assert await stored(tsd) == [
        sp("card.m", (T + offset) * 1000, n + offset, host=f"h{n}")
        for n in range(7)
        for offset in range(2)
    ]
    assert tsd.uids.tagv.stats.assignments == 7  # resolved again, never assigned twice
    await client.close()


@pytest.mark.slow  # the fast loop (README) leaves it to the full suite
async def test_a_burst_of_new_series_with_other_lines_among_them(tsd: Daemon) -> None:
    """A burst of new series is queued for lookup in one loop (past one lookup batch of
    4,096 here); the lines among them that loop does not take (a series known under its
    names but spelled anew, a bad line, a collectd-style double space, the same new series
    twice) each get the line-by-line answer, in order, and no point is lost or doubled; a
    later point of a cell in the same run of new series wins."""
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"put burst.m 1356998400 0 host=known dc=a\n")
    assert await client.sync() == []
    lines = [f"put burst.m {T} {n} host=h{n} dc=a\n" for n in range(6000)]
    lines[1000] = f"put burst.m {T} 1000 dc=a host=known\n"  # known, tags in another order
    lines[2000] = f"put burst.m {T} notanumber host=bad dc=a\n"
    lines[3000] = f"put burst.m {T} 3000 host=h3000  dc=a\n"  # not the plain form
    lines[4000] = f"put burst.m {T + 1} 4000 host=h3999 dc=a\n"  # h3999's second point
    lines[5000] = f"put burst.m {T} 5000 host=h4999 dc=a\n"  # h4999's cell again: it wins
    await client.send("".join(lines).encode())
    replies = await client.sync()
    assert replies == [b'put: invalid value: For input string: "notanumber"']
    hosts = {n: f"h{n}" for n in range(6000)} | {1000: "known", 4000: "h3999", 5000: "h4999"}
    expected = [sp("burst.m", 1356998400_000, 0, host="known", dc="a")] + [
        sp("burst.m", (T + (n == 4000)) * 1000, n, host=hosts[n], dc="a")
        for n in range(6000)
        if n not in (2000, 4999)
    ]

    def order(point: StoredPoint) -> tuple[object, ...]:
        return (point.tags, point.timestamp_ms)

    assert sorted(await stored(tsd), key=order) == sorted(expected, key=order)
    # every new name assigned once: known, h0..h5999 but h1000, h2000, h4000 and h5000,
    # and "a"
    assert tsd.uids.tagv.stats.assignments == 1 + 1 + 6000 - 4
    await client.close()
