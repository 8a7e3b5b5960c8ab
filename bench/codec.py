"""Codec write-path throughput: encode_point + SeriesKey.row_key against a bare struct.pack loop.

Both produce the same (row key, qualifier, value) bytes for the same points (checked before
timing). The input is the writer's usual shape: 1,000 series (salted keys, 3 tags), points
10 s apart in seconds plus a share of millisecond timestamps, values a mix of small ints,
large ints, float32-exact and float64 floats. The baseline inlines everything with
precompiled ``struct.Struct`` objects and no function calls per point; the ratio is what the
codec's layering costs.

Also times ``compact_row`` + ``decode_cells`` of one hour of 1 s points (3,600 cells) against
a bare loop slicing the same compacted cell.

Run: ``python -m bench.codec [--series N] [--points N] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import random
import struct
import time
from collections.abc import Callable, Sequence

from tsd.codec.compaction import compact_row, decode_cells
from tsd.codec.qualifier import encode_point
from tsd.codec.rowkey import KeyLayout, SeriesKey, make_series_key

Point = tuple[int, int, int | float]  # (series index, timestamp, value)
Encoded = list[tuple[bytes, bytes, bytes]]

BASE = 1356998400


def make_input(n_series: int, n_points: int, seed: int = 7) -> list[Point]:
    rnd = random.Random(seed)
    values: list[int | float] = [
        rnd.choice(
            [
                rnd.randint(-100, 100),
                rnd.randint(-(2**40), 2**40),
                rnd.randint(0, 1000) / 4,  # float32-exact
                rnd.random() * 1000,  # needs float64
            ]
        )
        for _ in range(1000)
    ]
    points: list[Point] = []
    for i in range(n_points):
        series = i % n_series
        ts = BASE + (i // n_series) * 10
        if i % 10 == 0:
            ts = ts * 1000 + rnd.randint(0, 999)  # a share of ms timestamps
        points.append((series, ts, values[i % len(values)]))
    return points


def make_series(layout: KeyLayout, n_series: int) -> list[SeriesKey]:
    return [
        make_series_key(
            layout,
            (1 + s % 7).to_bytes(3, "big"),
            [
                (b"\x00\x00\x01", (s + 1).to_bytes(3, "big")),
                (b"\x00\x00\x02", (s % 13).to_bytes(3, "big")),
                (b"\x00\x00\x03", (s % 5).to_bytes(3, "big")),
            ],
        )
        for s in range(n_series)
    ]


def run_codec(points: Sequence[Point], series: Sequence[SeriesKey]) -> Encoded:
    out: Encoded = []
    append = out.append
    for index, ts, value in points:
        base, qualifier, data = encode_point(ts, value)
        append((series[index].row_key(base), qualifier, data))
    return out


def run_baseline(points: Sequence[Point], templates: Sequence[tuple[bytes, bytes]]) -> Encoded:
    """Everything inline: the bytes OpenTSDB writes, with no codec function per point."""
    pack_b = struct.Struct(">b").pack
    pack_h = struct.Struct(">h").pack
    pack_i = struct.Struct(">i").pack
    pack_q = struct.Struct(">q").pack
    pack_f = struct.Struct(">f").pack
    unpack_f = struct.Struct(">f").unpack
    pack_d = struct.Struct(">d").pack
    pack_uh = struct.Struct(">H").pack
    pack_ui = struct.Struct(">I").pack
    out: Encoded = []
    append = out.append
    for index, ts, value in points:
        if type(value) is int:
            if -128 <= value <= 127:
                flags, data = 0, pack_b(value)
            elif -32768 <= value <= 32767:
                flags, data = 1, pack_h(value)
            elif -2147483648 <= value <= 2147483647:
                flags, data = 3, pack_i(value)
            else:
                flags, data = 7, pack_q(value)
        else:
            single = pack_f(value)
            if unpack_f(single)[0] == value:
                flags, data = 0xB, single
            else:
                flags, data = 0xF, pack_d(value)
        if ts > 0xFFFFFFFF:
            seconds = ts // 1000
            base = seconds - seconds % 3600
            qualifier = pack_ui(0xF0000000 | (ts - base * 1000) << 6 | flags)
        else:
            base = ts - ts % 3600
            qualifier = pack_uh((ts - base) << 4 | flags)
        prefix, suffix = templates[index]
        append((prefix + pack_ui(base) + suffix, qualifier, data))
    return out


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_write_path(n_series: int, n_points: int, repeat: int) -> None:
    layout = KeyLayout(salt_width=1, salt_buckets=20)
    points = make_input(n_series, n_points)
    series = make_series(layout, n_series)
    templates = [(s.salt + s.metric_uid, s.tsuid[layout.metric_width :]) for s in series]
    assert run_codec(points, series) == run_baseline(points, templates), "bytes differ"
    codec_s = best_of(repeat, lambda: run_codec(points, series))
    base_s = best_of(repeat, lambda: run_baseline(points, templates))
    print(f"write path: {n_points:,} points, {n_series:,} series, best of {repeat}")
    print(f"  codec    encode_point + row_key : {n_points / codec_s:12,.0f} points/s")
    print(f"  baseline bare struct.pack loop  : {n_points / base_s:12,.0f} points/s")
    print(f"  ratio codec/baseline time       : {codec_s / base_s:12.2f}x")


def bench_read_path(repeat: int) -> None:
    rnd = random.Random(3)
    cells: list[tuple[bytes, bytes]] = []
    for offset in range(3600):
        _, qualifier, data = encode_point(BASE + offset, rnd.randint(0, 100_000))
        cells.append((qualifier, data))
    compacted = compact_row(cells)
    assert compacted is not None
    qualifiers, values = compacted

    def baseline() -> list[tuple[int, int]]:
        out = []
        v_idx = 0
        for q_idx in range(0, len(qualifiers), 2):
            raw = qualifiers[q_idx] << 8 | qualifiers[q_idx + 1]
            end = v_idx + (raw & 7) + 1
            out.append(
                (
                    BASE * 1000 + (raw >> 4) * 1000,
                    int.from_bytes(values[v_idx:end], "big", signed=True),
                )
            )
            v_idx = end
        return out

    decoded = [(p.timestamp_ms, p.value) for p in decode_cells(BASE, [compacted]).points]
    assert decoded == baseline(), "decoded points differ"
    compact_s = best_of(repeat, lambda: compact_row(cells))
    decode_s = best_of(repeat, lambda: decode_cells(BASE, [compacted]))
    base_s = best_of(repeat, baseline)
    print("read path: one row, 3,600 one-second int points")
    print(f"  compact_row of 3,600 cells      : {3600 / compact_s:12,.0f} points/s")
    print(f"  decode_cells of the compacted   : {3600 / decode_s:12,.0f} points/s")
    print(f"  baseline bare slicing loop      : {3600 / base_s:12,.0f} points/s")
    print(f"  ratio decode_cells/baseline     : {decode_s / base_s:12.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--points", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    bench_write_path(args.series, args.points, args.repeat)
    bench_read_path(args.repeat)


if __name__ == "__main__":
    main()
