"""The ingest seam (docs/architecture.md): protocols hand points to write/ through the
ingest session's four ways in, and through no other call of any write/ class."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import tsd.write
from tsd.write.ingest import IngestSession

ROOT = Path(tsd.write.__file__).parent.parent
#: where the protocols' adapters live
ADAPTERS = ("server", "tools", "protocol")
#: the session's ways in (``put_run``: put's form for a run of parsed points, one way)
WAYS_IN = {"put", "put_run", "append_run", "append_part", "put_cell"}
#: the session's flow control, settle and sync: calls that take no point
FLOW = {"room", "is_full", "wait_room", "wait_lookup", "has_pending", "settle", "stored"}
#: a method taking one of these takes points (``timestamps``: points as columns)
POINT_PARAMETERS = {"point", "points", "part", "cell", "value", "run", "timestamps"}


def point_taking_methods() -> set[str]:
    """The public methods of every class defined in write/ with a point-like parameter."""
    names: set[str] = set()
    for info in pkgutil.iter_modules(tsd.write.__path__, "tsd.write."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            for name, member in vars(cls).items():
                if name.startswith("_") or not callable(member):
                    continue
                parameters = inspect.signature(member).parameters
                if POINT_PARAMETERS & set(parameters):
                    names.add(name)
    return names


def called_attributes(source: str) -> set[str]:
    return {
        node.func.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }


def adapter_sources() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text()
        for package in ADAPTERS
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def point_calls(sources: dict[str, str], methods: set[str]) -> set[str]:
    used: set[str] = set()
    for source in sources.values():
        used |= called_attributes(source) & methods
    return used


def test_the_session_has_four_ways_in_and_flow_control() -> None:
    public = {name for name in vars(IngestSession) if not name.startswith("_")}
    callables = {name for name in public if callable(getattr(IngestSession, name))}
    assert callables == WAYS_IN | FLOW


def test_protocols_hand_points_to_write_only_through_the_ways_in() -> None:
    methods = point_taking_methods()
    assert methods >= WAYS_IN  # the finder sees the session's own ways in
    used = point_calls(adapter_sources(), methods)
    assert used <= WAYS_IN, sorted(used - WAYS_IN)
    assert len(used - {"put_run"}) <= 4


@pytest.mark.parametrize(
    "planted",
    [
        "writer.add_points(points)",
        "services.ingest.writer.add_part_logged(part, cells)",
        "rollups.store(point)",
        "writer.add_to(series, 1, 2.0)",
    ],
)
def test_a_point_call_past_the_session_is_found(planted: str) -> None:
    sources = adapter_sources()
    sources["server/planted.py"] = (
        f"def f(writer, services, rollups, points, rows, point, series):\n    {planted}\n"
    )
    used = point_calls(sources, point_taking_methods())
    assert not used <= WAYS_IN
