"""The bytes of the write-ahead log: segment header, record framing, the cells record.

Theory of operation (docs/format/wal.md has the box diagrams; Prometheus'
``tsdb/docs/format/wal.md`` is the model). Pure: bytes in, bytes or values out.

* A segment starts with an 8-byte header (:data:`SEGMENT_MAGIC`: ``TSDWAL`` and the
  format version), then records back to back.
* A record is ``length (u32 BE) | crc32c (u32 BE) | type (u8) | payload``: ``length``
  counts the payload, the CRC-32C (Castagnoli, google-crc32c) covers type and payload.
  A reader stops at the first record that does not fit in the bytes left, has a bad
  CRC or an unknown type: that is a torn write (the process died mid-append) or damage,
  and :func:`scan_records` says where the good bytes end and why.
* :data:`CELLS`: the cells of one writer batch, row by row:
  ``row length (u16) | cell count (u32) | row key | qualifier lengths (u8 each) | value
  lengths (u8 each) | qualifiers | values``, in the row's qualifier order. The cells are
  OpenTSDB's (row key, qualifier, value) bytes as the writer stores them, UIDs resolved:
  replaying a record is putting its cells again, which is idempotent.
* :data:`CELLS_ZSTD` (format version 2): the same payload as one zstd frame, written when
  that saves a tenth or more (a batch of one point per series: about 31 bytes a point
  plain, 5 in zstd at level 1, some 45 ns a point to compress). The log holds every point
  of the open hours and a segment's worth more, so this is most of its size on disk.
  Readers hand every cells record on as :data:`CELLS`.
"""

from __future__ import annotations

import gc
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Final, NamedTuple, cast

import google_crc32c
import numpy as np
import zstandard

import tsd.native as native
from tsd.codec import SeriesKey
from tsd.codec.qualifier import ENCODER_TABLES, encode_points_into
from tsd.codec.row_runs import RowRun as RowRun  # the record's runs: re-exported
from tsd.codec.row_runs import python_join_repeated_rows
from tsd.compression import compressor, decompressor
from tsd.errors import CodecError

#: ``TSDWAL`` + format version 2 + a reserved zero byte (what new segments start with)
SEGMENT_MAGIC: Final = b"TSDWAL\x02\x00"
#: every header a reader accepts: version 1 (no compressed records) and 2
SEGMENT_MAGICS: Final = (b"TSDWAL\x01\x00", SEGMENT_MAGIC)
HEADER: Final = struct.Struct(">IIB")  # payload length, crc32c(type + payload), type
#: a batch of cells
CELLS: Final = 1
#: a batch of cells, its payload one zstd frame (format version 2)
CELLS_ZSTD: Final = 2
RECORD_TYPES: Final = frozenset({CELLS, CELLS_ZSTD})
#: zstd's fastest level: the log is on the ingest path
_ZSTD_LEVEL: Final = 1
#: the largest payload a record may claim (a writer batch is a few MB); past it, damage
MAX_PAYLOAD_BYTES: Final = 1 << 30
_ROW: Final = struct.Struct(">HI")  # row key length, cell count

# the compiled framing of a writer batch (setup.py builds it where a C compiler is)
_C: Any = native.load("tsd.wal._record")

#: a row key and its cells, (qualifier, value) in qualifier order
Row = tuple[bytes, list[tuple[bytes, bytes]]]
#: a row key, its qualifiers and its values (the same cells, column by column)
Columns = tuple[bytes, list[bytes], list[bytes]]


class SampleBlock(NamedTuple):
    """Samples of known series as columns, sample ``i`` the point ``(series[i],
    timestamps[i], values[i])`` (timestamps int64, values float64, as many of each as
    series): remote write's request, whose runs the head takes are made only when its
    writer batch goes to the head (:func:`sample_runs`, every request of the batch at
    once, a run a row) rather than a run a sample as the request comes."""

    series: list[SeriesKey]
    timestamps: np.ndarray
    values: np.ndarray


class EncodedPart(NamedTuple):
    """Points encoded ahead of the writer (a telnet connection's, in the daemon or in a
    worker process; a remote write request's): a :data:`CELLS` payload (not framed) and
    the same rows as runs, or the samples the runs are made of (:class:`SampleBlock`)."""

    payload: bytes
    runs: list[RowRun] | SampleBlock
    points: int


def seal_part(rows: dict[bytes, dict[bytes, bytes]], points: int) -> EncodedPart:
    """``points`` points encoded into ``rows`` (row key -> qualifier -> value), as one
    :class:`EncodedPart`."""
    payload, runs = encode_payload_and_runs(rows)
    return EncodedPart(payload, runs, points)


def encode_cells(rows: Iterable[tuple[bytes, Mapping[bytes, bytes]]]) -> bytes:
    """A framed :data:`CELLS` record of ``(row key, {qualifier: value})`` rows (a writer
    batch's own maps, in their order: a record need not be sorted)."""
    return encode_cells_and_runs(rows)[0]


def encode_cells_and_runs(
    rows: Iterable[tuple[bytes, Mapping[bytes, bytes]]] | dict[bytes, dict[bytes, bytes]],
) -> tuple[bytes, list[RowRun]]:
    """:func:`encode_cells`, and the same rows as :data:`RowRun` (what the head takes),
    sharing the joins."""
    payload, runs = encode_payload_and_runs(rows)
    return frame_cells(payload), runs


def encode_payload_and_runs(
    rows: Iterable[tuple[bytes, Mapping[bytes, bytes]]] | dict[bytes, dict[bytes, bytes]],
) -> tuple[bytes, list[RowRun]]:
    """:func:`python_encode_payload_and_runs`; a writer batch's dict itself is taken whole
    by the C helper ``tsd/wal/_record.c`` where it is built (no Python step per row)."""
    if isinstance(rows, dict):
        if _C is not None:
            done = _C.encode_cells_and_runs(rows)
            if done is not None:
                return done[0], done[1]
        rows = rows.items()
    return python_encode_payload_and_runs(rows)


def encode_samples_payload(
    series: list[SeriesKey], timestamps: np.ndarray, values: np.ndarray
) -> bytes:
    """:func:`python_encode_samples_payload`, by the C helper ``tsd/wal/_record.c`` where it
    is built (no Python object a sample)."""
    if _C is not None:
        return cast(bytes, _C.encode_samples_payload(series, timestamps, values, *ENCODER_TABLES))
    return python_encode_samples_payload(series, timestamps, values)


def python_encode_samples_payload(
    series: list[SeriesKey], timestamps: np.ndarray, values: np.ndarray
) -> bytes:
    """The :data:`CELLS` payload of :func:`python_encode_samples_part`: a request's log
    record."""
    return python_encode_samples_part(series, timestamps, values)[0]


def sample_runs(blocks: list[SampleBlock]) -> list[RowRun]:
    """:func:`python_sample_runs`, by the C helper ``tsd/wal/_record.c`` where it is built
    (no Python object a sample: each row's cells written into its run's bytes)."""
    if _C is not None:
        return cast(list[RowRun], _C.sample_runs(blocks, *ENCODER_TABLES))
    return python_sample_runs(blocks)


def python_sample_runs(blocks: list[SampleBlock]) -> list[RowRun]:
    """The samples of ``blocks``, in order, as the head takes them: the runs of
    :func:`python_encode_samples_part` (a row a sample) joined a run a row, as the head
    joins a row that comes more than once (its cells in the order of its samples, rows in
    the order they first come), made once per writer batch rather than a run per
    sample."""
    return python_join_repeated_rows(
        [run for block in blocks for run in python_encode_samples_part(*block)[1]]
    )


def python_encode_samples_part(
    series: list[SeriesKey], timestamps: np.ndarray, values: np.ndarray
) -> tuple[bytes, list[RowRun]]:
    """Samples as columns (:class:`SampleBlock`): the :func:`python_encode_points_part` of
    their points, the specification of :func:`encode_samples_payload` and
    :func:`sample_runs`. Remote write's samples of known series come this way, from the
    request's columns to its log record."""
    if len(timestamps) != len(series) or len(values) != len(series):
        raise ValueError("samples: as many samples as series")
    points = zip(
        series,
        np.asarray(timestamps, dtype=np.int64).tolist(),
        np.asarray(values, dtype=np.float64).tolist(),
        strict=True,
    )
    return python_encode_points_part(points)


def python_encode_points_part(
    points: Iterable[tuple[SeriesKey, int, int | float]],
) -> tuple[bytes, list[RowRun]]:
    """``(series, timestamp, value)`` points, each encoded as
    :func:`~tsd.codec.qualifier.encode_points_into` encodes it into a row of one cell of
    its own, in order: their :data:`CELLS` payload and the same rows as runs (a later cell
    of a row comes later in both, and wins where they are read: replay, the head).

    Remote write's request (a sample a series: a cell a row; :func:`encode_samples_payload`)
    becomes a part of a log record this way without a dict of rows, which cost more than
    the rest of taking its samples, and as much again to merge into the writer's batch
    (cProfile of the daemon at 500 samples a request)."""
    rows: list[tuple[bytes, dict[bytes, bytes]]] = []
    for point in points:
        cells: dict[bytes, dict[bytes, bytes]] = {}
        encode_points_into(cells, (point,))
        rows += cells.items()
    return python_encode_payload_and_runs(rows)


def python_encode_payload_and_runs(
    rows: Iterable[tuple[bytes, Mapping[bytes, bytes]]],
) -> tuple[bytes, list[RowRun]]:
    """The :data:`CELLS` payload of ``rows`` (not framed: payloads of several parts of one
    batch, a telnet worker's among them, join into one record's payload), and the same
    rows as :data:`RowRun`.

    Per row the work is C-level joins over the map's keys and values (no Python step
    per cell): this runs on the ingest path, once per writer batch. A row of one cell
    (many series with a point each: the usual batch at high cardinality) takes its
    qualifier and value as they are, without joins."""
    parts: list[bytes] = []
    runs: list[RowRun] = []
    append = parts.append
    extend = parts.extend
    pack_row = _ROW.pack
    join = b"".join
    for row, cells in rows:
        if len(cells) == 1:
            for qualifier, value in cells.items():
                extend((pack_row(len(row), 1), row, bytes((len(qualifier), len(value)))))
                extend((qualifier, value))
                runs.append((row, 1, qualifier, value))
            continue
        qualifiers, values = cells.keys(), cells.values()
        q_joined, v_joined = join(qualifiers), join(values)
        append(pack_row(len(row), len(cells)))
        append(row)
        append(bytes(map(len, qualifiers)))
        append(bytes(map(len, values)))
        append(q_joined)
        append(v_joined)
        runs.append((row, len(cells), q_joined, v_joined))
    return join(parts), runs


def frame_cells(payload: bytes) -> bytes:
    """A cells payload as a record: :data:`CELLS_ZSTD` when compressing saves a tenth or
    more, else :data:`CELLS`."""
    packed = compressor(_ZSTD_LEVEL).compress(payload)
    if len(packed) * 10 <= len(payload) * 9:
        return frame(CELLS_ZSTD, packed)
    return frame(CELLS, payload)


def frame(kind: int, payload: bytes) -> bytes:
    """``payload`` as a record of type ``kind`` (header then payload)."""
    crc = google_crc32c.value(bytes((kind,)) + payload)
    return HEADER.pack(len(payload), crc, kind) + payload


def decode_cells(payload: bytes) -> list[Row]:
    """The rows of a :data:`CELLS` payload. Raises CodecError when it is malformed (a
    record whose CRC matched, so only a bug writes one)."""
    return [
        (row, list(zip(qualifiers, values, strict=True)))
        for row, qualifiers, values in decode_columns(payload)
    ]


def decode_columns(payload: bytes) -> list[Columns]:
    """:func:`decode_cells` as ``(row key, qualifiers, values)``, without a tuple per
    cell (replay's form: it builds one Put per cell straight from these)."""
    rows: list[Columns] = []
    at, end = 0, len(payload)
    try:
        while at < end:
            row_len, count = _ROW.unpack_from(payload, at)
            at += _ROW.size
            row = payload[at : at + row_len]
            at += row_len
            q_lens = payload[at : at + count]
            v_lens = payload[at + count : at + 2 * count]
            if len(q_lens) != count or len(v_lens) != count:
                raise CodecError(f"write-ahead log: cells record cut short at byte {at}")
            qualifiers, at = _split(payload, at + 2 * count, q_lens)
            values, at = _split(payload, at, v_lens)
            if at > end:
                raise CodecError(f"write-ahead log: cells record cut short at byte {at}")
            rows.append((row, qualifiers, values))
    except struct.error as exc:
        raise CodecError(f"write-ahead log: bad cells record: {exc}") from None
    return rows


def decode_row_runs(payload: bytes) -> list[RowRun]:
    """The rows of a :data:`CELLS` payload as :data:`RowRun` (the head's form: a row's
    qualifiers and values are each one run in the record, taken as they are). Raises
    CodecError when it is malformed."""
    rows: list[RowRun] = []
    at, end = 0, len(payload)
    unpack = _ROW.unpack_from
    try:
        while at < end:
            row_len, count = unpack(payload, at)
            at += _ROW.size
            row = payload[at : at + row_len]
            at += row_len + 2 * count
            q_bytes = sum(payload[at - 2 * count : at - count])
            v_bytes = sum(payload[at - count : at])
            qualifiers = payload[at : at + q_bytes]
            at += q_bytes
            values = payload[at : at + v_bytes]
            at += v_bytes
            if at > end:
                raise CodecError(f"write-ahead log: cells record cut short at byte {at}")
            rows.append((row, count, qualifiers, values))
    except struct.error as exc:
        raise CodecError(f"write-ahead log: bad cells record: {exc}") from None
    return rows


def _split(payload: bytes, at: int, lengths: bytes) -> tuple[list[bytes], int]:
    """The slices of ``payload`` from ``at`` of the given lengths, and where they end.
    Equal lengths (the usual case: 2-byte qualifiers) take one stride."""
    if not lengths:
        return [], at
    width = lengths[0]
    if width and lengths.count(width) == len(lengths):
        stop = at + width * len(lengths)
        return [payload[start : start + width] for start in range(at, stop, width)], stop
    ends = list(accumulate(lengths, initial=at))
    return [payload[a:b] for a, b in zip(ends, ends[1:], strict=False)], ends[-1]


@dataclass(frozen=True, slots=True)
class Scan:
    """What :func:`scan_records` found: the good records' ``(type, payload)``, the offset
    where the good bytes end, and why reading stopped early (None: at the end)."""

    records: list[tuple[int, bytes]]
    good_end: int
    problem: str | None


def scan_records(data: bytes) -> Scan:
    """Every intact record of a segment's bytes, in order, up to the first damaged one."""
    if not data.startswith(SEGMENT_MAGICS):
        return Scan([], 0, "no segment header")
    return Scan(*_records(data, len(SEGMENT_MAGIC)))


def read_records(data: bytes) -> tuple[list[tuple[int, bytes]], int, str | None]:
    """The intact records of ``data`` (records back to back, no segment header), where
    the good bytes end, and why reading stopped early (None: at the end)."""
    return _records(data, 0)


def _records(data: bytes, at: int) -> tuple[list[tuple[int, bytes]], int, str | None]:
    records: list[tuple[int, bytes]] = []
    end = len(data)
    while at < end:
        if end - at < HEADER.size:
            return records, at, f"torn record header at byte {at}"
        length, crc, kind = HEADER.unpack_from(data, at)
        start = at + HEADER.size
        if length > MAX_PAYLOAD_BYTES or start + length > end:
            return records, at, f"torn record at byte {at} ({length} bytes claimed)"
        payload = data[start : start + length]
        if google_crc32c.value(data[at + 8 : start + length]) != crc:
            return records, at, f"checksum mismatch at byte {at}"
        if kind not in RECORD_TYPES:
            return records, at, f"unknown record type {kind} at byte {at}"
        if kind == CELLS_ZSTD:
            try:
                payload = decompressor().decompress(payload)
            except zstandard.ZstdError as exc:  # a matching CRC over bad zstd: a bug's record
                return records, at, f"undecodable compressed record at byte {at}: {exc}"
            kind = CELLS
        records.append((kind, payload))
        at = start + length
    return records, at, None


def iter_records(records: Iterable[tuple[int, bytes]]) -> Iterator[list[Columns]]:
    """The rows of each :data:`CELLS` record as :func:`decode_columns` gives them, a
    record at a time, in order. The cyclic garbage collector is held off while a record
    is decoded: its many small objects would set it off again and again, and they hold
    no cycles."""
    for kind, payload in records:
        if kind == CELLS:
            collecting = gc.isenabled()
            gc.disable()
            try:
                rows = decode_columns(payload)
            finally:
                if collecting:
                    gc.enable()
            yield rows
