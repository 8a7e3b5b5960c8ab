"""Expression bombs (issue 25, held-out abuse): /api/query/exp and /api/query/gexp refuse
expressions past their length and depth limits with a 400 and a clear message, before
reading them deeply, and other clients are answered meanwhile."""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from tests.server.support import longest_stall
from tsd.daemon import Daemon
from tsd.protocol.gexp import MAX_GEXP_NESTING, parse_gexp
from tsd.query.expression.jexl import (
    MAX_EXPRESSION_DEPTH,
    MAX_EXPRESSION_NESTING,
    parse_script,
)

NOW = 1700000000


def _exp_body(expr: str) -> bytes:
    return orjson.dumps(
        {
            "time": {"start": str(NOW), "end": str(NOW + 120), "aggregator": "sum"},
            "metrics": [{"id": "a", "metric": "x.m"}],
            "expressions": [{"id": "e", "expr": expr}],
            "outputs": [{"id": "e"}],
        }
    )


async def _exp(http: aiohttp.ClientSession, tsd: Daemon, expr: str) -> tuple[int, str]:
    url = f"http://127.0.0.1:{tsd.port}/api/query/exp"
    async with http.post(url, data=_exp_body(expr)) as resp:
        return resp.status, orjson.loads(await resp.read())["error"]["message"]


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("(" * 50_000 + "a" + ")" * 50_000, "The expression is too long: 100001 characters"),
        ("+".join(["a"] * 300_000), "The expression is too long: 599999 characters"),
        ("(" * 1000 + "a" + ")" * 1000, "The expression nests too deeply: more than 32"),
        ("-" * 5000 + "a", "The expression nests too deeply"),
        ("+".join(["a"] * 1000), "The expression is too deep: more than 200 operations"),
    ],
    ids=["50k_parentheses", "300k_terms", "1k_parentheses", "5k_unary", "1k_terms"],
)
async def test_exp_bombs_get_a_400_with_their_limit(tsd: Daemon, expr: str, message: str) -> None:
    async with aiohttp.ClientSession() as http:
        status, text = await _exp(http, tsd, expr)
    assert status == 400
    assert text.startswith(message)


@pytest.mark.parametrize(
    ("exp", "message"),
    [
        (
            "f(" * 2000 + "sum:x.m" + ")" * 2000,
            "The expression nests calls too deeply: more than 32 levels",
        ),
        (
            "scale(" * 2000 + "sum:x.m" + ",1)" * 2000,
            "The expression is too long: 18007 characters, at most 10000",
        ),
    ],
    ids=["2000_nested_short", "2000_nested_long"],
)
async def test_gexp_with_2000_nested_calls_gets_a_400(tsd: Daemon, exp: str, message: str) -> None:
    url = f"http://127.0.0.1:{tsd.port}/api/query/gexp?start={NOW}&exp={exp}"
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        status = resp.status
        error = orjson.loads(await resp.read())["error"]
    assert status == 400
    assert error["message"] == message


async def test_a_300k_term_expression_does_not_stall_telnet(tsd: Daemon) -> None:
    expr = "+".join(["a"] * 300_000)
    async with aiohttp.ClientSession() as http:
        answers, longest = await longest_stall(tsd.port, [_exp(http, tsd, expr) for _ in range(4)])
    assert all(status == 400 for status, _ in answers)
    # Before the limits each of these stalled the loop 3-10 s; now the body is refused by
    # its length. Generous bound: a loaded machine.
    assert longest < 1.0


def test_expressions_at_the_limits_still_parse() -> None:
    nested = "(" * (MAX_EXPRESSION_NESTING - 1) + "a" + ")" * (MAX_EXPRESSION_NESTING - 1)
    assert parse_script(nested).variables == ["a"]
    chain = "+".join(f"v{i}" for i in range(MAX_EXPRESSION_DEPTH))  # depth: 199 operators + 1
    assert len(parse_script(chain).variables) == MAX_EXPRESSION_DEPTH
    calls = "scale(" * MAX_GEXP_NESTING + "sum:x.m" + ",1)" * MAX_GEXP_NESTING
    trees, metrics = parse_gexp([calls])
    assert metrics == ["sum:x.m"]
