"""``tsdb dump`` through the real command line, on closed and on live stores."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tsd.config import StorageConfig
from tsd.storage.base import Put
from tsd.storage.embedded import EmbeddedStorage
from tsd.storage_setup import ensure_tables


async def tsdb(cwd: Path, *args: str) -> tuple[int, str, str]:
    """Run ``python -m tsd`` (in ``cwd``, so no stray ./opentsdb.conf is read)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tsd",
        *args,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


CUSTOM = StorageConfig(
    data_table="mydata", uid_table="myuid", tree_table="mytree", meta_table="mymeta"
)
CONFIG_TEXT = (
    "tsd.storage.hbase.data_table = mydata\n"
    "tsd.storage.hbase.uid_table = myuid\n"
    "tsd.storage.hbase.tree_table = mytree\n"
    "tsd.storage.hbase.meta_table = mymeta\n"
)
# Written in scrambled order; the dump must come out in storage order.
CELLS = [
    ("mydata", Put(b"\x00\x00\x01\x52\xc5\x80\x00", "t", b"\x00\x07", b"\x2a")),
    ("mydata", Put(b"\x00\x00\x01\x52\xc5\x80\x00", "t", b"\x00\x00", b"")),
    ("mydata", Put(b"\x00\x00\x01", "t", b"\xff\xff", b"\x00\xff")),
    ("myuid", Put(b"sys.cpu", "id", b"metrics", b"\x00\x00\x01")),
    ("myuid", Put(b"\x00\x00\x01", "name", b"metrics", b"sys.cpu")),
    ("myuid", Put(b"\x00", "id", b"metrics", b"\x00" * 7 + b"\x01")),
]
EXPECTED = [
    "mydata\t000001\tt\tFFFF\t00FF",
    "mydata\t00000152C58000\tt\t0000\t",
    "mydata\t00000152C58000\tt\t0007\t2A",
    "myuid\t00\tid\t6D657472696373\t0000000000000001",
    "myuid\t000001\tname\t6D657472696373\t7379732E637075",
    "myuid\t7379732E637075\tid\t6D657472696373\t000001",
]


async def write_cells(storage: EmbeddedStorage) -> None:
    await ensure_tables(storage, CUSTOM)
    for table, put in CELLS:
        await storage.put(table, [put])


async def test_dump_prints_every_cell_in_storage_order(tmp_path: Path) -> None:
    storage = EmbeddedStorage(tmp_path / "data")
    await write_cells(storage)
    await storage.close()
    code, out, err = await tsdb(tmp_path, "dump", "--data-dir", str(tmp_path / "data"))
    assert (code, err) == (0, "")
    assert out.splitlines() == EXPECTED


async def test_dump_one_table_found_through_the_config(tmp_path: Path) -> None:
    storage = EmbeddedStorage(tmp_path / "data")
    await write_cells(storage)
    await storage.close()
    config = tmp_path / "opentsdb.conf"
    config.write_text(CONFIG_TEXT + f"tsd.storage.data_dir = {tmp_path / 'data'}\n")
    code, out, _ = await tsdb(tmp_path, "dump", "--config", str(config), "--table", "myuid")
    assert code == 0
    assert out.splitlines() == [line for line in EXPECTED if line.startswith("myuid\t")]
    code, out, _ = await tsdb(tmp_path, "dump", "--config", str(config), "--table", "mymeta")
    assert (code, out) == (0, "")


async def test_dump_of_a_missing_directory_fails(tmp_path: Path) -> None:
    code, out, err = await tsdb(tmp_path, "dump", "--data-dir", str(tmp_path / "absent"))
    assert code != 0
    assert out == ""
    assert "absent" in err
    assert "Traceback" not in err
    assert not (tmp_path / "absent").exists()


async def test_dump_of_a_missing_table_fails(tmp_path: Path) -> None:
    storage = EmbeddedStorage(tmp_path / "data")
    await write_cells(storage)
    await storage.close()
    code, out, err = await tsdb(tmp_path, "dump", "--data-dir", "data", "--table", "tsdb")
    assert code != 0
    assert out == ""
    assert "'tsdb'" in err
    assert "Traceback" not in err


# A stand-in daemon: holds the store open for writing, writes when told, acks each step.
HOLDER_CHILD = """
import asyncio, sys
from tsd.storage.base import FamilySpec, Put
from tsd.storage.embedded import EmbeddedStorage

async def main(path):
    storage = EmbeddedStorage(path)
    await storage.create_table("mydata", [FamilySpec("t")])
    await storage.put("mydata", [Put(b"first", "t", b"q", b"1")])
    print("ready", flush=True)
    sys.stdin.readline()
    await storage.create_table("myuid", [FamilySpec("id")])
    await storage.put("myuid", [Put(b"second", "id", b"q", b"2")])
    print("ready", flush=True)
    sys.stdin.readline()
    await storage.close()

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.slow
async def test_dump_reads_a_store_a_daemon_holds_open(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLDER_CHILD,
        data,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert holder.stdin is not None
    assert holder.stdout is not None
    try:
        assert await holder.stdout.readline() == b"ready\n"
        code, out, err = await tsdb(tmp_path, "dump", "--data-dir", data)
        assert (code, err) == (0, "")
        assert out.splitlines() == ["mydata\t6669727374\tt\t71\t31"]

        holder.stdin.write(b"next\n")
        assert await holder.stdout.readline() == b"ready\n"
        code, out, err = await tsdb(tmp_path, "dump", "--data-dir", data)
        assert (code, err) == (0, "")
        assert out.splitlines() == [
            "mydata\t6669727374\tt\t71\t31",
            "myuid\t7365636F6E64\tid\t71\t32",
        ]
    finally:
        holder.stdin.write(b"stop\n")
        await holder.stdin.drain()
        assert await holder.wait() == 0
