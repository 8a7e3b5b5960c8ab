"""``exp=`` expressions of /api/query/gexp (OpenTSDB 2.4.1 src/parser.jj, SyntaxChecker).

Pure. The grammar: ``name(param, param...)`` where a param is a nested call, a metric
query ``agg:[interval-agg:][rate:]metric[{tagk=tagv,...}]``, or a bare word (a function
argument). Words are runs of letters, digits and ``* - _ # / $ @ | . ' ] [``; blanks are
skipped. Metric queries are numbered in the order they are read across all ``exp=``
parameters; OpenTSDB appends them to the query's ``m=`` sub-queries.
"""

from __future__ import annotations

import re

from tsd.errors import BadRequestError, PastLimit
from tsd.query_spec import GexpCall as Call
from tsd.query_spec import GexpMetric as MetricRef

__all__ = ["parse_gexp"]

#: The longest ``exp=`` value accepted (characters), checked before it is read (400)
MAX_GEXP_LENGTH = 10_000
#: The deepest nesting of calls accepted (400 past it; the parser stops there)
MAX_GEXP_NESTING = 32

_WORD = re.compile(r"[*A-Za-z0-9\-_#/$@|.'\]\[]+")


class _Reader:
    def __init__(self, text: str, metrics: list[str]) -> None:
        self.text = text
        self.pos = 0
        self.metrics = metrics
        self.nesting = 0

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\n\r":
            self.pos += 1

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def word(self) -> str:
        self.skip()
        m = _WORD.match(self.text, self.pos)
        if m is None:
            raise self.error()
        self.pos = m.end()
        return m.group()

    def expect(self, ch: str) -> None:
        if self.peek() != ch:
            raise self.error()
        self.pos += 1

    def error(self) -> BadRequestError:
        return BadRequestError(f"Failed to parse {self.text}", status=500)

    def lookahead_word_then(self) -> str:
        """The character after the next word (the grammar's LOOKAHEAD)."""
        save = self.pos
        try:
            self.word()
            return self.peek()
        except BadRequestError:
            return ""
        finally:
            self.pos = save

    def call(self) -> Call:
        self.nesting += 1
        if self.nesting > MAX_GEXP_NESTING:
            raise PastLimit(
                f"The expression nests calls too deeply: more than {MAX_GEXP_NESTING} levels"
            )
        try:
            return self._call()
        finally:
            self.nesting -= 1

    def _call(self) -> Call:
        node = Call(self.word())
        self.expect("(")
        node.params.append(self.param())
        while self.peek() == ",":
            self.pos += 1
            node.params.append(self.param())
        self.expect(")")
        return node

    def param(self) -> Call | MetricRef | str:
        after = self.lookahead_word_then()
        if after == "(":
            return self.call()
        if after == ":":
            query = self.metric()
            self.metrics.append(query)
            return MetricRef(query, len(self.metrics) - 1)
        return self.word()

    def metric(self) -> str:
        parts = [self.word()]
        self.expect(":")
        for _ in range(2):  # optional interval-agg and rate parts
            if self.lookahead_word_then() == ":":
                parts.append(self.word())
                self.expect(":")
        parts.append(self.word())
        text = ":".join(parts)
        if self.peek() == "{":
            self.pos += 1
            pairs = [self.tag_pair()]
            while self.peek() == ",":
                self.pos += 1
                pairs.append(self.tag_pair())
            self.expect("}")
            text += "{" + ",".join(pairs) + "}"
        return text

    def tag_pair(self) -> str:
        key = self.word()
        self.expect("=")
        return f"{key}={self.word()}"


def parse_gexp(expressions: list[str]) -> tuple[list[Call], list[str]]:
    """Parse every ``exp=`` value: the call trees, and the metric queries they read
    (``m=`` syntax, numbered across all expressions). A value past
    :data:`MAX_GEXP_LENGTH` or :data:`MAX_GEXP_NESTING` is refused (400)."""
    metrics: list[str] = []
    trees = []
    for text in expressions:
        if len(text) > MAX_GEXP_LENGTH:
            raise PastLimit(
                f"The expression is too long: {len(text)} characters, at most {MAX_GEXP_LENGTH}"
            )
        reader = _Reader(text, metrics)
        tree = reader.call()
        if reader.peek():
            raise reader.error()
        trees.append(tree)
    return trees, metrics
