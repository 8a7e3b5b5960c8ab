"""/api/config marks the keys tsd ignores (tsd.config.ignored_keys), and the list of keys
parsed but not acted on matches the code."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
import orjson

from tests.server.conftest import MakeTsd
from tsd.config import KEYS, NOT_ACTED_ON
from tsd.server.http.misc import IGNORED_ENTRY

TSD_PACKAGE = Path(__file__).resolve().parents[2] / "tsd"


async def config_of(port: int) -> dict[str, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/api/config") as response,
    ):
        assert response.status == 200
        body: dict[str, str] = orjson.loads(await response.read())
        return body


async def test_ignored_keys_are_marked(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(
        **{
            "tsd.network.keep_alive": "true",  # OpenTSDB's, unknown to tsd
            "hbase.zookeeper.quorum": "zk1",
            "tsd.storage.flush_interval": "500",  # used
            "tsd.core.uid.random_metrics": "false",  # acted on (random metric UIDs)
        }
    )
    config = await config_of(daemon.port)
    assert config[IGNORED_ENTRY] == ("hbase.zookeeper.quorum,tsd.network.keep_alive")
    assert config["tsd.network.keep_alive"] == "true"  # still echoed, as OpenTSDB does
    assert config["tsd.storage.flush_interval"] == "500"
    assert list(config) == sorted(config)


async def test_nothing_ignored_by_default(make_tsd: MakeTsd) -> None:
    config = await config_of((await make_tsd()).port)
    assert config[IGNORED_ENTRY] == ""


def test_not_acted_on_matches_the_code() -> None:
    """A key is "not acted on" exactly when no module but config.py reads its field."""
    sources = "\n".join(
        path.read_text() for path in TSD_PACKAGE.rglob("*.py") if path.name != "config.py"
    )
    unread = {key for key, (_, attr, _) in KEYS.items() if not re.search(rf"\.{attr}\b", sources)}
    assert unread == NOT_ACTED_ON
