"""Metric and tag names: OpenTSDB's validation rules and its exact IllegalArgument texts.

Theory of operation (behaviour doc §1.1 "Name rules"; OpenTSDB 2.4.1 ``src/core/Tags.java``
validateString/parse, ``src/core/IncomingDataPoints.java`` checkMetricAndTags):

* A metric, tag key or tag value is valid when non-empty and made of ``a-z A-Z 0-9 - _ . /``,
  letters (Java's ``Character.isLetter`` on UTF-16 chars, so letters outside the BMP are
  refused) and the characters of ``tsd.core.tag.allow_specialchars``.
* ``k=v`` tag words need exactly one ``=`` with both sides non-empty. Repeating a key with
  the same value is tolerated; with another value it is a "duplicate tag".
* A series needs 1 to ``tsd.storage.max_tags`` tags.

OpenTSDB's messages print its tag map with ``HashMap.toString()`` and check the tags in
HashMap iteration order, so which bad tag is named first and the order inside ``{...}``
follow Java's bucket order, not insertion order. ``java_hash_order`` reproduces that order
(String.hashCode, spread, power-of-two tables, resizes; tree bins, which need more than 48
tags with 9 colliding in one bucket, keep list order here). The happy path never pays for
it: names are checked with one regular expression first, and the Java order is only
computed to pick the message once something is wrong.

Pure: errors are raised as ``BadRequestError`` whose message is OpenTSDB's
IllegalArgumentException text without any protocol prefix; telnet adds ``put: illegal
argument: `` and /api/put uses it as is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from tsd.codec.const import MAX_NUM_TAGS
from tsd.errors import BadRequestError

__all__ = [
    "DEFAULT_NAME_RULES",
    "NameRules",
    "check_metric_and_tags",
    "PLAIN_NAME_CHARS",
    "format_java_map",
    "is_plain_name",
    "java_hash_order",
    "java_string_hash",
    "parse_tag",
    "validate_string",
]

#: Names made only of these characters are valid whatever the configuration (fast path).
PLAIN_NAME_CHARS: Final = r"[A-Za-z0-9./_-]"
_PLAIN_NAME: Final = re.compile(f"{PLAIN_NAME_CHARS}+")
#: True when a name is non-empty and made of PLAIN_NAME_CHARS only (valid in any config).
is_plain_name: Final = _PLAIN_NAME.fullmatch


@dataclass(frozen=True, slots=True)
class NameRules:
    """The configurable part of the name rules.

    ``special_chars`` is ``tsd.core.tag.allow_specialchars`` (each character allowed in
    names), ``max_tags`` is ``tsd.storage.max_tags``.
    """

    special_chars: str = ""
    max_tags: int = MAX_NUM_TAGS


DEFAULT_NAME_RULES: Final = NameRules()


def _is_allowed_char(char: str, special_chars: str) -> bool:
    if "a" <= char <= "z" or "A" <= char <= "Z" or "0" <= char <= "9" or char in "-_./":
        return True
    # Java's isLetter sees UTF-16 chars: a letter outside the BMP is two surrogates, and
    # surrogates are not letters.
    if char.isalpha() and char <= "\uffff":
        return True
    return char in special_chars


def validate_string(what: str, name: str | None, special_chars: str = "") -> None:
    """Tags.validateString: raise BadRequestError with OpenTSDB's text when invalid.

    ``what`` is the noun OpenTSDB uses: ``metric name``, ``tag name with value [v]``,
    ``tag value with key [k]``.
    """
    if name is None:
        raise BadRequestError(f"Invalid {what}: null")
    if _PLAIN_NAME.fullmatch(name) is not None:
        return
    if not name:
        raise BadRequestError(f"Invalid {what}: empty string")
    for char in name:
        if not _is_allowed_char(char, special_chars):
            raise BadRequestError(f'Invalid {what} ("{name}"): illegal character: {char}')


def parse_tag(tags: dict[str, str], word: str) -> None:
    """Tags.parse: add one ``k=v`` word to ``tags`` (in place).

    Raises BadRequestError ``invalid tag: <word>`` or ``duplicate tag: <word>, tags={...}``.
    """
    key, sep, value = word.partition("=")
    if not sep or not key or not value or "=" in value:
        raise BadRequestError(f"invalid tag: {word}")
    old = tags.get(key)
    if old == value:
        return
    if old is not None:
        raise BadRequestError(f"duplicate tag: {word}, tags={format_java_map(tags)}")
    tags[key] = value


def check_metric_and_tags(
    metric: str, tags: Mapping[str, str | None], rules: NameRules = DEFAULT_NAME_RULES
) -> None:
    """IncomingDataPoints.checkMetricAndTags: tag count, then metric, then each tag.

    ``tags`` must be in the order the client gave them (it decides Java's bucket order for
    collisions and therefore which error is reported first).
    """
    if not tags:
        raise BadRequestError(f"Need at least one tag (metric={metric}, tags={{}})")
    if len(tags) > rules.max_tags:
        raise BadRequestError(
            f"Too many tags: {len(tags)} maximum allowed: {rules.max_tags}, "
            f"tags: {format_java_map(tags)}"
        )
    special = rules.special_chars
    validate_string("metric name", metric, special)
    plain = _PLAIN_NAME.fullmatch
    if all(v is not None and plain(k) and plain(v) for k, v in tags.items()):
        return
    for key in java_hash_order(tags):
        value = tags[key]
        validate_string(f"tag name with value [{value}]", key, special)
        validate_string(f"tag value with key [{key}]", value, special)


# --- Java HashMap emulation (for message texts only) -----------------------------------------

_INITIAL_CAPACITY: Final = 16
_TREEIFY_THRESHOLD: Final = 8
_MIN_TREEIFY_CAPACITY: Final = 64


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as an unsigned 32-bit int."""
    h = 0
    if text.isascii() or max(text) <= "\uffff":
        for char in text:
            h = (31 * h + ord(char)) & 0xFFFFFFFF
        return h
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def java_hash_order(keys: Iterable[str]) -> list[str]:
    """The iteration order of a ``java.util.HashMap`` filled with ``keys`` in this order."""
    capacity = _INITIAL_CAPACITY
    table: list[list[tuple[int, str]]] = [[] for _ in range(capacity)]
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            continue
        seen.add(key)
        h = java_string_hash(key)
        h ^= h >> 16
        bucket = table[h & (capacity - 1)]
        bucket.append((h, key))
        # HashMap.putVal: a bin reaching 9 nodes asks for a tree, which a table smaller than
        # 64 answers with a resize instead; then the load factor 0.75 check.
        if len(bucket) > _TREEIFY_THRESHOLD and capacity < _MIN_TREEIFY_CAPACITY:
            table, capacity = _resize(table, capacity)
        if len(seen) > capacity * 3 // 4:
            table, capacity = _resize(table, capacity)
    return [key for bucket in table for _, key in bucket]


def _resize(
    table: list[list[tuple[int, str]]], capacity: int
) -> tuple[list[list[tuple[int, str]]], int]:
    """HashMap.resize: double the table, splitting each bin in order into lo and hi."""
    new: list[list[tuple[int, str]]] = [[] for _ in range(capacity * 2)]
    for index, bucket in enumerate(table):
        for h, key in bucket:
            new[index + capacity if h & capacity else index].append((h, key))
    return new, capacity * 2


def format_java_map(mapping: Mapping[str, str | None]) -> str:
    """``HashMap.toString()`` of a String map filled in ``mapping``'s order: ``{k=v, k2=v2}``."""
    if not mapping:
        return "{}"
    parts = []
    for key in java_hash_order(mapping):
        value = mapping[key]
        parts.append(f"{key}={'null' if value is None else value}")
    return "{" + ", ".join(parts) + "}"
