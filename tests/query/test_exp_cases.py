"""/api/query/exp answers in a small text format (tests/query/exp_cases/*.txt), through
the real write path, storage, engine and expression evaluator; the sibling of
test_cases.py (same ``option``, ``load``, ``compact``, ``clear`` commands).

Format::

    load 1m from 1356998400
      e.a host=a dc=x   1+1x5
    exp {"time": {...}, "metrics": [...], "expressions": [...]}   # a POST body
      e 1356998400=1.05,10.0 1356998460=2.0,20.0   # output id, rows: ts (s or ms)=v1,...
      e 1356998520=3.0,30.0                        # more rows of the same output
      e meta {host=a,dc=x}[] {}[host]              # each series' commonTags[aggregatedTags]
      e empty                                      # an output without rows
      error 500 missing time                       # or the error (the message's start)
      tsd-only <why>                               # left out of the OpenTSDB comparison

Every output of the answer must be listed, in order. Values are doubles on the wire
(``1`` and ``1.0`` alike), ``NaN`` is the string "NaN". Each ``exp`` is one test,
replaying the loads before it on a fresh store (every backend of ``storage``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.query.test_cases import DATA_COMMANDS, Located, Point, data_command, read_blocks
from tests.query.tsdb_harness import query_harness
from tsd.config import StorageConfig
from tsd.errors import TsdError
from tsd.storage.base import Storage

CASES_DIR = Path(__file__).parent / "exp_cases"


@dataclass
class ExpOutput:
    id: str
    rows: list[list[Any]] = field(default_factory=list)
    meta: list[tuple[dict[str, str], list[str]]] | None = None


@dataclass
class ExpCase(Located):
    file: str
    line: int
    steps: list[tuple[str, list[Point]]]
    body: Any
    outputs: list[ExpOutput] = field(default_factory=list)
    error: tuple[int, str] | None = None
    tsd_only: str = ""


def _number(text: str) -> Any:
    return "NaN" if text == "NaN" else float(text)


def _meta(tokens: list[str]) -> list[tuple[dict[str, str], list[str]]]:
    out = []
    for token in tokens:
        tags_text, _, agg_text = token.partition("}[")
        tags = dict(t.split("=", 1) for t in tags_text.lstrip("{").split(",") if t)
        out.append((tags, [a for a in agg_text.rstrip("]").split(",") if a]))
    return out


def _expectation(case: ExpCase, line: str) -> None:
    if line.startswith("error "):
        status, _, message = line[len("error ") :].partition(" ")
        case.error = (int(status), message)
        return
    if line.startswith("tsd-only"):
        case.tsd_only = line[len("tsd-only") :].strip() or "tsd-only"
        return
    oid, *tokens = line.split()
    if not case.outputs or case.outputs[-1].id != oid:
        case.outputs.append(ExpOutput(oid))
    out = case.outputs[-1]
    if tokens and tokens[0] == "meta":
        out.meta = _meta(tokens[1:])
    elif tokens and tokens[0] == "empty":
        pass
    else:
        for token in tokens:
            ts, _, values = token.partition("=")
            stamp = int(ts) * 1000 if len(ts) <= 10 else int(ts)
            out.rows.append([stamp, *(_number(v) for v in values.split(","))])


def parse_exp_cases(path: Path) -> list[ExpCase]:
    blocks = read_blocks(path)
    cases: list[ExpCase] = []
    steps: list[tuple[str, list[Point]]] = []
    for number, line, body in blocks:
        command = line.split()[0]
        if command in DATA_COMMANDS:
            steps = data_command(line, body, steps, {}, {})
        elif command == "exp":
            case = ExpCase(path.name, number, list(steps), line[len("exp") :].strip())
            for item in body:
                _expectation(case, item)
            cases.append(case)
        else:
            raise AssertionError(f"{path.name}:{number}: unknown command {command!r}")
    return cases


ALL_EXP_CASES = [c for p in sorted(CASES_DIR.glob("*.txt")) for c in parse_exp_cases(p)]


def answer_outputs(answer: Any) -> list[ExpOutput]:
    """An answer's outputs in the case format (for comparing)."""
    outs = []
    for o in answer["outputs"]:
        meta = None
        if "meta" in o:
            meta = [(m["commonTags"], m["aggregatedTags"]) for m in o["meta"][1:]]
        rows = [[r[0], *(v if v == "NaN" else float(v) for v in r[1:])] for r in o["dps"]]
        outs.append(ExpOutput(o["id"], rows, meta))
    return outs


def _comparable(outputs: list[ExpOutput], with_meta: list[bool]) -> list[Any]:
    """Series order and aggregated tag order follow tag UIDs, which depend on the order
    names were first written (the OpenTSDB comparison checks them on shared UIDs): here
    the columns are put in the order of their meta, aggregated tags sorted by name."""
    out = []
    for o, want in zip(outputs, with_meta, strict=False):
        meta = [(t, sorted(a)) for t, a in o.meta] if o.meta is not None else None
        rows = o.rows
        if meta is not None:
            keys = [repr(sorted(t.items())) + repr(a) for t, a in meta]
            order = sorted(range(len(meta)), key=keys.__getitem__)
            meta = [meta[i] for i in order]
            rows = [[r[0], *(r[1 + i] for i in order)] for r in rows]
        out.append((o.id, rows, meta if want else None))
    return out


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in ALL_EXP_CASES])
async def test_exp_case(case: ExpCase, storage: Storage, storage_config: StorageConfig) -> None:
    async with query_harness(storage, storage_config) as harness:
        await harness.replay(case.steps)
        if case.error is not None:
            with pytest.raises(TsdError) as caught:
                await harness.exp(case.body)
            assert caught.value.status == case.error[0], caught.value.message
            assert caught.value.message.startswith(case.error[1]), caught.value.message
            return
        answer = await harness.exp(case.body)
    got = answer_outputs(answer)
    want_meta = [o.meta is not None for o in case.outputs]
    assert len(got) == len(case.outputs), orjson.dumps(answer).decode()
    assert _comparable(got, want_meta) == _comparable(case.outputs, want_meta), case.body
