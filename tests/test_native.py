"""The compiled helpers are never silently missing (tsd/native.py): every one of setup.py's
extensions is loaded through one function, ``TSD_DISABLE_NATIVE`` puts every import site
on its Python fallback, and the daemon names each missing helper in one warning and
reports how many loaded on /api/stats and /metrics."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import tsd.native as native
from tests.daemon_process import (
    daemon_process,
    free_port,
    log_events,
    metric_value,
    stat_value,
)

ROOT = Path(__file__).resolve().parent.parent


def setup_py_extensions() -> list[str]:
    """The module name of every ``Extension(...)`` in setup.py."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Extension":
            first = node.args[0]
            assert isinstance(first, ast.Constant)
            names.append(str(first.value))
    return names


def test_the_helpers_are_setup_py_extensions() -> None:
    assert setup_py_extensions()
    assert sorted(native.HELPERS) == sorted(setup_py_extensions())


@pytest.mark.slow
@pytest.mark.fallbacks
def test_only_tsd_native_imports_a_helper() -> None:
    """One place loads them: any other import would escape the switch and the count."""
    found = []
    for path in sorted((ROOT / "tsd").rglob("*.py")):
        if path.name == "native.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Call) and "import_module" in ast.unparse(node.func):
                names = [ast.unparse(arg).strip("'\"") for arg in node.args]
            hits = [name for name in names if name in native.HELPERS]
            if hits and isinstance(node, ast.stmt | ast.expr):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {hits}")
    assert found == []


def test_load_refuses_a_module_setup_py_does_not_build() -> None:
    with pytest.raises(ValueError, match="not one of setup.py's extensions"):
        native.load("tsd.codec.qualifier")


def test_attribute_falls_back_only_where_the_helper_did_not_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(native, "_outcomes", {})  # this test's loads are not the session's
    monkeypatch.setenv("TSD_DISABLE_NATIVE", "1")
    assert native.attribute("tsd.codec._encode", "no_such_function", len) is len
    monkeypatch.setenv("TSD_DISABLE_NATIVE", "0")
    if native.load("tsd.codec._encode") is None:
        pytest.skip("tsd.codec._encode is not built here")
    assert native.attribute("tsd.codec._encode", "tag_suffix", len) is not len
    # a build older than the code that asks for a function: an error, not a quiet fallback
    with pytest.raises(AttributeError, match="no_such_function"):
        native.attribute("tsd.codec._encode", "no_such_function", len)


#: every import site's compiled entry, printed by a fresh interpreter
IMPORT_SITES = """
import json
import tsd.codec.qualifier, tsd.codec.rowkey, tsd.head.head, tsd.protocol.put_json
import tsd.protocol.telnet, tsd.query.decode, tsd.storage.embedded.packed
import tsd.storage.embedded.points, tsd.storage.hbase.rows, tsd.wal.record
import tsd.native
sites = {
    "qualifier": tsd.codec.qualifier._c_encode_into,
    "head": tsd.head.head._c_run_columns,
    "telnet.parse_plain_put": tsd.protocol.telnet._c_parse_plain_put,
    "telnet.take_known_puts": tsd.protocol.telnet._c_take_known_puts,
    "telnet.take_known_into": tsd.protocol.telnet._c_take_known_into,
    "decode": tsd.query.decode._C,
    "packed": tsd.storage.embedded.packed._C,
    "points": tsd.storage.embedded.points._C,
    "rows": tsd.storage.hbase.rows._C,
    "record": tsd.wal.record._C,
}
compiled = {name: value is not None for name, value in sites.items()}
compiled["rowkey"] = tsd.codec.rowkey.tag_suffix is not tsd.codec.rowkey.python_tag_suffix
compiled["put_json"] = (
    tsd.protocol.put_json.known_usual_points
    is not tsd.protocol.put_json.python_known_usual_points
)
print(json.dumps({"compiled": compiled, "status": tsd.native.status()}))
"""


def import_sites(**env: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_SITES],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.slow
@pytest.mark.fallbacks
def test_hidden_helpers_put_every_import_site_on_its_fallback() -> None:
    found = import_sites(TSD_DISABLE_NATIVE="1")
    compiled = found["compiled"]
    assert isinstance(compiled, dict)
    assert len(compiled) == 12
    assert [site for site, c in compiled.items() if c] == []
    assert found["status"] == dict.fromkeys(native.HELPERS, "hidden by TSD_DISABLE_NATIVE")


@pytest.mark.slow
@pytest.mark.fallbacks
def test_built_helpers_serve_every_import_site() -> None:
    if native.disabled() or native.missing():
        pytest.skip(f"helpers not loaded here: {native.missing()}")
    found = import_sites(TSD_DISABLE_NATIVE="0")
    compiled = found["compiled"]
    assert isinstance(compiled, dict)
    assert [site for site, c in compiled.items() if not c] == []
    assert found["status"] == dict.fromkeys(native.HELPERS)


def test_python_m_tsd_native_fails_when_required_and_missing() -> None:
    env = {**os.environ, "TSD_DISABLE_NATIVE": "1", "TSD_REQUIRE_NATIVE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "tsd.native"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == f"0 of {len(native.HELPERS)} compiled helpers loaded"
    env["TSD_REQUIRE_NATIVE"] = "0"
    assert subprocess.run([sys.executable, "-m", "tsd.native"], env=env).returncode == 0


@pytest.mark.slow  # daemons in subprocesses
@pytest.mark.parametrize("hidden", [True, False], ids=["hidden", "loaded"])
def test_the_daemon_reports_the_helpers_it_loaded(tmp_path: Path, hidden: bool) -> None:
    if not hidden and (native.disabled() or native.missing()):
        pytest.skip(f"helpers not loaded here: {native.missing()}")
    port = free_port()
    argv = [sys.executable, "-m", "tsd", "tsd", "--bind", "127.0.0.1", "--port", str(port)]
    argv += ["--data-dir", str(tmp_path / "data")]
    env = {**os.environ, "TSD_DISABLE_NATIVE": "1" if hidden else "0"}
    log = tmp_path / "tsd.log"
    with daemon_process(argv, port=port, cwd=tmp_path, log=log, env=env):
        loaded = stat_value(port, "tsd.native.helpers.loaded")
        exposed = metric_value(port, "tsd_native_helpers_loaded")
        each = {
            helper: metric_value(port, f'tsd_native_helper_loaded{{helper="{helper}"}}')
            for helper in setup_py_extensions()
        }
    warnings = [e for e in log_events(log.read_text()) if "native" in e["event"]]
    expected = 0 if hidden else len(setup_py_extensions())
    assert loaded == exposed == expected
    assert each == dict.fromkeys(setup_py_extensions(), 0.0 if hidden else 1.0)
    if hidden:
        (warning,) = warnings
        assert warning["level"] == "warning"
        assert warning["missing"] == sorted(setup_py_extensions())
        assert warning["loaded"] == 0
    else:
        assert warnings == []


def build_wheel(source: Path, out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``pip wheel`` of ``source`` alone (its build requirements from pip's cache)."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps"]
        + ["--wheel-dir", str(out), str(source)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow  # two builds
def test_a_helper_that_does_not_compile_fails_the_build_when_required(tmp_path: Path) -> None:
    """CI's TSD_REQUIRE_NATIVE: a broken compiler (here ``false``) fails setup.py's build;
    without it the build succeeds with no helper (the fallbacks), as before."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        (source / name).write_bytes((ROOT / name).read_bytes())
    shutil.copytree(
        ROOT / "tsd", source / "tsd", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    required = build_wheel(source, tmp_path / "required", CC="false", TSD_REQUIRE_NATIVE="1")
    assert required.returncode != 0
    assert not list((tmp_path / "required").glob("*.whl"))
    shutil.rmtree(source / "build", ignore_errors=True)
    optional = build_wheel(source, tmp_path / "optional", CC="false", TSD_REQUIRE_NATIVE="0")
    assert optional.returncode == 0, optional.stderr
    (wheel,) = (tmp_path / "optional").glob("tsd-*.whl")
    assert [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".so")] == []
