"""The compiled helpers: the Thrift reply reader (tsd/storage/hbase/_rows.c), the embedded
store's packed-row decoder (tsd/storage/embedded/_points.c) and encoder
(tsd/storage/embedded/_pack.c), the seconds cell decoder
(tsd/query/_decode.c), the query answer's point writer (tsd/server/http/_render.c), and
the ingest path's, each beside the Python it accelerates: the cell encoder
(tsd/codec/_encode.c, the format shared in tsd/codec/_format.h), the put parsers
(tsd/protocol/_parse.c), the log's framing of a batch (tsd/wal/_record.c) and the head's
run bounds (tsd/head/_runs.c); and the UID caches' generation table (tsd/uid/_table.c,
sharing tsd/_hashindex.h and tsd/_region.h with the put parsers' ref table); everything
else is in pyproject.toml. ``optional``:
without a C compiler tsd installs anyway and uses their pure-Python fallbacks
(tsd/storage/hbase/rows.py, tsd/storage/embedded/packed.py's cells and numpy encoder,
tsd/query/decode.py's numpy path, tsd/server/http/render.py's loop,
tsd/codec/qualifier.py's, tsd/protocol/telnet.py's, put_json.py's, tsd/wal/record.py's and
tsd/head/head.py's loops, dicts for tsd/uid/cache.py's generations), only slower (the daemon logs a warning naming each missing
helper; tsd/native.py).
``TSD_REQUIRE_NATIVE=1`` makes them required: a helper that does not build fails the
build (CI and the Docker image's build stage set it). tsd/native.py's HELPERS lists the
same modules (tests/test_native.py checks)."""

import os

from setuptools import Extension, setup

#: optional unless TSD_REQUIRE_NATIVE is set (to anything but "", 0, false, no)
OPTIONAL = os.environ.get("TSD_REQUIRE_NATIVE", "").strip().lower() in ("", "0", "false", "no")

setup(
    ext_modules=[
        Extension(
            "tsd.storage.hbase._rows",
            ["tsd/storage/hbase/_rows.c"],
            extra_compile_args=["-O2"],
            optional=OPTIONAL,
        ),
        Extension(
            "tsd.storage.embedded._points",
            ["tsd/storage/embedded/_points.c"],
            extra_compile_args=["-O2"],
            optional=OPTIONAL,
        ),
        Extension(
            "tsd.storage.embedded._pack",
            ["tsd/storage/embedded/_pack.c"],
            # the decimal check rounds as numpy does: no fused multiply-add
            extra_compile_args=["-O2", "-ffp-contract=off"],
            optional=OPTIONAL,
        ),
        Extension(
            "tsd.codec._encode",
            ["tsd/codec/_encode.c"],
            depends=["tsd/codec/_format.h"],
            extra_compile_args=["-O2"],
            optional=OPTIONAL,
        ),
        Extension(
            "tsd.protocol._parse",
            ["tsd/protocol/_parse.c"],
            # _format.h: the cell format it encodes into; _region.h: its table's arrays
            include_dirs=["tsd/codec", "tsd"],
            depends=[
                "tsd/codec/_format.h",
                "tsd/protocol/_keytable.h",
                "tsd/_hashindex.h",
                "tsd/_region.h",
            ],
            extra_compile_args=["-O2"],
            optional=OPTIONAL,
        ),
        Extension(
            "tsd.wal._record",
            ["tsd/wal/_record.c"],
            include_dirs=["tsd/codec"],  # _format.h: a point's cell, for remote write's samples
            depends=["tsd/codec/_format.h"],
            extra_compile_args=["-O2"],
            optional=OPTIONAL,
        ),
        Extension(
            "tsd.uid._table",
            ["tsd/uid/_table.c"],
            include_dirs=["tsd"],  # _hashindex.h, _region.h: the index and arrays it shares
            depends=["tsd/_hashindex.h", "tsd/_region.h"],
            extra_compile_args=["-O2"],
            optional=OPTIONAL,
        ),
        Extension(
            "tsd.head._runs",
            ["tsd/head/_runs.c"],
            depends=["tsd/head/_packed.h"],
            extra_compile_args=["-O2"],
            optional=OPTIONAL,
        ),
        Extension(
            "tsd.query._decode",
            ["tsd/query/_decode.c"],
            include_dirs=["tsd/head"],  # _packed.h: the head rows' packed part it reads
            depends=["tsd/head/_packed.h"],
            extra_compile_args=["-O2"],
            optional=OPTIONAL,
        ),
        Extension(
            "tsd.server.http._render",
            ["tsd/server/http/_render.c"],
            extra_compile_args=["-O2"],
            optional=OPTIONAL,
        ),
    ]
)
