"""UID cache memory per entry (both directions) against the raw payload, and get_or_create_id
throughput from the cache against lookups that go to the embedded store.

Memory: N names of 20 characters with 3-byte UIDs go into a ``UidCache`` (tracemalloc counts
the cache's dicts and the name/UID objects it keeps alive; the compiled tables' arrays are
mapped pages, counted by ``UidCache.mapped_bytes``), over its compiled tables and over
dicts. Baselines in the same run: the raw
payload (20 + 3 bytes), two plain dicts (the floor for a dict-based design) and an
``OrderedDict`` LRU per direction (the obvious alternative).

Throughput: ``UniqueId.get_or_create_id`` over K existing names, cached (every call a hit)
and uncached (caches dropped before each call, so each is a storage read), plus
``UidService.resolve_for_write`` for a point with 3 tags, all cached. Baseline: a bare
``dict.get`` loop over the same names.

Run: ``python -m bench.uid_cache [--names N] [--lookups K] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import tempfile
import time
import tracemalloc
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tsd.config import Config
from tsd.uid.cache import UidCache
from tsd.uid.service import UidService

NAME_CHARS = 20
UID_WIDTH = 3


def make_payload(count: int) -> tuple[list[str], list[bytes]]:
    names = [f"sys.metric.{i:09d}" for i in range(count)]
    assert all(len(name) == NAME_CHARS for name in names[:1])
    uids = [i.to_bytes(UID_WIDTH, "big") for i in range(1, count + 1)]
    return names, uids


def measure_bytes(
    count: int, build: Callable[[list[str], list[bytes]], Any]
) -> tuple[float, float]:
    """(bytes per entry held, peak bytes per entry) of what ``build`` keeps alive."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    names, uids = make_payload(count)
    kept = build(names, uids)
    del names, uids
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    mapped = kept.mapped_bytes() if isinstance(kept, UidCache) else 0
    del kept
    return (held + mapped - before) / count, (peak + mapped - before) / count


def build_uid_cache(names: list[str], uids: list[bytes], compiled: bool = True) -> UidCache:
    cache = UidCache(max(len(names), 5_000_000), compiled=compiled)
    put = cache.put
    for name, uid in zip(names, uids, strict=True):
        put(name, uid)
    assert cache.id_entries == cache.name_entries == len(names)
    return cache


def build_full_uid_cache(names: list[str], uids: list[bytes]) -> UidCache:
    """A cache at its bound: the entries are split over the two generations."""
    cache = UidCache(len(names))
    put = cache.put
    for name, uid in zip(names, uids, strict=True):
        put(name, uid)
    assert cache.id_entries == cache.name_entries == len(names)
    return cache


def build_plain_dicts(
    names: list[str], uids: list[bytes]
) -> tuple[dict[str, bytes], dict[bytes, str]]:
    forward = dict(zip(names, uids, strict=True))
    reverse = dict(zip(uids, names, strict=True))
    return forward, reverse


def build_ordered_dicts(
    names: list[str], uids: list[bytes]
) -> tuple[OrderedDict[str, bytes], OrderedDict[bytes, str]]:
    forward: OrderedDict[str, bytes] = OrderedDict()
    reverse: OrderedDict[bytes, str] = OrderedDict()
    for name, uid in zip(names, uids, strict=True):
        forward[name] = uid
        reverse[uid] = name
    return forward, reverse


def report_memory(count: int) -> None:
    payload = NAME_CHARS + UID_WIDTH
    print(f"memory, {count:,} names of {NAME_CHARS} chars, {UID_WIDTH}-byte UIDs, both directions")
    print(f"  {'raw payload (baseline)':<28} {payload:>7.1f} B/entry   1.00x")
    for label, build in (
        ("UidCache", build_uid_cache),
        ("UidCache over dicts", lambda names, uids: build_uid_cache(names, uids, False)),
        ("UidCache at its bound", build_full_uid_cache),
        ("two plain dicts", build_plain_dicts),
        ("two OrderedDicts", build_ordered_dicts),
    ):
        held, peak = measure_bytes(count, build)
        print(
            f"  {label:<28} {held:>7.1f} B/entry  {held / payload:>5.2f}x"
            f"   (peak while filling {peak:.1f} B/entry)"
        )


async def report_throughput(lookups: int, data_dir: Path) -> None:
    from tsd.storage.embedded import EmbeddedStorage
    from tsd.storage_setup import ensure_tables

    config = Config()
    config = dataclasses.replace(
        config, core=dataclasses.replace(config.core, auto_create_metrics=True)
    )
    storage = EmbeddedStorage(str(data_dir))
    try:
        await ensure_tables(storage, config.storage)
        uids = UidService(storage, config)
        names = [f"sys.metric.{i:09d}" for i in range(lookups)]
        tags = (("host", "web01"), ("cpu", "0"), ("dc", "lga"))
        for name in names:
            await uids.resolve_for_write(name, tags)
            await uids.tagv.get_or_create_id(name)
        tagv = uids.tagv

        start = time.perf_counter()
        for name in names:
            await tagv.get_or_create_id(name)
        cached_s = time.perf_counter() - start

        start = time.perf_counter()
        for name in names:
            tagv.drop_caches()
            await tagv.get_or_create_id(name)
        uncached_s = time.perf_counter() - start

        plain = {name: tagv.cache.get_id(name) for name in names}
        start = time.perf_counter()
        get = plain.get
        for name in names:
            get(name)
        dict_s = time.perf_counter() - start

        start = time.perf_counter()
        for name in names:
            await uids.resolve_for_write(name, tags)
        resolve_s = time.perf_counter() - start
    finally:
        await storage.close()

    def rate(seconds: float) -> str:
        return f"{lookups / seconds:>12,.0f}/s  {seconds / lookups * 1e6:>8.2f} us"

    print(f"throughput, {lookups:,} existing names (embedded store)")
    print(f"  {'dict.get (baseline)':<34} {rate(dict_s)}")
    print(
        f"  {'get_or_create_id, cached':<34} {rate(cached_s)}   {cached_s / dict_s:.1f}x dict.get"
    )
    print(
        f"  {'get_or_create_id, uncached':<34} {rate(uncached_s)}"
        f"   {uncached_s / cached_s:.0f}x the cached call"
    )
    print(f"  {'resolve_for_write, 3 tags, cached':<34} {rate(resolve_s)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", type=int, default=1_000_000)
    parser.add_argument("--lookups", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None, help="where the store goes (a temp dir)")
    args = parser.parse_args()
    report_memory(args.names)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        asyncio.run(report_throughput(args.lookups, Path(tmp) / "store"))


if __name__ == "__main__":
    main()
