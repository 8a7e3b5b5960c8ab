"""The metric and timestamp words every telnet write command checks alike
(PutDataPointRpc.importDataPoint and its rollup override). Pure."""

from __future__ import annotations

from tsd.codec.value import parse_long
from tsd.errors import NumberFormatError, PutLineError

__all__ = ["metric_and_timestamp"]


def metric_and_timestamp(metric: str, timestamp_word: str, command: str) -> tuple[str, int]:
    """The metric (not empty) and the timestamp (a dot is dropped: ``1234567890.123`` is
    ms; positive), or PutLineError with ``<command>: ...`` OpenTSDB's reply."""
    if not metric:
        raise PutLineError(PutLineError.ILLEGAL_ARGUMENT, "empty metric name", command)
    try:
        timestamp = parse_long(timestamp_word.replace(".", ""))
    except NumberFormatError as exc:
        raise PutLineError(PutLineError.INVALID_VALUE, exc.message, command) from None
    if timestamp <= 0:
        raise PutLineError(
            PutLineError.ILLEGAL_ARGUMENT, f"invalid timestamp: {timestamp}", command
        )
    return metric, timestamp
