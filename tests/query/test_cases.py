"""Query answers in a small text format (tests/query/cases/*.txt), through the real write
path, storage and engine; the idea of Prometheus' promqltest.

Format (one command per line; ``#`` starts a comment; indented lines belong to the command
above them)::

    option salt_width=1 salt_buckets=4         # storage / query options for the file
    load 10s from 1356998400                   # points every 10 s from that time (s or ms)
      sys.cpu host=a dc=x   0+1x5              # 6 values 0, 1, ..., 5
      sys.cpu host=b dc=x   1 _ 3.5            # explicit values, _ skips a step
    load at                                    # explicit times
      sys.cpu host=c   1356998400:1 1356998410:2.5
    compact                                    # compact every row written so far
    clear                                      # forget the points loaded so far
    eval start=1356998400 end=1356998460 m=sum:sys.cpu        # GET parameters ...
    eval json {"start":1356998400,"queries":[...]}            # ... or a POST body
    gexp start=1356998400 exp=scale(sum:sys.cpu,2)           # /api/query/gexp (GET)
      {dc=x} [host] 1356998400=1 1356998410=2.5   # tags, optional aggregateTags, points
        1356998420+10x3=0.5+1                     # more points: 4 at 10 s steps, 0.5, 1.5...
      error 400 No such name for 'metrics': 'x'   # or the error expected
      empty                                       # or no series at all
      tsd-only not_key is not registered in 2.4.1 # left out of the comparison with OpenTSDB

Values: ``1`` must come back as a JSON integer, ``1.0`` as a double, ``NaN`` as the
string "NaN", ``null`` as null; ``~1.2345`` is a double compared to 12 digits. Each
``eval`` is one test, replaying the loads before it on a fresh store (every backend of the
``storage`` fixture).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import orjson
import pytest

from tests.query.tsdb_harness import query_harness
from tsd.config import StorageConfig
from tsd.errors import TsdError
from tsd.protocol.timespec import parse_duration
from tsd.storage.base import Storage

CASES_DIR = Path(__file__).parent / "cases"

Point = tuple[str, dict[str, str], int, int | float]


@dataclass
class Expected:
    tags: dict[str, str]
    aggregate_tags: list[str] | None
    dps: list[tuple[str, Any]] = field(default_factory=list)


class Located:
    """A case that knows where it was written (its test id)."""

    file: str
    line: int

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class Case(Located):
    file: str
    line: int
    text: str
    steps: list[tuple[str, list[Point]]]  # ("load", points) or ("compact", [])
    storage_options: dict[str, Any]
    query_options: dict[str, Any]
    params: dict[str, list[str]] | None = None
    body: Any = None
    expected: list[Expected] = field(default_factory=list)
    error: tuple[int, str] | None = None
    #: why OpenTSDB 2.4.1 answers differently (test_opentsdb_diff skips the case)
    tsd_only: str = ""
    #: "query", or "gexp" for a ``gexp`` command (/api/query/gexp)
    endpoint: str = "query"


def _value(text: str) -> int | float:
    return float(text) if any(c in text for c in ".eEn") else int(text)


def _expected_value(text: str) -> Any:
    if text.startswith("~"):  # a double compared to 12 significant digits
        return pytest.approx(float(text[1:]), rel=1e-12)
    if text == "NaN":
        return "NaN"
    if text == "null":
        return None
    return _value(text)


def _series_values(tokens: list[str]) -> list[int | float | None]:
    """``a+bxn`` (n + 1 values) and plain values; ``_`` skips a step."""
    out: list[int | float | None] = []
    for token in tokens:
        m = re.fullmatch(r"(-?[\d.]+)([+-][\d.]+)x(\d+)", token)
        if m:
            first, step, count = _value(m[1]), _value(m[2]), int(m[3])
            out += [first + step * i for i in range(count + 1)]
        elif token == "_":
            out.append(None)
        else:
            out.append(_value(token))
    return out


def _series_head(tokens: list[str]) -> tuple[str, dict[str, str], list[str]]:
    metric, rest = tokens[0], tokens[1:]
    tags = {}
    while rest and "=" in rest[0]:
        k, _, v = rest.pop(0).partition("=")
        tags[k] = v
    return metric, tags, rest


def _load(header: list[str], lines: list[str]) -> list[Point]:
    points: list[Point] = []
    if header[1] == "at":
        for line in lines:
            metric, tags, rest = _series_head(line.split())
            for pair in rest:
                stamp, _, text = pair.partition(":")
                points.append((metric, tags, int(stamp), _value(text)))
        return points
    step_ms = parse_duration(header[1])
    assert header[2] == "from", header
    start = int(header[3])
    start_ms = start if len(header[3]) > 10 else start * 1000
    for line in lines:
        metric, tags, rest = _series_head(line.split())
        for i, number in enumerate(_series_values(rest)):
            if number is None:
                continue
            ts_ms = start_ms + i * step_ms
            ts = ts_ms // 1000 if ts_ms % 1000 == 0 and len(header[3]) <= 10 else ts_ms
            points.append((metric, tags, ts, number))
    return points


def _expectation(line: str) -> Expected:
    m = re.fullmatch(r"\{([^}]*)\}\s*(?:\[([^\]]*)\])?\s*(.*)", line)
    assert m, f"bad expectation: {line!r}"
    tags = dict(item.split("=", 1) for item in m[1].split(",") if item)
    aggregate = [t for t in m[2].split(",") if t] if m[2] is not None else None
    expected = Expected(tags, aggregate)
    expected.dps += _points(m[3])
    return expected


def _points(text: str) -> list[tuple[str, Any]]:
    out = []
    for token in text.split():
        ts, _, value = token.partition("=")
        m = re.fullmatch(r"(\d+)\+(\d+)x(\d+)", ts)
        if m:
            first, step, count = int(m[1]), int(m[2]), int(m[3])
            vm = re.fullmatch(r"(-?[\d.]+)([+-][\d.]+)", value)
            assert vm, f"a range needs a value range: {token!r}"
            v0, dv = _value(vm[1]), _value(vm[2])
            out += [(str(first + step * i), v0 + dv * i) for i in range(count + 1)]
        else:
            out.append((ts, _expected_value(value)))
    return out


def _options(tokens: list[str], storage: dict[str, Any], query: dict[str, Any]) -> None:
    for token in tokens:
        key, _, text = token.partition("=")
        value: Any = {"true": True, "false": False}.get(text, text)
        if isinstance(value, str) and value.lstrip("-").isdigit():
            value = int(value)
        if key.startswith("query."):
            query[key[len("query.") :]] = value
        else:
            storage[key] = value


def read_blocks(path: Path) -> list[tuple[int, str, list[str]]]:
    """A case file as (line number, command line, its indented lines), comments dropped."""
    blocks: list[tuple[int, str, list[str]]] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        if line[0].isspace():
            blocks[-1][2].append(line.strip())
        else:
            blocks.append((number, line, []))
    return blocks


DATA_COMMANDS = ("option", "load", "compact", "clear")


def data_command(
    line: str,
    body: list[str],
    steps: list[tuple[str, list[Point]]],
    storage_options: dict[str, Any],
    query_options: dict[str, Any],
) -> list[tuple[str, list[Point]]]:
    """The steps after one of :data:`DATA_COMMANDS` (``option`` fills the option dicts)."""
    words = line.split()
    if words[0] == "option":
        _options(words[1:], storage_options, query_options)
    elif words[0] == "load":
        return [*steps, ("load", _load(words, body))]
    elif words[0] == "compact":
        return [*steps, ("compact", [])]
    elif words[0] == "clear":
        return []
    return steps


def parse_cases(path: Path) -> list[Case]:
    blocks = read_blocks(path)
    cases: list[Case] = []
    steps: list[tuple[str, list[Point]]] = []
    storage_options: dict[str, Any] = {}
    query_options: dict[str, Any] = {}
    for number, line, body in blocks:
        command = line.split()[0]
        if command in DATA_COMMANDS:
            steps = data_command(line, body, steps, storage_options, query_options)
        elif command in ("eval", "gexp"):
            case = Case(
                path.name, number, line, list(steps), dict(storage_options), dict(query_options)
            )
            case.endpoint = "gexp" if command == "gexp" else "query"
            rest = line[len(command) :].strip()
            if rest.startswith("json "):
                case.body = orjson.loads(rest[len("json ") :])
            else:
                case.params = {}
                for token in shlex.split(rest):
                    for key, values in parse_qs(token, keep_blank_values=True).items():
                        case.params.setdefault(key, []).extend(values)
            for item in body:
                if item.startswith("error "):
                    status, _, message = item[len("error ") :].partition(" ")
                    case.error = (int(status), message)
                elif item == "empty":
                    pass
                elif item.startswith("tsd-only"):
                    case.tsd_only = item[len("tsd-only") :].strip() or "tsd-only"
                elif item.startswith("{"):
                    case.expected.append(_expectation(item))
                else:
                    case.expected[-1].dps += _points(item)
            cases.append(case)
        else:
            raise AssertionError(f"{path.name}:{number}: unknown command {command!r}")
    return cases


ALL_CASES = [case for path in sorted(CASES_DIR.glob("*.txt")) for case in parse_cases(path)]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in ALL_CASES])
async def test_case(case: Case, storage: Storage, storage_config: StorageConfig) -> None:
    async with query_harness(
        storage,
        storage_config,
        storage_options=case.storage_options,
        query_options=case.query_options,
    ) as harness:
        await harness.replay(case.steps)
        if case.error is not None:
            with pytest.raises(TsdError) as caught:
                await harness.query(case.params, case.body, case.endpoint)
            assert (caught.value.status, caught.value.message) == case.error
            return
        answer = await harness.query(case.params, case.body, case.endpoint)
    got = [
        (
            a["tags"],
            a["aggregateTags"] if e.aggregate_tags is not None else None,
            _typed(a["dps"]),
        )
        for a, e in zip(answer, case.expected, strict=False)
    ]
    want = [(e.tags, e.aggregate_tags, _typed_expected(e.dps)) for e in case.expected]
    assert len(answer) == len(case.expected), f"{case.text}\n got {answer}"
    assert got == want, case.text


def _typed(dps: Any) -> list[tuple[str, str, Any]]:
    """(timestamp, JSON type, value): 1 and 1.0 differ, as they do on the wire."""
    pairs = dps if isinstance(dps, list) else list(dps.items())
    return [(str(ts), type(v).__name__, v) for ts, v in pairs]


def _typed_expected(dps: list[tuple[str, Any]]) -> list[tuple[str, str, Any]]:
    return [(ts, "float" if _is_approx(v) else type(v).__name__, v) for ts, v in dps]


def _is_approx(value: Any) -> bool:
    return type(value).__name__.startswith("Approx")
