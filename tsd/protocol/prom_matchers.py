"""Prometheus label matchers with Prometheus' meaning, over decoded label sets. Pure.

Not OpenTSDB's filters: a series without a label has that label's value ``""``, so

* ``l="v"`` and ``l=~"re"`` match a missing label only when ``""`` matches (``l=""``
  selects the series without ``l``);
* ``l!="v"`` and ``l!~"re"`` match every series without ``l`` (unless the value/regex
  matches ``""``);
* regular expressions are anchored at both ends (``=~"a|b"`` is ``^(?:a|b)$``).

Regexes run under the ``regex`` module with a time limit per value (Prometheus' RE2 is
linear; a pathological pattern here is cut off with a 400 rather than hold a thread).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import regex

from tsd.errors import BadRequestError
from tsd.protocol.prom_labels import METRIC_LABEL
from tsd.protocol.prom_wire import MATCH_EQ, MATCH_NEQ, MATCH_NRE, MATCH_RE

__all__ = ["Matcher", "compile_matcher", "matches_all", "metric_matchers"]

#: The longest one value may take to match a regex matcher.
REGEX_TIMEOUT_S: Final = 1.0
_TYPES: Final = {MATCH_EQ: "=", MATCH_NEQ: "!=", MATCH_RE: "=~", MATCH_NRE: "!~"}


@dataclass(frozen=True, slots=True)
class Matcher:
    """One matcher: ``name``, its operator (``=``, ``!=``, ``=~``, ``!~``), ``value``."""

    name: str
    op: str
    value: str
    test: Callable[[str], bool]

    def matches(self, value: str) -> bool:
        """True when a series whose label has ``value`` ("" when absent) is selected."""
        return self.test(value)

    @property
    def literal(self) -> str | None:
        """The one value an ``=`` matcher selects (None for the other operators)."""
        return self.value if self.op == "=" else None

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value!r}"


def compile_matcher(kind: int, name: str, value: str) -> Matcher:
    """A LabelMatcher -> a :class:`Matcher`; BadRequestError for an unknown type or a
    regex that does not compile."""
    op = _TYPES.get(kind)
    if op is None:
        raise BadRequestError("Invalid label matcher", f"unknown matcher type {kind}")
    if op == "=":
        return Matcher(name, op, value, value.__eq__)
    if op == "!=":
        return Matcher(name, op, value, value.__ne__)
    try:
        pattern = regex.compile(f"(?:{value})", flags=regex.VERSION0)
    except regex.error as exc:
        raise BadRequestError("Invalid regular expression", f"{value!r}: {exc}") from None
    full = _full_match(pattern, value)
    if op == "=~":
        return Matcher(name, op, value, full)
    return Matcher(name, op, value, lambda text: not full(text))


def _full_match(pattern: regex.Pattern[str], source: str) -> Callable[[str], bool]:
    def test(text: str) -> bool:
        try:
            return pattern.fullmatch(text, timeout=REGEX_TIMEOUT_S, concurrent=True) is not None
        except TimeoutError:
            raise BadRequestError(
                "Regular expression too slow",
                f"{source!r} took longer than {REGEX_TIMEOUT_S:g}s on one value",
            ) from None

    return test


def matches_all(matchers: Iterable[Matcher], labels: Mapping[str, str]) -> bool:
    """True when the series with ``labels`` is selected by every matcher."""
    return all(m.matches(labels.get(m.name, "")) for m in matchers)


def metric_matchers(matchers: Iterable[Matcher]) -> list[Matcher]:
    """The matchers on ``__name__``."""
    return [m for m in matchers if m.name == METRIC_LABEL]
