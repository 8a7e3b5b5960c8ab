"""Prometheus' remote storage wire format: snappy-framed protobuf messages. Pure.

Prometheus' remote write 1.0 and remote read send one protobuf message per request, its
bytes compressed with snappy's *block* format (not the framed stream format), and read
answers the same way (``Content-Encoding: snappy``). Both codecs come from maintained
packages: ``protobuf`` (Google's runtime, upb in C) and ``cramjam`` (snappy in Rust).

The messages are declared here, at import, as a ``FileDescriptorProto`` built with the
runtime's own descriptor classes (no generated ``_pb2`` module, hence no ``protoc`` at build
time). Field numbers and types are those of Prometheus' ``prompb`` (remote.proto,
types.proto); only what tsd reads or writes is declared: unknown fields (exemplars,
metadata, read hints) are skipped by the parser as protobuf always does.

One declaration departs on purpose, wire-compatibly: in :data:`WriteRequest` a series'
labels are ``repeated bytes`` rather than ``repeated Label`` (an embedded message and a
bytes field are the same on the wire). Prometheus sends each sample as its own series
with all its labels, so the labels' encoded bytes are the key of the ingest cache, and
they are decoded into names (:func:`decode_label`) only for a series not seen before.

Reading a message field from Python costs an object per access (about a microsecond per
series for its labels and its sample), so :func:`decode_write_columns` reads a request
through *views*: other declarations of the same wire bytes, each parsed (and written) by
the protobuf runtime itself, that hand back whole columns at once:

* every series as its bytes (a view declaring ``timeseries`` as ``repeated bytes``);
* the samples of every series, in order, each left encoded: a view whose ``timeseries`` is
  a *singular* message, which protobuf's merge rule turns into one message holding every
  series' samples (repeated fields of a message met twice are concatenated);
* the key of every series: its bytes without the field of its sample at their end. The
  runtime writes the samples back as fields, one after the other (the samples view's
  merged message, less the fields it left unknown: every series' labels); when series
  ``i`` ends with the ``i``-th of them, its key is what comes before
  (:func:`~tsd.protocol.prom_samples.series_fit`, compiled: a comparison of bytes, no
  step per label; the key is then looked up where it lies, in the series' bytes:
  :func:`~tsd.protocol.prom_samples.take_known_series`). A key is thus the series'
  labels as the sender encoded them (and any other field it sent, exemplars, left as
  they are): equal keys are the same labels. A
  key met for the first time is parsed (:func:`decode_key`): it must be whole fields and
  hold no sample, so that every series is its key and one sample and the ``i``-th sample
  is series ``i``'s;
* the samples' values and timestamps as two columns, with no object per sample but the
  numbers themselves: the samples joined with a *mark* between them (a Sample of
  :data:`~tsd.protocol.prom_samples.MARK_VALUE` and
  :data:`~tsd.protocol.prom_samples.MARK_TIMESTAMP`, encoded by the runtime) and parsed once
  more as a message of two repeated fields, ``value`` and ``timestamp``: every sample's
  fields land in the two columns behind its mark, in order. A field the sender left out
  (proto3 leaves out a 0.0 value or a 0 timestamp) is simply missing behind its mark,
  and a field sent twice is there twice (the last one counts, as protobuf reads it), so
  :func:`~tsd.protocol.prom_samples.align_samples` reads each sample's pair back from
  the marks. A sample whose own value or timestamp is a mark's (a NaN of that payload,
  a timestamp of -2**63: neither is stored) makes the marks miscount.

A request that is not a sample per series (a series with none or several, native
histograms, exemplars sent apart) or whose marks miscount has no columns: it is read
whole (:func:`write_request_of`), each series keyed by :func:`series_key`.

Nothing here reads a wire byte itself: every byte is parsed and written by the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, cast

import cramjam
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from tsd.errors import BadRequestError
from tsd.protocol.prom_samples import (
    MARK_TIMESTAMP,
    MARK_VALUE,
    align_samples,
    request_key,
    series_fit,
)

__all__ = [
    "SAMPLES",
    "STREAMED_XOR_CHUNKS",
    "DecodeError",
    "Label",
    "ReadRequest",
    "ReadResponse",
    "WriteColumns",
    "WriteRequest",
    "decode_key",
    "decode_label",
    "decode_read_request",
    "decode_write_columns",
    "decode_write_request",
    "series_key",
    "encode_read_response",
    "write_request_of",
    "snappy_compress",
    "snappy_decompress",
]

#: ReadRequest.ResponseType values.
SAMPLES: Final = 0
STREAMED_XOR_CHUNKS: Final = 1
#: LabelMatcher.Type values.
MATCH_EQ: Final = 0
MATCH_NEQ: Final = 1
MATCH_RE: Final = 2
MATCH_NRE: Final = 3

_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL = _F.LABEL_OPTIONAL
_REPEATED = _F.LABEL_REPEATED
_PACKAGE = "tsd.prompb"


def _message(name: str, *fields: tuple[str, int, int, int, str]) -> descriptor_pb2.DescriptorProto:
    """A message: fields as (name, number, label, type, type name of a message/enum)."""
    message = descriptor_pb2.DescriptorProto(name=name)
    for field_name, number, label, kind, type_name in fields:
        field = message.field.add(name=field_name, number=number, label=label, type=kind)
        if type_name:
            field.type_name = f".{_PACKAGE}.{type_name}"
    return message


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="tsd/prompb.proto", package=_PACKAGE, syntax="proto3"
    )
    proto.message_type.extend(
        [
            _message(
                "Sample",
                ("value", 1, _OPTIONAL, _F.TYPE_DOUBLE, ""),
                ("timestamp", 2, _OPTIONAL, _F.TYPE_INT64, ""),
            ),
            _message(
                "Label",
                ("name", 1, _OPTIONAL, _F.TYPE_STRING, ""),
                ("value", 2, _OPTIONAL, _F.TYPE_STRING, ""),
            ),
            _message(
                "TimeSeries",
                ("labels", 1, _REPEATED, _F.TYPE_MESSAGE, "Label"),
                ("samples", 2, _REPEATED, _F.TYPE_MESSAGE, "Sample"),
            ),
            # The write side's series: labels left encoded (see the module's docstring);
            # native histograms (field 4) only counted, as tsd does not store them.
            _message(
                "WriteSeries",
                ("labels", 1, _REPEATED, _F.TYPE_BYTES, ""),
                ("samples", 2, _REPEATED, _F.TYPE_MESSAGE, "Sample"),
                ("histograms", 4, _REPEATED, _F.TYPE_BYTES, ""),
            ),
            _message("WriteRequest", ("timeseries", 1, _REPEATED, _F.TYPE_MESSAGE, "WriteSeries")),
            # Views of a WriteRequest's bytes (see the module's docstring).
            _message("EncodedSeries", ("timeseries", 1, _REPEATED, _F.TYPE_BYTES, "")),
            _message("EncodedSamples", ("samples", 2, _REPEATED, _F.TYPE_BYTES, "")),
            _message(
                "SamplesView", ("timeseries", 1, _OPTIONAL, _F.TYPE_MESSAGE, "EncodedSamples")
            ),
            _message(
                "SampleColumns",
                ("value", 1, _REPEATED, _F.TYPE_DOUBLE, ""),
                ("timestamp", 2, _REPEATED, _F.TYPE_INT64, ""),
            ),
            _message(
                "LabelMatcher",
                ("type", 1, _OPTIONAL, _F.TYPE_INT32, ""),
                ("name", 2, _OPTIONAL, _F.TYPE_STRING, ""),
                ("value", 3, _OPTIONAL, _F.TYPE_STRING, ""),
            ),
            _message(
                "Query",
                ("start_timestamp_ms", 1, _OPTIONAL, _F.TYPE_INT64, ""),
                ("end_timestamp_ms", 2, _OPTIONAL, _F.TYPE_INT64, ""),
                ("matchers", 3, _REPEATED, _F.TYPE_MESSAGE, "LabelMatcher"),
            ),
            _message(
                "ReadRequest",
                ("queries", 1, _REPEATED, _F.TYPE_MESSAGE, "Query"),
                ("accepted_response_types", 2, _REPEATED, _F.TYPE_INT32, ""),
            ),
            _message("QueryResult", ("timeseries", 1, _REPEATED, _F.TYPE_MESSAGE, "TimeSeries")),
            _message("ReadResponse", ("results", 1, _REPEATED, _F.TYPE_MESSAGE, "QueryResult")),
        ]
    )
    return proto


def _classes() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    names = (
        "Label",
        "TimeSeries",
        "WriteRequest",
        "ReadRequest",
        "ReadResponse",
        "WriteSeries",
        "EncodedSeries",
        "SamplesView",
        "SampleColumns",
        "Sample",
    )
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
        for name in names
    }


_CLASSES: Final = _classes()
#: Message classes (protobuf builds them at run time: typed as Any).
Label: Final[Any] = _CLASSES["Label"]
TimeSeries: Final[Any] = _CLASSES["TimeSeries"]
WriteRequest: Final[Any] = _CLASSES["WriteRequest"]
ReadRequest: Final[Any] = _CLASSES["ReadRequest"]
ReadResponse: Final[Any] = _CLASSES["ReadResponse"]
_WriteSeries: Final[Any] = _CLASSES["WriteSeries"]
_EncodedSeries: Final[Any] = _CLASSES["EncodedSeries"]
_SamplesView: Final[Any] = _CLASSES["SamplesView"]
_SampleColumns: Final[Any] = _CLASSES["SampleColumns"]

#: The mark put before each sample (see the module's docstring), encoded by the runtime.
_MARK: Final[bytes] = _CLASSES["Sample"](
    value=MARK_VALUE, timestamp=MARK_TIMESTAMP
).SerializeToString()


def snappy_decompress(body: bytes, max_bytes: int) -> bytes:
    """A snappy block, uncompressed; BadRequestError when it is not one or would exceed
    ``max_bytes`` (checked from the block's header before any allocation)."""
    try:
        size = cramjam.snappy.decompress_raw_len(body)
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise BadRequestError("Invalid snappy block", str(exc)) from None
    if size > max_bytes:
        raise BadRequestError(
            "Request body too large",
            f"the uncompressed body would be {size} bytes, more than the {max_bytes} allowed"
            " (tsd.http.request.max_body)",
            413,
        )
    try:
        return bytes(cramjam.snappy.decompress_raw(body))
    except Exception as exc:
        raise BadRequestError("Invalid snappy block", str(exc)) from None


def snappy_compress(data: bytes) -> bytes:
    """``data`` as one snappy block."""
    return bytes(cramjam.snappy.compress_raw(data))


def _parse(cls: Any, data: bytes, what: str) -> Any:
    message = cls()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise BadRequestError(f"Invalid {what}", str(exc)) from None
    return message


def decode_write_request(body: bytes, max_bytes: int) -> Any:
    """A remote write body (snappy block of a WriteRequest) -> the message."""
    return _parse(WriteRequest, snappy_decompress(body, max_bytes), "WriteRequest")


@dataclass(frozen=True, slots=True)
class WriteColumns:
    """A WriteRequest read as columns (:func:`decode_write_columns`)."""

    #: when the request holds a sample per series, each series ending with its sample
    #: (:func:`~tsd.protocol.prom_samples.series_fit`), and no sample a mark's value or
    #: timestamp: per series, in order, its bytes (its key and its sample's field) and its
    #: sample's bytes; None otherwise
    series: list[bytes] | None
    payloads: list[bytes] | None
    #: then its sample's value and timestamp (None otherwise)
    values: np.ndarray | None  # float64
    timestamps: np.ndarray | None  # int64
    #: the request's bytes (uncompressed), for :func:`write_request_of`'s full message
    data: bytes

    def key(self, index: int) -> bytes:
        """Series ``index``'s key (:func:`decode_key` reads one)."""
        if self.series is None or self.payloads is None:
            raise ValueError("a request read without columns has no keys")
        return request_key(self.series, self.payloads, index)


def decode_write_columns(body: bytes, max_bytes: int) -> WriteColumns:
    """A remote write body -> its series as columns (see the module's docstring); raises
    BadRequestError as :func:`decode_write_request` does. Parses and encodings by the
    runtime, no step per series or sample but the series' comparisons and the columns'
    alignment (compiled)."""
    data = snappy_decompress(body, max_bytes)
    try:
        series = list(_EncodedSeries.FromString(data).timeseries)
        every_sample = _SamplesView.FromString(data).timeseries
        payloads = list(every_sample.samples)
    except DecodeError as exc:
        raise BadRequestError("Invalid WriteRequest", str(exc)) from None
    none = WriteColumns(None, None, None, None, data)
    if len(payloads) != len(series):
        return none
    # The samples as fields: the view's message less the fields it left unknown (every
    # series' labels), written back by the runtime.
    every_sample.DiscardUnknownFields()
    if not series_fit(series, payloads, every_sample.SerializeToString()):
        return none
    try:
        columns = _SampleColumns.FromString(_MARK + _MARK.join(payloads) if series else b"")
    except DecodeError as exc:  # a sample's own bytes are not a Sample
        raise BadRequestError("Invalid WriteRequest", str(exc)) from None
    aligned = align_samples(columns.value, columns.timestamp, len(series))
    if aligned is None:
        return none
    return WriteColumns(series, payloads, aligned[0], aligned[1], data)


def write_request_of(columns: WriteColumns) -> Any:
    """The full message of a request :func:`decode_write_columns` read."""
    return _parse(WriteRequest, columns.data, "WriteRequest")


def decode_read_request(body: bytes, max_bytes: int) -> Any:
    """A remote read body (snappy block of a ReadRequest) -> the message."""
    return _parse(ReadRequest, snappy_decompress(body, max_bytes), "ReadRequest")


def decode_label(raw: bytes) -> tuple[str, str]:
    """One encoded Label -> (name, value); DecodeError when it is not one (bad UTF-8)."""
    label = Label()
    label.ParseFromString(raw)
    return label.name, label.value


def decode_key(key: bytes) -> list[bytes] | None:
    """A series' key -> its labels, each still encoded (:func:`decode_label` reads one);
    None when the key is not whole fields of a series without samples (then a request's
    keys did not part each series from its sample: see the module's docstring)."""
    try:
        series = _WriteSeries.FromString(key)
    except DecodeError:
        return None
    if len(series.samples):
        return None
    return list(series.labels)


def series_key(series: Any) -> bytes:
    """The key of a series of :func:`write_request_of`'s message: the series without its
    samples, written by the runtime (the same bytes as :func:`decode_write_columns`' key
    of the series when the sender wrote its fields in order, as protobuf does).
    Clears the series' samples: read them first."""
    series.ClearField("samples")
    return cast(bytes, series.SerializeToString())


def encode_read_response(
    results: list[list[tuple[list[tuple[str, str]], list[tuple[int, float]]]]],
) -> bytes:
    """A ReadResponse, snappy-compressed: per query, its series as (labels, samples)."""
    response = ReadResponse()
    for series_list in results:
        result = response.results.add()
        for labels, samples in series_list:
            series = result.timeseries.add()
            series.labels.extend(Label(name=name, value=value) for name, value in labels)
            add = series.samples.add
            for timestamp, value in samples:
                add(timestamp=timestamp, value=value)
    return snappy_compress(response.SerializeToString())
