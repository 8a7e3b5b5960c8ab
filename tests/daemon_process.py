"""A ``tsdb tsd`` started as a process by its command line (as an image's entrypoint or a
user runs it), optionally as an unprivileged user, and the HTTP calls the tests make to it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
#: nobody:nogroup on Debian; the daemon runs as them when the tests run as root
UNPRIVILEGED_UID = UNPRIVILEGED_GID = 65534


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def as_unprivileged(argv: Sequence[str]) -> list[str]:
    """``argv`` run as nobody when we are root (setpriv, util-linux), else as it is."""
    if os.geteuid() != 0:
        return list(argv)
    return [
        *["setpriv", f"--reuid={UNPRIVILEGED_UID}", f"--regid={UNPRIVILEGED_GID}"],
        *["--clear-groups", "--", *argv],
    ]


def log_events(text: str) -> list[dict[str, Any]]:
    """The daemon's JSON log events in ``text`` (other lines skipped)."""
    events = []
    for line in text.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
    return events


def http(port: int, path: str, body: object = None, timeout: float = 10.0) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def stat_value(port: int, metric: str) -> int:
    """The value of ``metric`` (one record without an extra tag) on /api/stats."""
    status, body = http(port, "/api/stats")
    assert status == 200, body
    found = [r for r in json.loads(body) if r["metric"] == metric and len(r["tags"]) == 1]
    assert len(found) == 1, found
    return int(found[0]["value"])


def metric_value(port: int, name: str) -> float:
    """The value of the unlabelled sample ``name`` on /metrics."""
    status, body = http(port, "/metrics")
    assert status == 200, body
    values = [
        float(line.split()[1]) for line in body.decode().splitlines() if line.startswith(name + " ")
    ]
    assert len(values) == 1, values
    return values[0]


@contextlib.contextmanager
def daemon_process(
    argv: Sequence[str], *, port: int, cwd: Path, log: Path, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Runs ``argv`` (a daemon listening on ``port``) with its output in ``log``; yields
    once it answers /api/version, and stops it with SIGTERM afterwards (it must exit 0)."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            list(argv), cwd=cwd, env=dict(env or os.environ), stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise AssertionError(f"tsd exited ({process.returncode}):\n{log.read_text()}")
            with contextlib.suppress(OSError):
                if http(port, "/api/version", timeout=2.0)[0] == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"tsd did not answer in {START_TIMEOUT_S} s")
            time.sleep(0.1)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(f"tsd did not stop:\n{log.read_text()[-5000:]}") from None
    assert process.returncode == 0, log.read_text()[-5000:]
