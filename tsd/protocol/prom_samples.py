"""Remote write's hot loop: the samples of series seen before, one sample per series.

Prometheus sends each sample as its own series with all its labels; a request's series
are read as keys and samples (:func:`~tsd.protocol.prom_wire.decode_write_columns`), and
the series the ingest service has resolved before are found by key. Their storable
samples (a finite value, a millisecond timestamp OpenTSDB reads as one) are taken in one
pass: encoded into a writer batch's cells as
:func:`~tsd.codec.qualifier.encode_points_into` encodes them, or listed as
``(series, timestamp, value)`` points; every other sample is left to the caller by index
(a new series, a value or timestamp that is not stored).

:func:`python_take_known_samples` is the specification and the fallback; the compiled
helper (``take_known_samples`` in ``tsd/protocol/_parse.c``) does the same, without a
Python step per sample (tests/protocol/test_prom_samples.py checks both agree).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, cast

import tsd.native as native
from tsd.codec.qualifier import ENCODER_TABLES, encode_points_into

_c_take_known_samples: Any = native.attribute("tsd.protocol._parse", "take_known_samples")

#: where taken points go: a writer batch's cells (row key -> qualifier -> value), or a list
Out = dict[bytes, dict[bytes, bytes]] | list[tuple[Any, int, float]]


def python_take_known_samples(
    keys: list[bytes],
    samples: Sequence[Any],
    known: Mapping[Any, Any],
    out: Out,
    low: int,
    high: int,
) -> tuple[int, int, list[int]]:
    """Take sample ``i`` (an object with ``value`` and ``timestamp``) of series ``keys[i]``
    when ``known`` has that key, its value is a finite float and its timestamp an int with
    ``low < timestamp <= high``: encoded into ``out`` when it is a dict (later points of a
    cell replacing earlier ones), else appended to it as ``(known[key], timestamp,
    value)``. Returns (points taken, cells added to a dict ``out``, the indices of the
    samples not taken, in order). ValueError when there are not as many samples as keys."""
    if len(samples) != len(keys):
        raise ValueError("take_known_samples: as many samples as keys")
    points: list[tuple[Any, int, float]] = out if isinstance(out, list) else []
    before = len(points)
    others: list[int] = []
    get = known.get
    for index, (key, sample) in enumerate(zip(keys, samples, strict=True)):
        series = get(key)
        value = sample.value
        timestamp = sample.timestamp
        if (
            series is not None
            and type(value) is float
            and value - value == 0.0
            and type(timestamp) is int
            and low < timestamp <= high
        ):
            points.append((series, timestamp, value))
        else:
            others.append(index)
    taken = len(points) - before
    if isinstance(out, dict):
        return taken, encode_points_into(out, points), others
    return taken, 0, others


def _compiled_take(*args: Any) -> tuple[int, int, list[int]]:
    return cast(tuple[int, int, list[int]], _c_take_known_samples(*args, *ENCODER_TABLES))


#: :func:`python_take_known_samples`, by the compiled helper when it is built (``keys`` a
#: list, ``known`` a dict: a TypeError otherwise)
take_known_samples: Final[Callable[..., tuple[int, int, list[int]]]] = (
    python_take_known_samples if _c_take_known_samples is None else _compiled_take
)
