"""The whole exception tree of tsd. Pure: imports nothing from tsd but the Java text rules
(:mod:`tsd.java_text`, at the same bottom tier).

Each error carries what its adapter needs to answer a client: the HTTP status
and, where OpenTSDB's exact wording matters, the message. Adapters never parse
message strings.
"""

from __future__ import annotations

from tsd.java_text import format_java_bytes


class TsdError(Exception):
    """Base of every error tsd raises on purpose."""

    status: int = 500

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class BadRequestError(TsdError):
    """OpenTSDB's BadRequestException: a status, one-sentence message and details."""

    def __init__(self, message: str, details: str = "", status: int = 400) -> None:
        super().__init__(message)
        self.details = details
        self.status = status


class PutLineError(BadRequestError):
    """A telnet ``put`` line OpenTSDB refuses; the message is its reply line,
    ``put: <kind>: <reason>``.

    ``kind`` names the Java exception behind the reply, which is also what the telnet
    adapter counts and what ``tsdb import`` reports, so neither reads the message:
    :data:`ILLEGAL_ARGUMENT` (IllegalArgumentException) or :data:`INVALID_VALUE`
    (NumberFormatException, a bad timestamp included, as in OpenTSDB).
    """

    ILLEGAL_ARGUMENT = "illegal argument"
    INVALID_VALUE = "invalid value"

    def __init__(self, kind: str, reason: str, command: str = "put") -> None:
        super().__init__(f"{command}: {kind}: {reason}")
        self.kind = kind
        self.reason = reason

    @property
    def without_command(self) -> str:
        """The reply without its ``put: `` (what ``tsdb import`` prints)."""
        return f"{self.kind}: {self.reason}"


class NoSuchUniqueName(TsdError):
    """A name has no UID (OpenTSDB's NoSuchUniqueName)."""

    status = 400

    def __init__(self, kind: str, name: str) -> None:
        # OpenTSDB: "No such name for '" + kind + "': '" + name + "'"
        super().__init__(f"No such name for '{kind}': '{name}'")
        self.kind = kind
        self.name = name


class NoSuchUniqueId(TsdError):
    """A UID has no name (OpenTSDB's NoSuchUniqueId)."""

    status = 400

    def __init__(self, kind: str, uid: bytes) -> None:
        # OpenTSDB prints the id with Arrays.toString(byte[]): signed bytes, [0, 0, -28].
        super().__init__(f"No such unique ID for '{kind}': {format_java_bytes(uid)}")
        self.kind = kind
        self.uid = uid


class UidAssignmentError(TsdError):
    """A UID could not be assigned (exhausted space, lost races too often)."""

    status = 500


class UidAlreadyExists(BadRequestError):
    """An explicit assignment of a name that has a UID already (``/api/uid/assign``)."""

    def __init__(self, kind: str, name: str, uid: bytes) -> None:
        # OpenTSDB (TSDB.assignUid): "Name already exists with UID: " + upper-case hex.
        super().__init__(f"Name already exists with UID: {uid.hex().upper()}")
        self.kind = kind
        self.name = name
        self.uid = uid


class NotModified(TsdError):
    """An update that changes nothing: OpenTSDB's IllegalStateException ("No changes
    detected"), which its meta and annotation endpoints answer with a bare 304."""

    status = 304


class CodecError(TsdError, ValueError):
    """Malformed stored bytes, or a value that cannot be encoded."""

    status = 500


class IllegalDataError(CodecError):
    """OpenTSDB's IllegalDataException (e.g. a duplicate timestamp with another value)."""


class NumberFormatError(CodecError):
    """OpenTSDB's NumberFormatException: value text that is not a number.

    Telnet answers ``put: invalid value: <message>``; /api/put details say
    "Unable to parse value to a number".
    """

    status = 400


class IllegalValueError(CodecError):
    """A parsed value OpenTSDB refuses (IllegalArgumentException "value is NaN or Infinite").

    Telnet answers ``put: illegal argument: <message>``; /api/put details carry the message.
    """

    status = 400


class NameTooLong(BadRequestError):
    """A metric, tag name or tag value longer than the store's row keys allow (its UID
    row is keyed by the name): refused up front, alone, as OpenTSDB refuses one bad point.

    Telnet answers ``put: illegal argument: <message>``; /api/put details carry the message.
    """


class PastLimit(BadRequestError):
    """A request past one of tsd's own size or depth limits (OpenTSDB has none there and
    fails worse): a 400 with the limit's message, which no handler rewraps."""


class StorageError(TsdError):
    """A storage backend failed."""

    status = 500


class StorageUnavailable(StorageError):
    """The backend cannot be reached or has been closed."""

    status = 503


class StorageTimeout(StorageError):
    """A storage call did not finish in time."""

    status = 503


class StorageRefused(StorageError):
    """The store takes no writes until space or write access returns (nothing was written).
    Writes keep being tried, so the TSD recovers by itself when it does."""


class StorageFull(StorageRefused):
    """No space left: disk or quota full (ENOSPC, EDQUOT), or the LMDB map size reached.
    HTTP 507 Insufficient Storage (RFC 4918)."""

    status = 507


class StorageReadOnly(StorageRefused):
    """The store's filesystem went read-only (EROFS) or lost write permission."""

    status = 503


class SpoolFull(StorageRefused):
    """HBase cannot take writes and the write-ahead log already holds
    ``tsd.storage.wal.max_bytes`` of points waiting for it: new points are refused until
    the backlog drains (docs/write-path.md). HTTP 503."""

    status = 503


class TableNotFound(StorageError):
    """The named table does not exist."""

    def __init__(self, table: str) -> None:
        super().__init__(f"Table not found: {table!r}")
        self.table = table


class UsageError(TsdError):
    """A command line that does not say what to do (the tools' exit status 2)."""


class ListenError(TsdError):
    """The daemon cannot listen on its address: in use, not on this host, not permitted."""


class ConfigError(TsdError):
    """A configuration key has a bad value."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
