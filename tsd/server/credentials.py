"""Credentials and rights: who may read, write or administer this TSD.

OpenTSDB 2.4 has the hook and no implementation: ``tsd.core.authentication.enable`` loads
the class named by ``tsd.core.authentication.plugin``, which sees each connection's first
telnet line or HTTP request (``AuthenticationChannelHandler``) and grants roles
(``Roles``: READER = query, WRITER = put, ADMINISTRATOR = everything). tsd keeps those two
keys and ships the implementation: a credentials file, ``tsd.core.authentication.users_file``,
one credential a line::

    # name      rights       SHA-256 of the secret (sha256sum of it, 64 hex digits)
    grafana     read         sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    tcollector  write        sha256:...
    ops         admin        sha256:...

``rights`` is a comma-separated subset of ``read`` (queries, suggest, search, stats,
version, the page), ``write`` (put, UID assignment, annotation and meta writes) and
``admin`` (everything, and diediedie, dropcaches, UID rename, query deletes, /api/config).
A secret is presented as HTTP basic auth (``name`` and secret), as a bearer token (the
secret alone), or on telnet's first line (``auth basic <name> <secret>`` or
``auth token <secret>``, the 2.3-era exchange; the reply is OpenTSDB's ``AUTH_SUCCESS`` or
``AUTH_FAIL``). The file holds only SHA-256 digests: secrets must be random (``openssl rand
-hex 16``), which makes a fast digest as safe as a slow password hash and keeps every
request's check to one hash and one dictionary lookup.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path

from tsd.errors import ConfigError

USERS_FILE_KEY = "tsd.core.authentication.users_file"


class Right(enum.Flag):
    READ = enum.auto()
    WRITE = enum.auto()
    ADMIN = enum.auto()


#: what each name in the file grants (admin can do everything)
RIGHT_NAMES = {
    "read": Right.READ,
    "write": Right.WRITE,
    "admin": Right.READ | Right.WRITE | Right.ADMIN,
}


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: its name in the file and its rights."""

    name: str
    rights: Right

    def may(self, right: Right) -> bool:
        return right in self.rights


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


class Credentials:
    """The parsed credentials file: look-ups by name (basic auth) and by digest (tokens)."""

    def __init__(self, entries: list[tuple[str, Right, bytes]]) -> None:
        self._by_name = {name: (rights, hashed) for name, rights, hashed in entries}
        self._by_digest = {hashed: Principal(name, rights) for name, rights, hashed in entries}

    @classmethod
    def parse(cls, text: str, source: str = USERS_FILE_KEY) -> Credentials:
        """Parse the file's text; a malformed line is a ConfigError naming it."""
        entries: list[tuple[str, Right, bytes]] = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            try:
                entries.append(_parse_line(line))
            except ValueError as exc:
                raise ConfigError(source, f"line {number}: {exc}") from None
        names = [name for name, _, _ in entries]
        if len(set(names)) != len(names):
            raise ConfigError(source, "a name appears twice")
        if len({hashed for _, _, hashed in entries}) != len(entries):
            raise ConfigError(source, "two credentials share a secret")
        return cls(entries)

    @classmethod
    def load(cls, path: str) -> Credentials:
        if not path:
            raise ConfigError(USERS_FILE_KEY, "authentication is enabled but no file is set")
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(USERS_FILE_KEY, f"cannot read {path}: {exc.strerror}") from None
        return cls.parse(text, f"{USERS_FILE_KEY} ({path})")

    def basic(self, name: str, secret: str) -> Principal | None:
        found = self._by_name.get(name)
        if found is None:
            digest(secret)  # the same work whether or not the name exists
            return None
        rights, hashed = found
        return Principal(name, rights) if hmac.compare_digest(digest(secret), hashed) else None

    def token(self, secret: str) -> Principal | None:
        return self._by_digest.get(digest(secret))

    def authorization(self, header: str) -> Principal | None:
        """An HTTP ``Authorization`` header: ``Basic <base64 name:secret>`` or
        ``Bearer <secret>``; None when absent, malformed or wrong."""
        scheme, _, value = header.strip().partition(" ")
        scheme = scheme.lower()
        value = value.strip()
        if scheme == "bearer" and value:
            return self.token(value)
        if scheme != "basic":
            return None
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        name, sep, secret = decoded.partition(":")
        return self.basic(name, secret) if sep else None

    def telnet(self, line: bytes) -> Principal | None:
        """A telnet ``auth basic <name> <secret>`` or ``auth token <secret>`` line."""
        words = line.decode("utf-8", "replace").strip().split()
        if len(words) == 4 and words[:2] == ["auth", "basic"]:
            return self.basic(words[2], words[3])
        if len(words) == 3 and words[:2] == ["auth", "token"]:
            return self.token(words[2])
        return None


def _parse_line(line: str) -> tuple[str, Right, bytes]:
    words = line.split()
    if len(words) != 3:
        raise ValueError("expected: <name> <rights> sha256:<hex digest of the secret>")
    name, rights_text, secret = words
    rights = Right(0)
    for word in rights_text.lower().split(","):
        if word not in RIGHT_NAMES:
            raise ValueError(f"unknown right {word!r} (read, write, admin)")
        rights |= RIGHT_NAMES[word]
    kind, _, hex_digest = secret.partition(":")
    try:
        hashed = bytes.fromhex(hex_digest)
    except ValueError:
        hashed = b""
    if kind.lower() != "sha256" or len(hashed) != 32:
        raise ValueError("the secret must be sha256:<64 hex digits>")
    return name, rights, hashed
