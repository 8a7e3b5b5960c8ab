"""/api/stats/{query,threads,jvm,region_clients}: OpenTSDB's shapes (StatsRpc), filled with
what a Python process honestly has.

* ``query``: the running and last completed queries (:mod:`tsd.query.tracking`).
* ``threads``: one object per Python thread (the event loop's thread among them), in
  OpenTSDB's keys; Python has no thread priority or interruption, so ``priority`` is 5
  (Java's normal) and ``interrupted`` false; ``state`` is ``RUNNABLE`` for a live
  thread. ``stack`` lists the innermost frame first, as ``module.function(file:line)``.
* ``jvm``: the same sections for the Python process: ``runtime`` (interpreter name,
  vendor, version; start time and uptime of the process), ``memory`` (resident and
  virtual size from /proc), ``gc`` (one entry per collector generation), ``pools`` (the
  event loop: its tasks), ``os`` (the load average). -1 where there is no figure, as
  Java's MemoryUsage does for an undefined maximum.
* ``region_clients``: one object per HBase Thrift gateway (tsd's "region client"), its
  calls counted by the instrumented store; an empty list on the embedded store.
"""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from tsd.config import Config
from tsd.server.http.context import StorageCalls

#: when this module was loaded: the daemon's start, near enough for ``uptime``
_PROCESS_START_S = time.time()


def thread_stats() -> list[dict[str, Any]]:
    frames = sys._current_frames()
    out = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident) if thread.ident is not None else None
        out.append(
            {
                "threadID": thread.ident,
                "name": thread.name,
                "state": "RUNNABLE" if thread.is_alive() else "TERMINATED",
                "interrupted": False,
                "priority": 5,
                "stack": _stack(frame),
            }
        )
    return out


def _stack(frame: FrameType | None) -> list[str]:
    lines = []
    while frame is not None:
        code = frame.f_code
        module = frame.f_globals.get("__name__", "?")
        lines.append(f"{module}.{code.co_name}({Path(code.co_filename).name}:{frame.f_lineno})")
        frame = frame.f_back
    return lines


def process_stats() -> dict[str, dict[str, Any]]:
    """The /api/stats/jvm body for this process."""
    now = time.time()
    rss, vsize = _memory()
    try:
        tasks = len(asyncio.all_tasks())
        loop = type(asyncio.get_running_loop()).__module__
    except RuntimeError:
        tasks, loop = 0, ""
    return {
        "runtime": {
            "startTime": int(_PROCESS_START_S * 1000),
            "uptime": int((now - _PROCESS_START_S) * 1000),
            "vmName": platform.python_implementation(),
            "vmVendor": "Python Software Foundation",
            "vmVersion": platform.python_version(),
        },
        "memory": {
            "heapMemoryUsage": _usage(rss),
            "nonHeapMemoryUsage": _usage(vsize),
            "objectsPendingFinalization": len(gc.garbage),
        },
        "gc": {
            f"generation{index}": {
                "collectionCount": generation["collections"],
                "collectionTime": -1,
            }
            for index, generation in enumerate(gc.get_stats())
        },
        "pools": {"eventLoop": {"type": loop, "tasks": tasks}},
        "os": {"systemLoadAverage": os.getloadavg()[0]},
    }


def _usage(used: int) -> dict[str, int]:
    """Java's MemoryUsage keys; Python has no separate init/committed/max figures."""
    return {"init": -1, "used": used, "committed": used, "max": -1}


def _memory() -> tuple[int, int]:
    """Resident and virtual size in bytes (-1 where /proc is not there)."""
    try:
        fields = Path("/proc/self/statm").read_text().split()
    except OSError:
        return -1, -1
    page = os.sysconf("SC_PAGE_SIZE")
    return int(fields[1]) * page, int(fields[0]) * page


def region_client_stats(config: Config, storage: StorageCalls) -> list[dict[str, Any]]:
    """One entry per Thrift gateway in the shape of asynchbase's region clients (tsd talks
    to gateways, not region servers): its calls, failures and state; the pool's figures
    beside them."""
    if config.storage.backend != "hbase":
        return []
    pool = getattr(storage.inner, "pool", None)
    gateways = getattr(pool, "gateways", ())
    return [
        {
            "endpoint": gateway.endpoint,
            "rpcsSent": gateway.calls,
            "rpcsInFlight": gateway.leased,
            "pendingRPCs": 0,
            "pendingBatchedRPCs": 0,
            "dead": not gateway.up,
            "rpcid": gateway.calls,
            "rpcsTimedout": 0,
            "rpcResponsesTimedout": 0,
            "rpcResponsesUnknown": 0,
            "inflightBreached": 0,
            "pendingBreached": 0,
            "writesBlocked": 0,
            # tsd's own: the Thrift connection pool behind the gateways
            "rpcsFailed": gateway.errors,
            "connectionsOpened": getattr(pool, "opened", 0),
            "connectionsIdle": getattr(pool, "idle_count", 0),
            "poolSize": config.storage.thrift_pool_size,
        }
        for gateway in gateways
    ]
