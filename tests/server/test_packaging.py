"""The container files, checked without a Docker engine: the Dockerfile runs what
scripts/tsd runs, as a non-root user, with a health check that works against a real
daemon; the HBase container's entrypoint stops HBase cleanly on SIGTERM (run directly,
with a stand-in for scripts/hbase that records its calls)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tsd.cli import build_parser
from tsd.daemon import Daemon

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
ENTRYPOINT = ROOT / "docker" / "hbase-entrypoint.sh"


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages(path: Path) -> list[list[tuple[str, str]]]:
    """The instructions of each stage (each starts at its FROM)."""
    found: list[list[tuple[str, str]]] = []
    for word, rest in instructions(path):
        if word == "FROM":
            found.append([])
        found[-1].append((word, rest))
    return found


def one(path: Path, name: str) -> str:
    """The only ``name`` instruction of the file's last stage (the image)."""
    found = [rest for word, rest in stages(path)[-1] if word == name]
    assert len(found) == 1, f"{name} in {path.name}: {found}"
    return found[0]


def scripts_tsd_command() -> list[str]:
    """scripts/tsd's exec line, the program by its name, without the "$@" it passes on."""
    lines = (ROOT / "scripts" / "tsd").read_text().splitlines()
    (exec_line,) = [line for line in lines if line.startswith("exec ")]
    words = shlex.split(exec_line)[1:]
    assert words[-1] == "$@"
    return [Path(words[0]).name, *words[1:-1]]


def test_dockerfile_runs_what_scripts_tsd_runs() -> None:
    entrypoint = json.loads(one(DOCKERFILE, "ENTRYPOINT"))
    cmd = json.loads(one(DOCKERFILE, "CMD"))
    # scripts/tsd's command, then the volume: flags that replace CMD keep the data directory
    assert entrypoint == [*scripts_tsd_command(), "--data-dir", one(DOCKERFILE, "VOLUME")]
    assert "--data-dir" not in cmd
    args = build_parser("tsd").parse_args(entrypoint[1:] + cmd)
    assert args.auto_metric is True
    assert args.port == int(one(DOCKERFILE, "EXPOSE"))
    assert Path(args.data_dir) == Path(one(DOCKERFILE, "VOLUME"))


def test_compose_command_goes_through_the_same_entrypoint() -> None:
    compose = (ROOT / "docker-compose.yml").read_text()
    tsd_service = compose[compose.index("  tsd:") :]
    command = re.findall(r'^\s+- "(--[^"]+)"$', tsd_service, re.MULTILINE)
    entrypoint = json.loads(one(DOCKERFILE, "ENTRYPOINT"))
    args = build_parser("tsd").parse_args(entrypoint[1:] + command)
    assert args.auto_metric is True
    assert "tsd.storage.backend=hbase" in args.set
    assert Path(args.data_dir) == Path(one(DOCKERFILE, "VOLUME"))
    assert re.search(r"^\s+- tsd-data:/data$", tsd_service, re.MULTILINE)


def test_dockerfile_runs_as_a_user_that_is_not_root() -> None:
    words = [word for word, _ in stages(DOCKERFILE)[-1]]
    user = one(DOCKERFILE, "USER")
    assert user.split(":")[0] not in ("root", "0")
    assert words.index("USER") < words.index("ENTRYPOINT")
    run = one(DOCKERFILE, "RUN")
    assert (
        f"useradd --system --uid 4242 --user-group --home-dir /data --no-create-home {user}" in run
    )
    assert f"chown {user}:{user} /data" in run


def healthcheck_command(port: int) -> list[str]:
    text = one(DOCKERFILE, "HEALTHCHECK")
    command = json.loads(text[text.index("CMD ") + 4 :])
    assert any(":4242/" in word for word in command)  # the port EXPOSE and CMD give
    return [word.replace(":4242/", f":{port}/") for word in command]


async def run(command: list[str]) -> int:
    # the image's "python" is this interpreter here
    process = await asyncio.create_subprocess_exec(
        *[sys.executable if word == "python" else word for word in command],
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    return await process.wait()


async def test_healthcheck_passes_against_a_daemon_and_fails_without(tsd: Daemon) -> None:
    assert await run(healthcheck_command(tsd.port)) == 0
    port = tsd.port
    await tsd.stop()
    assert await run(healthcheck_command(port)) != 0


# -- the HBase container's entrypoint ---------------------------------------------------------

FAKE_HBASE = """#!/usr/bin/env bash
# stands in for scripts/hbase: records each call; "running" while $DIR/running exists
echo "$1" >>"$DIR/calls"
case "$1" in
start) touch "$DIR/running"; echo "HBase started" ;;
stop) rm -f "$DIR/running"; echo "HBase stopped" ;;
status) [ -f "$DIR/running" ] ;;
esac
"""


@pytest.fixture
def fake_hbase(tmp_path: Path) -> dict[str, str]:
    script = tmp_path / "hbase"
    script.write_text(FAKE_HBASE)
    script.chmod(0o755)
    (tmp_path / "logs").mkdir()
    return {
        **os.environ,
        "DIR": str(tmp_path),
        "TSD_HBASE_SCRIPT": str(script),
        "TSD_HBASE_VAR": str(tmp_path),
        "TSD_HBASE_WATCH_INTERVAL": "0.05",
    }


def _default_signals() -> None:
    """In the child: SIGINT and SIGQUIT at their defaults, as a container's PID 1 starts. A
    runner started in the background of a shell without job control ignores them, and a
    shell that starts with a signal ignored cannot trap it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def start_entrypoint(env: dict[str, str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [str(ENTRYPOINT)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_signals,  # noqa: PLW1509 - two signal() calls, no threads touched
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "HBase started\n"  # start returned: HBase is up
    return process


def test_entrypoint_stops_hbase_on_sigterm(fake_hbase: dict[str, str], tmp_path: Path) -> None:
    process = start_entrypoint(fake_hbase)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0] == "start"
    assert calls[-1] == "stop"
    assert "stopping HBase" in err
    assert not (tmp_path / "running").exists()


def test_entrypoint_stops_hbase_on_sigint(fake_hbase: dict[str, str], tmp_path: Path) -> None:
    process = start_entrypoint(fake_hbase)
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=30)
    assert process.returncode == 0
    assert (tmp_path / "calls").read_text().splitlines()[-1] == "stop"


def test_entrypoint_exits_1_when_hbase_dies(fake_hbase: dict[str, str], tmp_path: Path) -> None:
    process = start_entrypoint(fake_hbase)
    (tmp_path / "running").unlink()  # HBase went away without being asked
    _, err = process.communicate(timeout=30)
    assert process.returncode == 1
    assert "no longer running" in err
    assert "stop" not in (tmp_path / "calls").read_text().splitlines()


def test_hbase_image_runs_the_entrypoint() -> None:
    dockerfile = ROOT / "docker" / "hbase.Dockerfile"
    assert json.loads(one(dockerfile, "CMD")) == ["docker/hbase-entrypoint.sh"]
    copies = [rest for word, rest in instructions(dockerfile) if word == "COPY"]
    assert "docker/hbase-entrypoint.sh ./docker/hbase-entrypoint.sh" in copies
    assert os.access(ENTRYPOINT, os.X_OK)
