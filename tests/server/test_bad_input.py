"""Garbage in: the daemon answers, the connection (or at least the daemon) lives on."""

from __future__ import annotations

import gzip
import random

import aiohttp
import pytest

from tests.server.support import TelnetClient, stored
from tsd.daemon import Daemon

SEEDS = [pytest.param(seed, id=f"seed{seed}") for seed in range(4)]


def garbage(rng: random.Random, size: int) -> bytes:
    # Mostly printable words with spaces, '=', digits and newlines, plus raw bytes: close
    # enough to put lines to reach deep into the parser.
    alphabet = b"put  =.-_abcxyz0123456789\r\n\t\x00\xff\xe9NaNe+"
    raw = bytes(rng.randrange(256) for _ in range(size // 4))
    text = bytes(rng.choice(alphabet) for _ in range(size - len(raw)))
    mixed = bytearray(text + raw)
    rng.shuffle(mixed)
    return bytes(mixed)


@pytest.mark.parametrize("seed", SEEDS)
async def test_telnet_garbage_keeps_the_connection(tsd: Daemon, seed: int) -> None:
    rng = random.Random(seed)
    client = await TelnetClient.connect(tsd.port)
    await client.send(b"put before 1356998400 1 h=a\n")
    for _ in range(20):
        chunk = garbage(rng, rng.randrange(1, 4000))
        await client.send(chunk.replace(b"exit", b"tixe").replace(b"diediedie", b"eideidd"))
    await client.send(b"\nput after 1356998400 2 h=a\n")
    replies = await client.sync()
    assert all(line for line in replies)  # every reply is a whole, non-empty line
    points = {p.metric: p.value for p in await stored(tsd)}
    assert points["before"] == 1
    assert points["after"] == 2
    await client.close()


@pytest.mark.parametrize("seed", SEEDS)
async def test_put_garbage_bodies_are_4xx_never_5xx(tsd: Daemon, seed: int) -> None:
    rng = random.Random(seed)
    bodies = [garbage(rng, rng.randrange(0, 2000)) for _ in range(20)]
    bodies += [b'{"metric":' + body for body in bodies[:5]]
    bodies += [b'[{"metric":"m","timestamp":1,"value":' + body + b"}]" for body in bodies[:5]]
    async with aiohttp.ClientSession() as http:
        for body in bodies:
            for data, headers in ((body, {}), (gzip.compress(body), {"Content-Encoding": "gzip"})):
                async with http.post(
                    f"http://127.0.0.1:{tsd.port}/api/put?details", data=data, headers=headers
                ) as response:
                    assert 200 <= response.status < 500, await response.text()
