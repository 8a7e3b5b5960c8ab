"""Remote write's hot loop: the samples of series seen before, one sample per series.

Prometheus sends each sample as its own series with all its labels; a request's series
are read as their bytes, each ending with its sample (:func:`series_fit`: then the bytes
before are the series' key, :func:`request_key`), and two columns of samples, values and
timestamps (:func:`~tsd.protocol.prom_wire.decode_write_columns`, its columns aligned by
:func:`align_samples` over arrays), and the series the ingest service has resolved before
are found by key (in its compact table, with no bytes object made per key). Their storable
samples (a finite value, a millisecond timestamp OpenTSDB reads as one) are taken in one
pass, their series listed (their values and timestamps stay in the columns, which go on
to the request's log record: :func:`~tsd.wal.record.encode_samples_payload`); every other
sample is left to the caller by index (a new series, a value or timestamp that is not
stored).

:func:`python_take_known_series`, :func:`python_series_fit` and
:func:`python_align_columns` are the specifications and the fallbacks; the compiled helpers
(``take_known_series``, ``series_fit`` and ``align_columns`` in ``tsd/protocol/_parse.c``)
do the same, without a Python step per sample (tests/protocol/test_prom_samples.py checks
they agree).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

import tsd.native as native

_c_take_known_series: Any = native.attribute("tsd.protocol._parse", "take_known_series")
_c_series_fit: Any = native.attribute("tsd.protocol._parse", "series_fit")
_c_align_columns: Any = native.attribute("tsd.protocol._parse", "align_columns")

#: The bytes a sample's field adds to its payload when the protobuf runtime writes it: its
#: tag (field 2) and its length, one byte each for a payload under 128 bytes (a Sample's
#: value and timestamp take at most 20).
SAMPLE_FIELD_HEADER: Final = 2

#: The mark remote write's wire reading puts before each sample (tsd.protocol.prom_wire):
#: a value that is a quiet NaN of a payload of tsd's own (its bits, as an unsigned int),
#: and the smallest int64 as timestamp. Neither is ever stored.
MARK_VALUE_BITS: Final = 0x7FF8_7473_6400_0001
MARK_TIMESTAMP: Final = -(2**63)
_MARK_VALUE_BITS: Final = struct.pack("<Q", MARK_VALUE_BITS)
MARK_VALUE: Final[float] = struct.unpack("<d", _MARK_VALUE_BITS)[0]


def align_samples(
    values: Sequence[float], timestamps: Sequence[int], count: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """The values and timestamps of ``count`` samples read as columns behind marks (see
    :mod:`tsd.protocol.prom_wire`): each column holds, per sample, its mark then the
    sample's own fields of that column, none or more. A sample's value is the last one
    behind its mark (protobuf's rule for a field met twice), 0.0 when there is none (what
    proto3 leaves out); its timestamp likewise, 0 when there is none. None when either
    column does not start with a mark or holds other than ``count`` marks. The answer is
    two columns, float64 and int64, as :func:`take_known_samples` takes them.

    The columns are read as arrays: numpy takes a protobuf runtime's repeated field in one
    call (about 12 ns a sample for both columns), where reading its items one by one, even
    from C, cost 130 ns a sample (an object per item); and they stay arrays up to the
    request's log record, with no Python number per sample. They are aligned in place
    (:func:`align_columns`): numpy's own steps cost about as much on a small request as on
    a large one (a dozen calls, 60-100 us a request on a slow machine), the compiled pass
    a few microseconds."""
    value_column = np.array(values, dtype=np.float64)
    timestamp_column = np.array(timestamps, dtype=np.int64)
    if not align_columns(value_column, timestamp_column, count):
        return None
    return value_column[:count], timestamp_column[:count]


def python_align_columns(
    value_column: np.ndarray, timestamp_column: np.ndarray, count: int
) -> bool:
    """:func:`align_samples`' columns aligned in place: when each column holds ``count``
    marks and starts with one, sample ``i``'s value and timestamp (as :func:`align_samples`
    reads them) are written to the columns' item ``i``, and True is returned; False
    otherwise (the columns' items are then left in any order)."""
    aligned_values = _align(
        value_column, value_column.view(np.uint64) == MARK_VALUE_BITS, count, 0.0
    )
    if aligned_values is None:
        return False
    aligned_timestamps = _align(timestamp_column, timestamp_column == MARK_TIMESTAMP, count, 0)
    if aligned_timestamps is None:
        return False
    value_column[:count] = aligned_values
    timestamp_column[:count] = aligned_timestamps
    return True


#: :func:`python_align_columns`, by the compiled helper when it is built (writable float64
#: and int64 columns: a TypeError otherwise)
align_columns: Final[Callable[[np.ndarray, np.ndarray, int], bool]] = (
    python_align_columns if _c_align_columns is None else _c_align_columns
)


def _align(
    column: np.ndarray, is_mark: np.ndarray, count: int, missing: float
) -> np.ndarray | None:
    """Per mark of ``column``, the last item before the next mark (``missing`` when the
    next item is a mark or there is none), as a new array of ``column``'s type; None
    unless ``count`` marks lead the column."""
    if len(column) == 2 * count and is_mark[::2].all() and not is_mark[1::2].any():
        return column[1::2].copy()  # one field each: what Prometheus sends
    marks = np.flatnonzero(is_mark)
    if len(marks) != count or (count and marks[0] != 0):
        return None
    if not count:
        return column[:0].copy() if not len(column) else None
    last = np.empty(count, np.int64)  # each sample's last item: before the next mark
    last[:-1] = marks[1:] - 1
    last[-1] = len(column) - 1
    return np.where(last == marks, missing, column[last]).astype(column.dtype)


def python_series_fit(series: Sequence[bytes], payloads: Sequence[bytes], fields: bytes) -> bool:
    """Whether each series ends with the field of its sample, so that its bytes before
    that field are its key (:func:`request_key`).

    ``series`` are a request's series, each as its bytes; ``payloads`` its samples' bytes
    in order, and ``fields`` the same samples as the protobuf runtime writes them as fields
    of a message, one after the other (:mod:`tsd.protocol.prom_wire`). When each payload is
    under 128 bytes, its field is :data:`SAMPLE_FIELD_HEADER` bytes longer (the sum over
    the request checks it: no field is shorter). Series ``i`` fits when its last
    ``len(payloads[i]) + SAMPLE_FIELD_HEADER`` bytes are the ``i``-th field of ``fields``.
    False when the counts or the sum differ or a series does not end with its field: the
    request is read the slow way.

    A key is a series' own bytes, not decoded: which makes it a series without samples
    only when it ends where a field of the series ends; the caller checks that, once, when
    it meets a key for the first time (:func:`~tsd.protocol.prom_wire.decode_key`). Then
    every series is its key and one sample, so the ``i``-th sample is series ``i``'s."""
    if len(series) != len(payloads):
        return False
    if sum(map(len, payloads)) + SAMPLE_FIELD_HEADER * len(payloads) != len(fields):
        return False
    start = 0
    for one, payload in zip(series, payloads, strict=True):
        end = start + len(payload) + SAMPLE_FIELD_HEADER
        field = fields[start:end]
        if len(one) < len(field) or not one.endswith(field):
            return False
        start = end
    return True


#: :func:`python_series_fit`, by the compiled helper when it is built (lists of bytes and
#: a bytes: a TypeError otherwise)
series_fit: Final[Callable[[list[bytes], list[bytes], bytes], bool]] = (
    python_series_fit if _c_series_fit is None else _c_series_fit
)


def request_key(series: Sequence[bytes], payloads: Sequence[bytes], index: int) -> bytes:
    """The key of series ``index`` of a request whose series fit (:func:`series_fit`): its
    bytes without the field of its sample at their end."""
    one = series[index]
    return one[: len(one) - len(payloads[index]) - SAMPLE_FIELD_HEADER]


def python_take_known_series(
    series: list[bytes],
    payloads: list[bytes],
    values: Sequence[float] | np.ndarray,
    timestamps: Sequence[int] | np.ndarray,
    known: Any,
    out: list[Any],
    low: int,
    high: int,
    start: int,
    end: int,
) -> tuple[int, list[int]]:
    """Take sample ``i`` (``start <= i < end``: ``values[i]`` at ``timestamps[i]``, read
    as float64 and int64) of series ``i`` when ``known`` (a dict, or a
    :data:`~tsd.protocol.ref_table.RefTable`: its ``get``) has the series' key
    (:func:`request_key`), its value is finite and its timestamp ``low < timestamp <=
    high``: its series ``known.get(key)`` is appended to ``out`` (the samples taken are
    then the ones not in others, in order). Returns (samples taken, the indices of the
    samples not taken, in order). ValueError when there are not as many payloads, values
    and timestamps as series, a series is shorter than its sample's field, or not
    ``0 <= start <= end <= len(series)``.

    The compiled helper looks a key up in a KeyTable without making its bytes object (a
    request's keys would otherwise be made only to be hashed and dropped)."""
    count = len(series)
    if len(payloads) != count or not 0 <= start <= end <= count:
        raise ValueError(
            "take_known_series: as many payloads as series, 0 <= start <= end <= series"
        )
    if len(values) != count or len(timestamps) != count:
        raise ValueError("take_known_series: as many samples as series")
    value_list = np.asarray(values, dtype=np.float64)[start:end].tolist()
    timestamp_list = np.asarray(timestamps, dtype=np.int64)[start:end].tolist()
    before = len(out)
    others: list[int] = []
    get = known.get
    for index, value, timestamp in zip(range(start, end), value_list, timestamp_list, strict=True):
        if len(series[index]) < len(payloads[index]) + SAMPLE_FIELD_HEADER:
            raise ValueError("take_known_series: a series shorter than its sample")
        found = get(request_key(series, payloads, index))
        if found is not None and value - value == 0.0 and low < timestamp <= high:
            out.append(found)
        else:
            others.append(index)
    return len(out) - before, others


#: :func:`python_take_known_series`, by the compiled helper when it is built (``series``,
#: ``payloads`` and ``out`` lists, ``values`` and ``timestamps`` float64 and int64 columns,
#: ``known`` a dict or a KeyTable: a TypeError otherwise)
take_known_series: Final[Callable[..., tuple[int, list[int]]]] = (
    python_take_known_series if _c_take_known_series is None else _c_take_known_series
)
