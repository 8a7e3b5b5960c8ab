"""How ``tsdb tsd`` fails to start: one line on stderr and a documented exit status."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tsd.cli import EXIT_CANNOT_LISTEN
from tsd.daemon import EXIT_STATUS

pytestmark = pytest.mark.slow  # daemons in subprocesses


def run_tsd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tsd", "tsd", "--data-dir", str(tmp_path / "data"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    """The error line: stderr's last, after the daemon's log events (one line each), and
    no traceback anywhere."""
    assert "Traceback" not in done.stderr + done.stdout
    return done.stderr.splitlines()[-1]


def test_port_in_use_is_one_line_and_exit_status_3(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_tsd(tmp_path, "--bind", "127.0.0.1", "--port", str(port))
    assert done.returncode == EXIT_CANNOT_LISTEN == 3
    assert last_line(done) == (
        f"tsdb tsd: cannot listen on 127.0.0.1:{port}: the port is already in use (another "
        "tsd or OpenTSDB?); stop it or choose another port with --port"
    )


def test_address_not_on_this_host(tmp_path: Path) -> None:
    done = run_tsd(tmp_path, "--bind", "192.0.2.1", "--port", "0")  # TEST-NET-1
    assert done.returncode == EXIT_CANNOT_LISTEN
    assert last_line(done) == (
        "tsdb tsd: cannot listen on 192.0.2.1:0: no such address on this host (see --bind)"
    )


def test_exit_statuses_are_in_the_help(tmp_path: Path) -> None:
    done = run_tsd(tmp_path, "--help")
    assert done.returncode == 0
    assert EXIT_STATUS in done.stdout
    assert f"  {EXIT_CANNOT_LISTEN}  cannot listen" in done.stdout


def test_bad_configuration_is_exit_status_2(tmp_path: Path) -> None:
    done = run_tsd(tmp_path, "--set", "tsd.network.port=notaport")
    assert done.returncode == 2
    assert last_line(done).startswith("tsdb tsd: configuration error: ")


def test_hbase_backend_data_dir_not_writable_is_one_line(tmp_path: Path) -> None:
    """The HBase backend keeps its write-ahead log in tsd.storage.data_dir: a directory it
    cannot create is a one-line error and exit status 3, as the embedded store's (the
    tables are not created, so no HBase is needed to get there)."""
    (tmp_path / "file").write_text("")
    done = run_tsd(
        tmp_path,
        *["--bind", "127.0.0.1", "--port", "0", "--data-dir", str(tmp_path / "file" / "data")],
        *["--set", "tsd.storage.backend=hbase", "--set", "tsd.storage.create_tables=false"],
        *["--set", "tsd.storage.hbase.thrift.host=127.0.0.1"],
    )
    assert done.returncode == EXIT_CANNOT_LISTEN == 3
    wal = tmp_path / "file" / "data" / "wal"
    assert last_line(done) == (
        f"tsdb tsd: cannot create the write-ahead log {str(wal)!r}: [Errno 20] Not a directory:"
        f" {str(wal)!r} (tsd.storage.data_dir must be writable)"
    )


def test_random_metric_uids_wider_than_seven_bytes_are_refused_at_start(tmp_path: Path) -> None:
    """OpenTSDB draws random metric UIDs of at most 7 bytes: a wider width is refused before
    the store is opened."""
    done = run_tsd(
        tmp_path,
        *["--port", "0", "--set", "tsd.core.uid.random_metrics=true"],
        *["--set", "tsd.storage.uid.width.metric=8"],
    )
    assert done.returncode == 2
    assert last_line(done) == (
        "tsdb tsd: configuration error: tsd.core.uid.random_metrics: random metric UIDs are"
        " at most 7 bytes wide, and tsd.storage.uid.width.metric is 8"
    )
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param([], id="embedded"),
        # never reached: the port is refused before storage is opened
        pytest.param(["--set", "tsd.storage.backend=hbase"], id="hbase"),
    ],
)
def test_a_start_that_fails_on_the_port_creates_nothing(tmp_path: Path, backend: list[str]) -> None:
    """Started as a user starts it (defaults: ./data in the working directory), on a port
    in use: no data directory, store, write-ahead log or control socket appears."""
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "tsd", "tsd", "--bind", "127.0.0.1", "--port", str(port)]
            + backend,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=fresh,
        )
    assert done.returncode == EXIT_CANNOT_LISTEN
    assert "the port is already in use" in last_line(done)
    assert sorted(p.name for p in fresh.rglob("*")) == []
