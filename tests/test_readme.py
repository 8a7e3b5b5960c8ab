"""The README's usage examples, run as pasted in a shell against a started daemon.

An example is a fenced ``sh`` block right after an ``<!-- example: NAME -->`` line. The
blocks run in README order under ``bash -euo pipefail`` against ``tsdb tsd --auto-metric``
(what ``scripts/tsd`` runs) on a free port: port 4242 in the text is replaced by it.
Each example has a check below; an example without one (or a check without its example)
fails the test, so the README and this file stay in step.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a daemon in a subprocess

README = Path(__file__).resolve().parent.parent / "README.md"
EXAMPLE = re.compile(r"^<!-- example: ([\w-]+) -->\n```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Example:
    name: str
    script: str


def readme_examples() -> list[Example]:
    return [Example(m[1], m[2]) for m in EXAMPLE.finditer(README.read_text())]


def check_telnet_put(out: str) -> None:
    assert out == ""  # telnet put is silent on success


def check_http_put(out: str) -> None:
    assert out == "204\n"


def check_query(out: str) -> None:
    first, second = out.splitlines()
    assert first == second  # -g and %7B...%7D ask the same
    series = {s["tags"]["host"]: s for s in json.loads(first)}
    # The HTTP put was stored (?sync); the telnet one too unless still buffered.
    assert series["web02"]["metric"] == "sys.cpu.user"
    assert list(series["web02"]["dps"].values()) == [42.0]


def check_suggest_version(out: str) -> None:
    suggest, version = out.splitlines()
    assert json.loads(suggest) == ["sys.cpu.user"]
    assert json.loads(version)["version"]


def check_metrics(out: str) -> None:
    lines = out.splitlines()
    assert 'tsd_ingest_points_total{protocol="http"} 1.0' in lines
    assert any(line.startswith('tsd_ingest_points_total{protocol="telnet"}') for line in lines)


CHECKS: dict[str, Callable[[str], None]] = {
    "telnet-put": check_telnet_put,
    "http-put": check_http_put,
    "query": check_query,
    "suggest-version": check_suggest_version,
    "metrics": check_metrics,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[int]:
    """``tsdb tsd`` as scripts/tsd starts it, on a free port; its port once it listens."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tsd", "tsd", "--auto-metric", "--port", str(port)]
        + ["--data-dir", str(tmp_path / "data"), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    log: list[str] = []
    for line in process.stdout:  # the log line that says it listens
        log.append(line)
        if "daemon.started" in line:
            break
    else:
        raise AssertionError(f"the daemon did not start (exit {process.wait()}): {log}")
    # keep reading its log, so that a full pipe never blocks it
    drain = threading.Thread(target=lambda: log.extend(process.stdout or ()), daemon=True)
    drain.start()
    try:
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)
        drain.join()
        process.stdout.close()


def test_every_example_has_a_check() -> None:
    names = [example.name for example in readme_examples()]
    assert len(names) == len(set(names))
    assert set(names) == set(CHECKS)


def test_readme_examples_work_as_pasted(daemon: int) -> None:
    missing = [tool for tool in ("bash", "curl", "nc") if shutil.which(tool) is None]
    if missing:
        pytest.skip(
            f"the README's examples need {', '.join(missing)} (apt install curl netcat-openbsd)"
        )
    env = dict(os.environ)
    for example in readme_examples():
        script = re.sub(r"(localhost[: ])4242\b", rf"\g<1>{daemon}", example.script)
        assert script != example.script or "4242" not in example.script
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert done.returncode == 0, f"{example.name}: {done.stderr}"
        CHECKS[example.name](done.stdout)
