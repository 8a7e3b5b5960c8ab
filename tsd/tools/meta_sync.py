"""``tsdb meta-sync``: index the series already in the data table (see tsd.meta.sync).

Run it once against a store written without tsd (or before meta rows existed), so that
``/api/search/lookup`` and Grafana's template variables find the older series. With meta
tracking on in the configuration it writes OpenTSDB's meta rows instead of tsd's index
cell. Prints ``rows scanned, series indexed``.
"""

from __future__ import annotations

import argparse
import sys

from tsd.meta.service import MetaService
from tsd.meta.sync import sync_series_index
from tsd.tools.common import ToolStore, add_store_options, open_store, run_async, tool_config


def configure(parser: argparse.ArgumentParser) -> None:
    add_store_options(parser)


async def meta_sync(store: ToolStore) -> int:
    """Index the data table's series; prints the report line (also ``tsdb uid metasync``)."""
    meta = MetaService(store.storage, store.uids, store.cfg)
    report = await sync_series_index(store.storage, store.cfg.storage.data_table, meta)
    sys.stdout.write(f"{report.rows} rows scanned, {report.series} series indexed\n")
    return 0


def run(args: argparse.Namespace) -> int:
    cfg = tool_config(args)

    async def main() -> int:
        async with open_store(cfg) as store:
            return await meta_sync(store)

    return run_async(main())
