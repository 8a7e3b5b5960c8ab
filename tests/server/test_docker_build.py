"""The Docker image, built and run without a Docker engine.

The Dockerfile's own instructions are read and carried out on this machine, each stage in
a directory that stands for its file system (``/src`` is ``<stage>/src``) with a fresh
virtual environment for its Python (``pip``, ``python`` and ``tsdb`` are that
environment's): COPY from the build context (.dockerignore honoured) or another stage,
WORKDIR, and every command of every RUN line (``pip wheel``, ``pip install``,
``python -m tsd.native``, ``mkdir``, ``chown``, ``rm``; ``useradd`` stands for the image's
user, which is ``nobody`` here). The built wheel must hold every extension of setup.py.

Then the image's ENTRYPOINT runs as that unprivileged user in its working directory, which
that user cannot write (the way issue 25 found compose crash-looping): with the image's CMD
and with docker-compose.yml's ``command:`` for the tsd service, both parsed from the files.
The container's port is published on a free loopback port (``--bind``/``--port`` appended,
as ``ports:`` maps them). The daemon must start, take a point and read it back, and report
every helper loaded; on HBase, a gateway it cannot reach or a data directory it cannot
write is one line on stderr, no traceback.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.daemon_process import (
    UNPRIVILEGED_GID,
    UNPRIVILEGED_UID,
    as_unprivileged,
    daemon_process,
    free_port,
    http,
    log_events,
    metric_value,
    stat_value,
)
from tests.hbase.opentsdb import tsd_hbase_keys
from tests.hbase_harness import HBaseServer, drop_tables, unique_prefix
from tests.server.conftest import TABLES
from tests.server.test_packaging import DOCKERFILE, ROOT, stages
from tests.test_native import setup_py_extensions

# Building every wheel takes about a minute with pip's cache (more on a loaded machine): more
# than tests/server's 120 s default for the module's first test, which builds the image.
# ``serial``: the whole module runs in scripts/test's one-process run, beside its HBase test,
# so the image is built once a suite rather than once in each of the two runs.
pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.timeout(900, method="thread")]

#: the programs of the images' Python, taken from each stage's virtual environment
PYTHON_PROGRAMS = ("pip", "python", "tsdb")
RUN_TIMEOUT_S = 900


@dataclass
class Stage:
    """One stage: its stand-in root, its Python environment and its settings so far."""

    name: str
    root: Path
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    user: str = "root"
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)

    def path(self, container_path: str) -> Path:
        """Where a path of the image is here (relative ones from the working directory)."""
        absolute = os.path.normpath(os.path.join(self.workdir, container_path))
        return self.root / absolute.lstrip("/")

    def word(self, word: str) -> str:
        """A command word with the image's absolute paths mapped here."""
        if word.startswith("/"):
            return str(self.path(word))
        if word in PYTHON_PROGRAMS:
            return str(self.root / "venv" / "bin" / word)
        return word


class Image:
    """The stages of a Dockerfile carried out under ``base`` (a directory every user may
    enter: the unprivileged user runs the result)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.stages: dict[str, Stage] = {}
        self.useradd: list[str] = []  # the users the RUN lines create (nobody stands in)

    def build(self, dockerfile: Path) -> Stage:
        stage: Stage | None = None
        for number, instructions in enumerate(stages(dockerfile)):
            for word, rest in instructions:
                if word == "FROM":
                    stage = self._from(rest, number)
                    continue
                assert stage is not None
                getattr(self, f"_{word.lower()}")(stage, rest)
        assert stage is not None
        return stage

    def _from(self, rest: str, number: int) -> Stage:
        words = rest.split()
        image = words[0]
        name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(number)
        assert image.startswith("python:"), image
        version = image.split(":")[1].split("-")[0]
        if version != f"{sys.version_info[0]}.{sys.version_info[1]}":
            pytest.skip(f"the image's Python is {version}, this one {sys.version}")
        stage = self.stages[name] = Stage(name, self.base / name)
        stage.root.mkdir()
        stage.root.chmod(0o755)
        subprocess.run([sys.executable, "-m", "venv", stage.root / "venv"], check=True)
        return stage

    def _workdir(self, stage: Stage, rest: str) -> None:
        stage.workdir = os.path.join(stage.workdir, rest)
        stage.path(".").mkdir(parents=True, exist_ok=True)  # as Docker: root's

    def _env(self, stage: Stage, rest: str) -> None:
        for item in shlex.split(rest):
            key, _, value = item.partition("=")
            stage.env[key] = value

    def _user(self, stage: Stage, rest: str) -> None:
        stage.user = rest

    def _copy(self, stage: Stage, rest: str) -> None:
        words = shlex.split(rest)
        source_stage = None
        if words[0].startswith("--from="):
            source_stage = self.stages[words.pop(0).partition("=")[2]]
        *sources, destination = words
        target = stage.path(destination)
        if destination.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
        for source in sources:
            if source_stage is not None:
                copy_into(source_stage.path(source), target, context=False)
            else:
                assert not dockerignored(Path(source)), source
                copy_into(ROOT / source, target, context=True)

    def _run(self, stage: Stage, rest: str) -> None:
        words = shlex.split(rest)
        assert not {"|", "||", ";", "&"} & set(words), f"only && chains are run: {rest}"
        command: list[str] = []
        for word in [*words, "&&"]:
            if word != "&&":
                command.append(word)
                continue
            self._command(stage, command)
            command = []

    def _command(self, stage: Stage, words: list[str]) -> None:
        env = {**os.environ, **stage.env}
        env.pop("TSD_DISABLE_NATIVE", None)
        while "=" in words[0] and not words[0].startswith("-"):  # NAME=value prefixes
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        program = words[0]
        if program == "useradd":
            self.useradd.append(words[-1])
            return
        if program == "chown":
            owner, path = words[1], stage.path(words[2])
            assert owner.split(":")[0] in self.useradd, owner
            if os.geteuid() == 0:  # else this user stands in for the image's
                os.chown(path, UNPRIVILEGED_UID, UNPRIVILEGED_GID)
            return
        assert program in (*PYTHON_PROGRAMS, "mkdir", "rm"), f"not simulated: {words}"
        subprocess.run(
            [stage.word(word) for word in words],
            cwd=stage.path("."),
            env=env,
            check=True,
            timeout=RUN_TIMEOUT_S,
        )

    def _volume(self, stage: Stage, rest: str) -> None:
        stage.volumes += json.loads(rest) if rest.startswith("[") else rest.split()

    def _entrypoint(self, stage: Stage, rest: str) -> None:
        stage.entrypoint = json.loads(rest)

    def _cmd(self, stage: Stage, rest: str) -> None:
        stage.cmd = json.loads(rest)

    def _expose(self, stage: Stage, rest: str) -> None:
        pass  # the test publishes a free port instead

    def _healthcheck(self, stage: Stage, rest: str) -> None:
        pass  # run against a daemon by tests/server/test_packaging.py


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def dockerignored(relative: Path) -> bool:
    """Whether the build context leaves out ``relative`` (to the checkout): the pattern
    forms .dockerignore uses, a path and ``**/name`` at any depth."""
    for pattern in dockerignore_patterns():
        if pattern.startswith("**/"):
            if fnmatch.fnmatch(relative.name, pattern[3:]):
                return True
        elif fnmatch.fnmatch(str(relative), pattern.rstrip("/")):
            return True
    return False


def copy_into(source: Path, target: Path, context: bool) -> None:
    """COPY: a file into a directory or to its name; a directory's contents into the target.
    From the build ``context``, what .dockerignore names is left out (with all under it)."""
    if source.is_file():
        if target.is_dir():
            target = target / source.name
        shutil.copy2(source, target)
        return
    for directory, subdirectories, files in os.walk(source):
        here = Path(directory)
        if context:
            subdirectories[:] = [
                d for d in subdirectories if not dockerignored((here / d).relative_to(ROOT))
            ]
        (target / here.relative_to(source)).mkdir(parents=True, exist_ok=True)
        for name in files:
            if context and dockerignored((here / name).relative_to(ROOT)):
                continue
            shutil.copy2(here / name, target / here.relative_to(source) / name)


# -- the build ---------------------------------------------------------------------------------


#: the build under way or done: its directory and its outcome (:func:`start_building`)
_BUILD: dict[str, tuple[Path, Future[tuple[Image, Stage]]]] = {}


def _build(base: Path, done: Future[tuple[Image, Stage]]) -> None:
    try:
        built = Image(base)
        done.set_result((built, built.build(DOCKERFILE)))
    except BaseException as exc:  # handed to the fixture, which raises it in the test
        done.set_exception(exc)


def start_building() -> None:
    """Start building the image in a thread of its own, once a run. The run's collection
    calls this when it selected a test of this module (tests/server/conftest.py): the
    build is pip and the compiler in subprocesses, 100 s on a loaded two-core machine,
    and the one-process run's HBase tests go on meanwhile instead of waiting for it."""
    if "image" in _BUILD:
        return
    base = Path(tempfile.mkdtemp(prefix="tsd-image-"))
    base.chmod(0o755)  # the unprivileged user runs the image's Python from here
    done: Future[tuple[Image, Stage]] = Future()
    _BUILD["image"] = (base, done)
    threading.Thread(target=_build, args=(base, done), name="image-build", daemon=True).start()


def discard_build() -> None:
    """At the run's end: wait for a build started and remove its directory."""
    if "image" in _BUILD:
        base, done = _BUILD.pop("image")
        wait([done])
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def image() -> Iterator[tuple[Image, Stage]]:
    """Built once a run (a module fixture was built twice, about 26 s each), and once a
    suite: every test of the module is in scripts/test's one-process run (``serial``);
    started as the run begins (:func:`start_building`)."""
    start_building()
    try:
        yield _BUILD["image"][1].result()
    finally:
        discard_build()


def test_the_wheel_holds_every_helper(image: tuple[Image, Stage]) -> None:
    built, _ = image
    (build_stage,) = [s for s in built.stages.values() if any(s.root.glob("wheels/tsd-*.whl"))]
    (wheel,) = build_stage.root.glob("wheels/tsd-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    compiled = {
        name
        for name in setup_py_extensions()
        if any(n.startswith(name.replace(".", "/") + ".") and n.endswith(".so") for n in names)
    }
    assert sorted(compiled) == sorted(setup_py_extensions())
    assert not wheel.name.endswith("-none-any.whl")  # a platform wheel: C inside


def test_the_image_installs_from_the_wheels_alone(image: tuple[Image, Stage]) -> None:
    _, runtime = image
    assert not runtime.path("/wheels").exists()  # the RUN line removed them
    tsdb = runtime.root / "venv" / "bin" / "tsdb"
    assert tsdb.is_file()
    # the tree is not this checkout's: the daemon comes from the installed wheel
    done = subprocess.run(
        [runtime.word("python"), "-c", "import tsd; print(tsd.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=runtime.path("."),
    )
    assert Path(done.stdout.strip()).is_relative_to(runtime.root / "venv")


# -- running it --------------------------------------------------------------------------------


def compose_command() -> list[str]:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    command = services["tsd"]["command"]
    assert isinstance(command, list)
    return [str(word) for word in command]


def compose_volumes() -> list[str]:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return [str(volume).split(":")[1] for volume in services["tsd"].get("volumes", [])]


def container_argv(runtime: Stage, arguments: list[str], port: int) -> list[str]:
    """The ENTRYPOINT with ``arguments`` (CMD or compose's command), published on a free
    loopback port, as the image's user."""
    assert runtime.user not in ("root", "0")
    argv = [runtime.word(word) for word in [*runtime.entrypoint, *arguments]]
    return as_unprivileged([*argv, "--bind=127.0.0.1", f"--port={port}"])


def run_container(
    runtime: Stage, arguments: list[str], *extra: str
) -> subprocess.CompletedProcess[str]:
    """The container run to its end (a start that fails)."""
    return subprocess.run(
        [*container_argv(runtime, arguments, free_port()), *extra],
        cwd=runtime.path("."),
        env={k: v for k, v in os.environ.items() if k != "TSD_DISABLE_NATIVE"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_working_directory_is_not_the_users(image: tuple[Image, Stage]) -> None:
    _, runtime = image
    workdir = runtime.path(".")
    if os.geteuid() != 0:
        pytest.skip("run as root to run the image as another user")
    assert runtime.workdir != runtime.volumes[0]
    assert subprocess.run(as_unprivileged(["test", "-w", str(workdir)])).returncode == 1
    assert (
        subprocess.run(
            as_unprivileged(["test", "-w", str(runtime.path(runtime.volumes[0]))])
        ).returncode
        == 0
    )


def serves_a_point(port: int, metric: str, value: int) -> None:
    """A point put with ``?sync`` is read back, and every helper of setup.py is loaded."""
    point = {"metric": metric, "timestamp": 1700000000, "value": value, "tags": {"a": "b"}}
    assert http(port, "/api/put?sync", [point])[0] == 204
    status, body = http(port, f"/api/query?start=1699999999&end=1700000001&m=sum:{metric}")
    assert status == 200, body
    assert json.loads(body)[0]["dps"] == {"1700000000": value}
    assert stat_value(port, "tsd.native.helpers.loaded") == len(setup_py_extensions())


@pytest.mark.parametrize("arguments", ["cmd", "compose-embedded"])
def test_the_image_serves_as_the_unprivileged_user(
    image: tuple[Image, Stage], tmp_path: Path, arguments: str
) -> None:
    """The image's CMD (``docker run``), and compose's command on the embedded store
    (compose's backend swapped by one more --set: the others need an HBase)."""
    _, runtime = image
    volume = runtime.path(runtime.volumes[0])
    before = sorted(runtime.path(".").iterdir())
    args = (
        runtime.cmd
        if arguments == "cmd"
        else [*compose_command(), "--set=tsd.storage.backend=embedded"]
    )
    port = free_port()
    log = tmp_path / "tsd.log"
    env = {k: v for k, v in os.environ.items() if k != "TSD_DISABLE_NATIVE"}
    with daemon_process(
        container_argv(runtime, args, port), port=port, cwd=runtime.path("."), log=log, env=env
    ):
        serves_a_point(port, "docker.test", 42)
        assert metric_value(port, "tsd_native_helpers_loaded") == len(setup_py_extensions())
    assert [e for e in log_events(log.read_text()) if "native" in e["event"]] == []
    # everything it wrote is in the volume, owned by the image's user; the working
    # directory is as it was
    assert sorted(runtime.path(".").iterdir()) == before
    written = list(volume.rglob("*"))
    assert written
    assert {p.stat().st_uid for p in written} == {
        UNPRIVILEGED_UID if os.geteuid() == 0 else os.geteuid()
    }


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    last = done.stderr.splitlines()[-1]
    assert last.startswith("tsdb tsd: ")
    return last


def test_compose_on_an_unreachable_hbase_is_one_line(image: tuple[Image, Stage]) -> None:
    """Compose's command exactly: its gateway (``hbase``) does not resolve here."""
    _, runtime = image
    line = one_error_line(run_container(runtime, compose_command()))
    assert "Could not connect to ('hbase', 9090)" in line


def test_compose_with_a_data_volume_it_cannot_write_is_one_line(
    image: tuple[Image, Stage], tmp_path: Path
) -> None:
    """A volume the user cannot write (a bind mount owned by root, the usual mistake): the
    write-ahead log cannot be created. The tables are not created, so that the start gets
    there without an HBase."""
    _, runtime = image
    if os.geteuid() != 0:
        pytest.skip("run as root to hand the volume to root and run the image as nobody")
    assert compose_volumes() == runtime.volumes  # compose mounts the image's volume
    volume = runtime.path(runtime.volumes[0])
    kept = volume.rename(volume.with_name("kept-volume"))
    volume.mkdir(mode=0o755)  # root's, empty: a bind mount of a directory root made
    try:
        done = run_container(runtime, compose_command(), "--set=tsd.storage.create_tables=false")
    finally:
        shutil.rmtree(volume)
        kept.rename(volume)
    line = one_error_line(done)
    assert line.startswith(f"tsdb tsd: cannot create the write-ahead log '{volume}/wal': ")
    assert "Permission denied" in line


@pytest.mark.hbase
def test_compose_on_hbase_serves_as_the_unprivileged_user(
    image: tuple[Image, Stage], hbase_server: HBaseServer, tmp_path: Path
) -> None:
    """Compose's command on the test HBase: its gateway's address and this test's own table
    names appended (compose's network resolves ``hbase``; tsd creates the tables, as on a
    first ``docker compose up``). The write-ahead log goes to the volume."""
    _, runtime = image
    prefix = unique_prefix()
    cfg = hbase_server.storage_config(
        **{f"{key}_table": f"{prefix}{name}" for key, name in TABLES.items()}
    )
    keys = [f"--set={key}={value}" for key, value in tsd_hbase_keys(cfg, None).items()]
    port = free_port()
    log = tmp_path / "tsd.log"
    env = {k: v for k, v in os.environ.items() if k != "TSD_DISABLE_NATIVE"}
    argv = container_argv(runtime, [*compose_command(), *keys], port)
    try:
        with daemon_process(argv, port=port, cwd=runtime.path("."), log=log, env=env):
            serves_a_point(port, "docker.hbase", 7)
    finally:
        asyncio.run(drop_tables(hbase_server, prefix))
    wal = runtime.path(runtime.volumes[0]) / "wal"
    assert wal.is_dir()
    assert wal.stat().st_uid == (UNPRIVILEGED_UID if os.geteuid() == 0 else os.geteuid())
