"""``tsdb uid metasync`` and ``tsdb uid metapurge`` through the real command line: OpenTSDB's
meta cells written for series stored without them, then removed; tsd's series index kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.toolkit import Target, embedded_only, make_target, open_target
from tsd.codec.const import TSMETA_COUNTER_QUALIFIER, TSMETA_QUALIFIER, UID_META_QUALIFIERS
from tsd.meta.tracking import INDEX_QUALIFIER
from tsd.storage.base import ScanSpec

pytestmark = pytest.mark.slow  # the CLI in subprocesses

POINTS = [
    "sys.cpu.user 1356998400 1 host=web01",
    "sys.cpu.user 1356998400 2 host=web02",
    "sys.mem.free 1356998400 3 host=web01",
]
TRACKING = (
    "tsd.core.meta.enable_tsuid_tracking = true\n"
    "tsd.core.meta.enable_realtime_ts = true\n"
    "tsd.core.meta.enable_realtime_uid = true\n"
)


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path):
    yield from make_target(request.param, tmp_path)


async def qualifiers(target: Target) -> dict[str, list[bytes]]:
    """The qualifiers of the UID table's name family and of the meta table, with repeats."""
    out: dict[str, list[bytes]] = {"uid": [], "meta": []}
    async with open_target(target) as store:
        cfg = store.cfg.storage
        for role, table in (("uid", cfg.uid_table), ("meta", cfg.meta_table)):
            async for row in store.storage.scan(table, ScanSpec(families=("name",))):
                out[role] += [cell.qualifier for cell in row.cells if cell.family == "name"]
    return out


@embedded_only
async def test_metasync_then_metapurge(target: Target) -> None:
    (target.cwd / "points.txt").write_text("\n".join(POINTS) + "\n")
    assert (await target.run("import", "--auto-metric", "points.txt")).code == 0
    before = await qualifiers(target)
    assert before["meta"] == [INDEX_QUALIFIER] * 3  # tracking off: tsd's index only
    assert not set(before["uid"]) & set(UID_META_QUALIFIERS.values())

    target.write_config(TRACKING)
    synced = await target.run("uid", "metasync")
    assert (synced.code, synced.out) == (0, "3 rows scanned, 3 series synced\n")
    after_sync = await qualifiers(target)
    assert after_sync["meta"].count(TSMETA_QUALIFIER) == 3
    uid_meta = [q for q in after_sync["uid"] if q in set(UID_META_QUALIFIERS.values())]
    assert sorted(uid_meta) == sorted([b"metric_meta"] * 2 + [b"tagk_meta"] + [b"tagv_meta"] * 2)
    ts_meta = [q for q in after_sync["meta"] if q in (TSMETA_QUALIFIER, TSMETA_COUNTER_QUALIFIER)]

    purged = await target.run("uid", "metapurge")
    assert (purged.code, purged.out) == (
        0,
        f"Purged {len(uid_meta)} UIDMeta and {len(ts_meta)} TSMeta columns\n",
    )
    after_purge = await qualifiers(target)
    assert after_purge["meta"] == [INDEX_QUALIFIER] * 3
    assert not set(after_purge["uid"]) & set(UID_META_QUALIFIERS.values())
    again = await target.run("uid", "metapurge")
    assert again.out == "Purged 0 UIDMeta and 0 TSMeta columns\n"
    wrong = await target.run("uid", "metapurge", "extra")
    assert wrong.code == 2
