"""The layering of tsd/, checked two ways.

* AST: every import in ``tsd/`` (function-level ones and ``importlib.import_module`` of a
  constant included) obeys the layer table of ``docs/architecture.md``: a module imports
  its own row and the rows listed for it, never what its "never" column names. The table
  is parsed from the page, so the page stays true: every module falls under a row, every
  row names a module, every file the page names exists.
* Subprocess: importing a pure module pulls in no asyncio, aiohttp, structlog or storage
  (the aiohttp test_circular_imports.py idea), which also catches imports the standard
  library or a third-party package makes on our behalf.
"""

from __future__ import annotations

import ast
import pkgutil
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import tsd.codec
import tsd.protocol

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
TABLE_MARKER = "<!-- layering table"


@dataclass(frozen=True)
class Rule:
    allowed: frozenset[str]
    never: frozenset[str]


def parse_layer_table(markdown: str) -> dict[str, Rule]:
    """Rows of the table after the marker: module -> (may import, never imports)."""
    lines = markdown[markdown.index(TABLE_MARKER) :].splitlines()[1:]
    rules: dict[str, Rule] = {}
    for line in lines[2:]:  # after the header and its separator
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        module, allowed, never = (re.findall(r"`([^`]+)`", cell) for cell in cells)
        rules[module[0]] = Rule(frozenset(allowed), frozenset(never))
    return rules


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def row_of(name: str, rows: dict[str, Rule]) -> str | None:
    """The longest row naming ``name`` or one of its packages (the ``tsd`` row is the
    package's ``__init__`` alone, so that a new top-level module needs a row)."""
    best = None
    for row in rows:
        covers = name == row or (row != "tsd" and name.startswith(row + "."))
        if covers and (best is None or len(row) > len(best)):
            best = row
    return best


def imports_of(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import anywhere in a module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append((node.lineno, base))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def is_under(name: str, target: str) -> bool:
    return name == target or name.startswith(target + ".")


def allows(allowed: str, imported: str) -> bool:
    """Whether an entry of a row's "may import" column allows ``imported``: a module allows
    itself, a package its own modules. ``tsd`` is the package's ``__init__`` alone, so that
    allowing it does not allow the whole tree under it."""
    if allowed == "tsd":
        return imported == "tsd"
    return is_under(imported, allowed)


def check_tree(root: Path, rows: dict[str, Rule]) -> list[str]:
    """Every violation of ``rows`` by the modules of the ``tsd`` package under ``root``."""
    problems = []
    for path in sorted((root / "tsd").rglob("*.py")):
        name = module_name(root, path)
        row = row_of(name, rows)
        if row is None:
            problems.append(f"{name}: no row of the layer table covers it")
            continue
        rule = rows[row]
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for lineno, imported in imports_of(ast.parse(path.read_text()), package):
            where = f"{path.relative_to(root)}:{lineno}"
            banned = [n for n in rule.never if is_under(imported, n)]
            if banned:
                problems.append(f"{where}: {row} never imports {banned[0]} ({imported})")
                continue
            if imported != "tsd" and not is_under(imported, "tsd"):
                continue  # stdlib or third party, not banned
            if row_of(imported, rows) == row or any(allows(a, imported) for a in rule.allowed):
                continue
            problems.append(f"{where}: {row} may not import {imported}")
    return problems


def module_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``tsd`` it imports (anywhere in it, function level too),
    each import resolved to the deepest module it names (``from tsd.a import b`` is
    ``tsd.a.b`` when that is a module, else ``tsd.a``)."""
    paths = {module_name(root, p): p for p in sorted((root / "tsd").rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                (_, base), *_ = imports_of(ast.Module(body=[node], type_ignores=[]), package)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    edges.add(full if full in paths else base)
            elif isinstance(node, ast.Import | ast.Call):  # a Call: import_module("tsd...")
                edges.update(imported for _, imported in imports_of(node, package))
        graph[name] = {target for target in edges if target in paths and target != name}
    return graph


def import_circles(root: Path) -> list[list[str]]:
    """The import circles of ``tsd`` under ``root``: each strongly connected set of two or
    more modules (Tarjan's algorithm, iterative), sorted."""
    graph = module_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        circles.append(sorted(members))
    return sorted(circles)


@pytest.fixture(scope="module")
def rows() -> dict[str, Rule]:
    return parse_layer_table(PAGE.read_text())


def test_tsd_obeys_the_layer_table(rows: dict[str, Rule]) -> None:
    assert check_tree(ROOT, rows) == []


@pytest.mark.slow
def test_no_import_circle() -> None:
    assert import_circles(ROOT) == []


def test_every_row_names_a_module(rows: dict[str, Rule]) -> None:
    modules = {module_name(ROOT, p) for p in (ROOT / "tsd").rglob("*.py")}
    assert [row for row in rows if row not in modules] == []


def test_every_file_the_page_names_exists() -> None:
    named = set(re.findall(r"`(tsd/[\w/]+\.py)`", PAGE.read_text()))
    assert named, "the page names no file"
    assert sorted(p for p in named if not (ROOT / p).is_file()) == []


# -- the checker itself -----------------------------------------------------------------------

SYNTHETIC_TABLE = f"""
{TABLE_MARKER} -->
| module | may import from tsd | never imports |
| --- | --- | --- |
| `tsd` | — | — |
| `tsd.errors` | — | `asyncio` |
| `tsd.codec` | `tsd.errors` | `asyncio`, `tsd.storage` |
| `tsd.storage` | `tsd.errors` | — |
| `tsd.server` | `tsd.codec`, `tsd.errors`, `tsd.storage` | — |
"""


def write_tree(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


CLEAN_TREE = {
    "tsd/__init__.py": "",
    "tsd/errors.py": "import re\n",
    "tsd/codec/__init__.py": "from tsd.codec.value import x\n",
    "tsd/codec/value.py": "from tsd.errors import E\nfrom . import sibling\n",
    "tsd/storage/__init__.py": "import asyncio\nfrom tsd.errors import E\n",
    "tsd/server/__init__.py": "from tsd.storage import S\nfrom tsd.codec import x\n",
}


@pytest.mark.parametrize(
    ("relative", "added", "reported"),
    [
        pytest.param("tsd/codec/value.py", "import asyncio\n", "never imports asyncio", id="never"),
        pytest.param(
            "tsd/codec/value.py",
            "def f():\n    from tsd.storage import S\n",
            "never imports tsd.storage",
            id="function_level_never",
        ),
        pytest.param(
            "tsd/storage/__init__.py",
            "from tsd.server import app\n",
            "tsd.storage may not import tsd.server",
            id="upward",
        ),
        pytest.param(
            "tsd/errors.py",
            "import importlib\nimportlib.import_module('tsd.codec')\n",
            "tsd.errors may not import tsd.codec",
            id="import_module",
        ),
        pytest.param(
            "tsd/codec/value.py",
            "from ..server import app\n",
            "tsd.codec may not import tsd.server",
            id="relative",
        ),
        pytest.param("tsd/extra.py", "", "tsd.extra: no row", id="module_without_row"),
    ],
)
def test_checker_fails_when_a_forbidden_import_is_added(
    tmp_path: Path, relative: str, added: str, reported: str
) -> None:
    rows = parse_layer_table(SYNTHETIC_TABLE)
    write_tree(tmp_path, CLEAN_TREE)
    assert check_tree(tmp_path, rows) == []
    path = tmp_path / relative
    path.write_text((path.read_text() if path.exists() else "") + added)
    problems = check_tree(tmp_path, rows)
    assert len(problems) == 1
    assert reported in problems[0]


@pytest.mark.parametrize(
    ("added", "circle"),
    [
        pytest.param(
            {"tsd/server/__init__.py": "from tsd.storage import S\n"},
            [],
            id="downward_only",
        ),
        pytest.param(
            {"tsd/storage/__init__.py": "def late():\n    from tsd.server import app\n"},
            [["tsd.server", "tsd.storage"]],
            id="function_level_back_edge",
        ),
        pytest.param(
            {
                "tsd/codec/value.py": "from tsd.codec import other\n",
                "tsd/codec/other.py": (
                    "import importlib\nimportlib.import_module('tsd.codec.value')\n"
                ),
            },
            [["tsd.codec.other", "tsd.codec.value"]],
            id="through_import_module",
        ),
    ],
)
def test_circle_finder(tmp_path: Path, added: dict[str, str], circle: list[list[str]]) -> None:
    # CLEAN_TREE's codec/value.py imports its own package (``from . import sibling``),
    # a circle with codec/__init__.py: left out here.
    write_tree(tmp_path, {**CLEAN_TREE, "tsd/codec/value.py": "from tsd.errors import E\n"})
    assert import_circles(tmp_path) == []
    for relative, text in added.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((path.read_text() if path.exists() else "") + text)
    assert import_circles(tmp_path) == circle


@pytest.mark.slow
@pytest.mark.parametrize(
    ("relative", "planted", "reported"),
    [
        pytest.param(
            "tsd/codec/rowkey.py",
            "def _late():\n    import tsd.query.engine\n",
            "tsd.codec may not import tsd.query.engine",
            id="function_level_upward",
        ),
        # protocol/'s row allows `tsd` (the package's __init__): that must not allow a
        # module under it that the row does not name, pure as it may be.
        pytest.param(
            "tsd/protocol/sniff.py",
            "from tsd.stats import StatsRegistry\n",
            "tsd.protocol may not import tsd.stats",
            id="deep_import_under_an_allowed_package_name",
        ),
    ],
)
def test_checker_fails_on_the_real_tree_with_a_forbidden_import(
    tmp_path: Path, rows: dict[str, Rule], relative: str, planted: str, reported: str
) -> None:
    copy = tmp_path / "repo"
    for path in (ROOT / "tsd").rglob("*.py"):
        target = copy / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    assert check_tree(copy, rows) == []
    assert import_circles(copy) == []
    module = copy / relative
    module.write_text(module.read_text() + "\n\n" + planted)
    line = len(module.read_text().splitlines())  # the planted import is the last line
    assert check_tree(copy, rows) == [f"{relative}:{line}: {reported}"]


# -- purity at import time ----------------------------------------------------------------------

PURE_MODULES = [
    info.name
    for package in (tsd.codec, tsd.protocol)
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
] + [
    "tsd.codec",
    "tsd.protocol",
    "tsd.data_points",
    "tsd.query_spec",
    "tsd.errors",
    "tsd.config",
    "tsd.java_text",
    "tsd.storage.settings",
]

FORBIDDEN = ("asyncio", "aiohttp", "tsd.storage.base", "structlog")


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_module_imports_nothing_async(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        f"bad = [m for m in {FORBIDDEN!r} if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} imports {out.stdout.strip()}"
