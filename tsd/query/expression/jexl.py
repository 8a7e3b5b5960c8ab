"""The part of Apache Commons JEXL 2.1.1 that /api/query/exp expressions use. Pure.

OpenTSDB 2.4.1 (src/query/expression/ExpressionIterator.java) hands every ``expr`` to a
default ``JexlEngine`` (lenient arithmetic, not silent) as a script, binds each variable
to a ``Double`` and accepts a ``Double`` or ``Boolean`` result (true = 1, false = 0);
any other result type is an error naming the Java class. This module reproduces that
engine's behaviour for what a numeric expression can contain, checked against the real
OpenTSDB 2.4.1 (tests/query/exp_cases):

* literals: ``12`` (Integer, or Long past 32 bits), ``12L`` (Long), ``0x1f`` / ``017``,
  ``1.5`` / ``1.5d`` (Double), ``1.5f`` (Float), ``true``, ``false``, ``null``, strings;
* operators, loosest first: ``;`` (the last statement's value), ``=`` (assignment),
  ``?:`` and ``a ?: b``, ``||`` / ``or``, ``&&`` / ``and``, ``|``, ``^``, ``&``,
  ``==`` ``!=`` ``=~`` ``!~`` / ``eq`` ``ne``, ``<`` ``<=`` ``>`` ``>=`` / ``lt`` ``le``
  ``gt`` ``ge``, ``+`` ``-``, ``*`` ``/`` ``%`` / ``div`` ``mod``, unary ``-`` ``!`` /
  ``not`` ``~``, parentheses;
* the built-in functions ``empty(x)`` and ``size(x)``; any other function call answers
  null (so OpenTSDB fails with a NullPointerException), a ``ns:f()`` call fails with
  "no such function namespace".

JEXL's lenient arithmetic: null operands count as 0; a division or modulo by zero gives
0.0; integer operands use exact integer arithmetic narrowed back to Integer or Long; any
Float or Double operand makes the operation a double one.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from tsd.errors import PastLimit

__all__ = ["JexlError", "JexlScript", "JexlValue", "parse_script"]

#: The longest expression accepted (characters), checked before it is read: a longer one
#: is refused with a 400 (OpenTSDB has no limit; its JEXL overflows the stack instead)
MAX_EXPRESSION_LENGTH = 10_000
#: The deepest nesting of parentheses, calls, ternaries, assignments and unary operators
#: accepted (the parser stops as soon as it is passed: 400)
MAX_EXPRESSION_NESTING = 32
#: The deepest expression tree accepted, operator chains included (``a + b + ...`` is as
#: deep as it has terms): 400 past it; evaluation recurses that deep
MAX_EXPRESSION_DEPTH = 200

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

_KEYWORDS = {
    "or", "and", "eq", "ne", "lt", "gt", "le", "ge", "div", "mod", "not", "null", "true",
    "false", "new", "var", "empty", "size", "if", "else", "for", "foreach", "while", "in",
    "return", "function",
}  # fmt: skip

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<hex>0[xX][0-9a-fA-F]+[lL]?)
    | (?P<real>\d+\.\d*(?:[eE][+-]?\d+)?[dDfF]?|\d+[dDfF])
    | (?P<int>\d+[lL]?)
    | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    | (?P<name>[A-Za-z_$][A-Za-z0-9_$]*)
    | (?P<op>&&|\|\||==|!=|<=|>=|=~|!~|\?:|[-+*/%<>=!?:;(),&|^~])
    )""",
    re.VERBOSE,
)


class JexlError(Exception):
    """A script JEXL refuses to parse or run (``column``: 1-based, where parsing stopped)."""

    def __init__(self, message: str, column: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.column = column


@dataclass(frozen=True, slots=True)
class JexlValue:
    """A value as JEXL sees it: ``kind`` is the Java class's simple name
    (Integer, Long, BigInteger, Float, Double, Boolean, String, or Null)."""

    kind: str
    value: Any

    @property
    def java_class(self) -> str:
        return "java.math.BigInteger" if self.kind == "BigInteger" else f"java.lang.{self.kind}"


NULL = JexlValue("Null", None)
TRUE = JexlValue("Boolean", True)
FALSE = JexlValue("Boolean", False)


def _float32(x: float) -> float:
    """A Float's value as JexlArithmetic.toDouble reads it: ``Double.parseDouble(
    String.valueOf(f))``, i.e. the shortest decimal of the float32 (0.1f is 0.1)."""
    return float(str(np.float32(x)))


def _double(x: float) -> JexlValue:
    return JexlValue("Double", float(x))


def _boolean(b: bool) -> JexlValue:
    return TRUE if b else FALSE


def _narrow(lhs: JexlValue, rhs: JexlValue, n: int) -> JexlValue:
    """JexlArithmetic.narrowBigInteger: Integer when both sides allow it, else Long."""
    if "BigInteger" not in (lhs.kind, rhs.kind) and LONG_MIN <= n <= LONG_MAX:
        if "Long" not in (lhs.kind, rhs.kind) and INT_MIN <= n <= INT_MAX:
            return JexlValue("Integer", n)
        return JexlValue("Long", n)
    return JexlValue("BigInteger", n)


def _is_floating(v: JexlValue) -> bool:
    return v.kind in ("Float", "Double") or (v.kind == "String" and _looks_floating(v.value))


def _looks_floating(text: str) -> bool:
    return "." in text or "e" in text or "E" in text


def to_double(v: JexlValue) -> float:
    if v.kind == "Null":
        return 0.0
    if v.kind == "Boolean":
        return 1.0 if v.value else 0.0
    if v.kind == "String":
        if v.value == "":
            return 0.0
        try:
            return float(v.value)
        except ValueError:
            raise JexlError(f"Double coercion: {v.value}") from None
    return float(v.value)


def to_integer(v: JexlValue) -> int:
    if v.kind == "Null":
        return 0
    if v.kind == "Boolean":
        return 1 if v.value else 0
    if v.kind in ("Float", "Double"):
        return _java_long(float(v.value))
    if v.kind == "String":
        try:
            return int(v.value) if v.value else 0
        except ValueError:
            raise JexlError(f"BigInteger coercion: {v.value}") from None
    return int(v.value)


def _java_long(x: float) -> int:
    """Java's ``(long) double``: truncation, NaN -> 0, saturating at the long range."""
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return LONG_MAX if x > 0 else LONG_MIN
    return max(LONG_MIN, min(LONG_MAX, int(x)))


def to_boolean(v: JexlValue) -> bool:
    if v.kind == "Null":
        return False
    if v.kind == "Boolean":
        return bool(v.value)
    if v.kind == "String":
        return v.value not in ("", "false")
    number = float(v.value)
    return not math.isnan(number) and number != 0.0


# -- arithmetic (JexlArithmetic, lenient) ---------------------------------------------------


def _arith(op: str, a: JexlValue, b: JexlValue) -> JexlValue:
    if a.kind == "Null" and b.kind == "Null":
        return JexlValue("Integer", 0)
    if op == "+" and (a.kind == "String" or b.kind == "String"):
        try:
            return _numeric(op, a, b)
        except JexlError:
            return JexlValue("String", _to_text(a) + _to_text(b))
    return _numeric(op, a, b)


def _to_text(v: JexlValue) -> str:
    if v.kind == "Null":
        return ""
    if v.kind == "Boolean":
        return "true" if v.value else "false"
    return str(v.value)


def _numeric(op: str, a: JexlValue, b: JexlValue) -> JexlValue:
    if _is_floating(a) or _is_floating(b):
        x, y = to_double(a), to_double(b)
        if op == "+":
            return _double(x + y)
        if op == "-":
            return _double(x - y)
        if op == "*":
            return _double(x * y)
        if y == 0.0:  # ArithmeticException: lenient engines answer 0.0
            return _double(0.0)
        if op == "/":
            return _double(x / y)
        return _double(math.fmod(x, y))
    i, j = to_integer(a), to_integer(b)
    if op == "+":
        n = i + j
    elif op == "-":
        n = i - j
    elif op == "*":
        n = i * j
    else:
        if j == 0:
            return _double(0.0)
        q = abs(i) // abs(j) * (1 if (i >= 0) == (j >= 0) else -1)
        n = q if op == "/" else i - q * j
    return _narrow(a, b, n)


def _equals(a: JexlValue, b: JexlValue) -> bool:
    if a.kind == "Null" or b.kind == "Null":
        return a.kind == b.kind
    if _is_floating(a) or _is_floating(b):
        return to_double(a) == to_double(b)
    if a.kind == "Boolean" or b.kind == "Boolean":
        return to_boolean(a) == to_boolean(b)
    if a.kind == "String" or b.kind == "String":
        return _to_text(a) == _to_text(b)
    return to_integer(a) == to_integer(b)


def _compare(op: str, a: JexlValue, b: JexlValue) -> bool:
    if a.kind == "Null" or b.kind == "Null":
        return False
    if a.kind == "String" and b.kind == "String":
        x: Any = a.value
        y: Any = b.value
    elif _is_floating(a) or _is_floating(b):
        x, y = to_double(a), to_double(b)
    else:
        x, y = to_integer(a), to_integer(b)
    if op == "<":
        return bool(x < y)
    if op == "<=":
        return bool(x <= y)
    if op == ">":
        return bool(x > y)
    return bool(x >= y)


def _bitwise(op: str, a: JexlValue, b: JexlValue) -> JexlValue:
    x, y = _as_long(to_integer(a)), _as_long(to_integer(b))
    n = x & y if op == "&" else x | y if op == "|" else x ^ y
    return JexlValue("Long", _as_long(n))


def _as_long(n: int) -> int:
    n &= (1 << 64) - 1
    return n - (1 << 64) if n >= 1 << 63 else n


def _negate(v: JexlValue) -> JexlValue:
    if v.kind in ("Integer", "Long", "BigInteger", "Float", "Double"):
        n = -v.value
        if v.kind == "Integer" and n > INT_MAX:
            n = INT_MIN  # Java int overflow
        if v.kind == "Long" and n > LONG_MAX:
            n = LONG_MIN
        return JexlValue(v.kind, n)
    raise JexlError("not a number")


# -- the parse tree ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Node:
    op: str
    args: tuple[Any, ...] = ()


class JexlScript:
    """A parsed script: its variables (as ``JexlEngine.getVariables`` lists them) and
    :meth:`execute` over a context of named values."""

    def __init__(self, text: str, statements: list[_Node], variables: list[str]) -> None:
        self.text = text
        self._statements = statements
        self.variables = variables

    def execute(self, context: dict[str, JexlValue]) -> JexlValue:
        scope = dict(context)
        result = NULL
        for statement in self._statements:
            result = _eval(statement, scope)
        return result

    def __str__(self) -> str:
        return self.text


def _eval(node: _Node, scope: dict[str, JexlValue]) -> JexlValue:
    op, args = node.op, node.args
    if op == "lit":
        value: JexlValue = args[0]
        return value
    if op == "var":
        return scope.get(args[0], NULL)
    if op == "assign":
        scope[args[0]] = _eval(args[1], scope)
        return scope[args[0]]
    if op == "?":
        return _eval(args[1] if to_boolean(_eval(args[0], scope)) else args[2], scope)
    if op == "?:":
        first = _eval(args[0], scope)
        return first if to_boolean(first) else _eval(args[1], scope)
    if op == "||":
        return _boolean(to_boolean(_eval(args[0], scope)) or to_boolean(_eval(args[1], scope)))
    if op == "&&":
        return _boolean(to_boolean(_eval(args[0], scope)) and to_boolean(_eval(args[1], scope)))
    if op == "!":
        return _boolean(not to_boolean(_eval(args[0], scope)))
    if op == "neg":
        return _negate(_eval(args[0], scope))
    if op == "~":
        return JexlValue("Long", _as_long(~to_integer(_eval(args[0], scope))))
    if op == "nscall":
        raise JexlError(f"no such function namespace {args[0]}")
    if op == "call":
        return _call(args[0], [_eval(a, scope) for a in args[1]])
    a, b = _eval(args[0], scope), _eval(args[1], scope)
    if op in ("+", "-", "*", "/", "%"):
        return _arith(op, a, b)
    if op in ("==", "=~"):
        return _boolean(_equals(a, b))
    if op in ("!=", "!~"):
        return _boolean(not _equals(a, b))
    if op in ("<", "<=", ">", ">="):
        return _boolean(_compare(op, a, b))
    return _bitwise(op, a, b)


def _call(name: str, values: list[JexlValue]) -> JexlValue:
    if name == "empty":
        v = values[0] if values else NULL
        return _boolean(v.kind == "Null" or (v.kind == "String" and v.value == ""))
    if name == "size":
        v = values[0] if values else NULL
        if v.kind == "String":
            return JexlValue("Integer", len(v.value))
        raise JexlError(f"size() : unsupported type : class {v.java_class}")
    return NULL  # an unknown method answers null in a lenient engine


# -- the parser (recursive descent over JEXL 2.1's precedence) -------------------------------


@dataclass(slots=True)
class _Token:
    kind: str
    text: str
    column: int


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise JexlError("parsing error", pos + 1)
        kind = m.lastgroup or "op"
        out.append(_Token(kind, m.group(kind), m.start(kind) + 1))
        pos = m.end()
    out.append(_Token("end", "", len(text) + 1))
    return out


_WORD_OPS = {
    "or": "||",
    "and": "&&",
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "div": "/",
    "mod": "%",
    "not": "!",
}


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0
        self.variables: list[str] = []
        self.nesting = 0

    def nest(self) -> None:
        """Count one more level of nesting (undone by :meth:`unnest`); past the limit,
        refuse the expression before recursing any deeper."""
        self.nesting += 1
        if self.nesting > MAX_EXPRESSION_NESTING:
            raise PastLimit(
                f"The expression nests too deeply: more than {MAX_EXPRESSION_NESTING} levels"
                " of parentheses, calls, conditions or unary operators"
            )

    def unnest(self) -> None:
        self.nesting -= 1

    def peek(self) -> str:
        token = self.tokens[self.pos]
        if token.kind == "name" and token.text in _WORD_OPS:
            return _WORD_OPS[token.text]
        return token.text if token.kind == "op" else token.kind

    def take(self) -> _Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def expect(self, text: str) -> None:
        if self.peek() != text:
            raise self.error()
        self.take()

    def error(self) -> JexlError:
        """A parse error at the last token read (where JEXL 2.1 reports it)."""
        return JexlError("parsing error", self.tokens[max(self.pos - 1, 0)].column)

    def script(self) -> list[_Node]:
        statements: list[_Node] = []
        while self.peek() != "end":
            if self.peek() == ";":
                self.take()
                continue
            statements.append(self.assignment())
            if self.peek() not in (";", "end"):
                raise self.error()
        return statements

    def assignment(self) -> _Node:
        start = self.pos
        node = self.ternary()
        if self.peek() == "=":
            if node.op != "var":
                raise JexlError("assignment error", self.tokens[start].column)
            self.take()
            self.nest()
            try:
                value = self.assignment()
            finally:
                self.unnest()
            return _Node("assign", (node.args[0], value))
        return node

    def ternary(self) -> _Node:
        self.nest()
        try:
            return self._ternary()
        finally:
            self.unnest()

    def _ternary(self) -> _Node:
        cond = self.binary(0)
        if self.peek() == "?":
            self.take()
            then = self.ternary()
            self.expect(":")
            return _Node("?", (cond, then, self.ternary()))
        if self.peek() == "?:":
            self.take()
            return _Node("?:", (cond, self.ternary()))
        return cond

    _LEVELS: tuple[tuple[str, ...], ...] = (
        ("||",),
        ("&&",),
        ("|",),
        ("^",),
        ("&",),
        ("==", "!=", "=~", "!~"),
        ("<", "<=", ">", ">="),
        ("+", "-"),
        ("*", "/", "%"),
    )

    def binary(self, level: int) -> _Node:
        if level == len(self._LEVELS):
            return self.unary()
        node = self.binary(level + 1)
        while self.peek() in self._LEVELS[level]:
            op = self.peek()
            self.take()
            node = _Node(op, (node, self.binary(level + 1)))
        return node

    def unary(self) -> _Node:
        op = self.peek()
        if op not in ("-", "!", "~"):
            return self.primary()
        self.take()
        self.nest()
        try:
            operand = self.unary()
        finally:
            self.unnest()
        return _Node("neg" if op == "-" else op, (operand,))

    def primary(self) -> _Node:
        token = self.take()
        if token.kind == "op" and token.text == "(":
            node = self.assignment()
            self.expect(")")
            return node
        if token.kind == "int":
            return _Node("lit", (_integer_literal(token.text),))
        if token.kind == "hex":
            return _Node("lit", (_integer_literal(token.text, 16),))
        if token.kind == "real":
            return _Node("lit", (_real_literal(token.text),))
        if token.kind == "str":
            return _Node("lit", (JexlValue("String", _unquote(token.text)),))
        if token.kind == "name":
            return self.name(token)
        self.pos -= 1  # report the token before the one that cannot start an operand
        raise self.error()

    def name(self, token: _Token) -> _Node:
        word = token.text
        if word == "null":
            return _Node("lit", (NULL,))
        if word in ("true", "false"):
            return _Node("lit", (_boolean(word == "true"),))
        if self.peek() == ":" and self.tokens[self.pos + 1].kind == "name":
            self.take()
            self.take()
            return _Node("nscall", (word, self.call_args()))
        if self.peek() == "(":
            return _Node("call", (word, self.call_args()))
        if word in _KEYWORDS:
            raise JexlError("parsing error", token.column)
        if word not in self.variables:
            self.variables.append(word)
        return _Node("var", (word,))

    def call_args(self) -> tuple[_Node, ...]:
        self.expect("(")
        args: list[_Node] = []
        while self.peek() != ")":
            args.append(self.assignment())
            if self.peek() == ",":
                self.take()
            elif self.peek() != ")":
                raise self.error()
        self.take()
        return tuple(args)


def _integer_literal(text: str, base: int = 10) -> JexlValue:
    is_long = text[-1] in "lL"
    digits = text[:-1] if is_long else text
    if base == 10 and len(digits) > 1 and digits.startswith("0"):
        base = 8
    n = int(digits, base)
    if is_long or n > INT_MAX:
        return JexlValue("Long" if n <= LONG_MAX else "BigInteger", n)
    return JexlValue("Integer", n)


def _real_literal(text: str) -> JexlValue:
    """JEXL 2.1 reads ``1.5`` and ``1.5f`` as a Float, ``1.5d`` as a Double."""
    suffix = text[-1]
    if suffix in "dD":
        return JexlValue("Double", float(text[:-1]))
    if suffix in "fF":
        text = text[:-1]
    return JexlValue("Float", _float32(float(text)))


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text[1:-1])


@functools.lru_cache(maxsize=256)
def parse_script(text: str) -> JexlScript:
    """Parse ``text`` as JexlEngine.createScript does; :class:`JexlError` if it cannot.
    An expression past :data:`MAX_EXPRESSION_LENGTH`, :data:`MAX_EXPRESSION_NESTING` or
    :data:`MAX_EXPRESSION_DEPTH` is refused (PastLimit, 400), the length before
    anything is read, so a huge one costs no time. Cached: a request's expressions are
    parsed when it is validated and again when it runs (the script is never changed)."""
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise PastLimit(
            f"The expression is too long: {len(text)} characters, at most {MAX_EXPRESSION_LENGTH}"
        )
    parser = _Parser(text)
    statements = parser.script()
    if any(_depth(statement) > MAX_EXPRESSION_DEPTH for statement in statements):
        raise PastLimit(
            f"The expression is too deep: more than {MAX_EXPRESSION_DEPTH} operations"
            " inside each other (a chain of operators counts one per operator)"
        )
    return JexlScript(text, statements, parser.variables)


def _depth(root: _Node) -> int:
    """How deep the tree under ``root`` is, walked without recursion."""
    deepest = 0
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if node.op == "call" or node.op == "nscall":
            children: tuple[Any, ...] = node.args[1]
        else:
            children = node.args
        stack.extend((child, depth + 1) for child in children if isinstance(child, _Node))
    return deepest
