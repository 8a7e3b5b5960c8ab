"""The compiled Thrift reply reader (tsd/storage/hbase/_rows.c) and row decoder
(tsd/codec/_points.c); everything else is in pyproject.toml. ``optional``: without a C
compiler tsd installs anyway and reads HBase replies and decodes rows with its Python and
numpy fallbacks (tsd/storage/hbase/rows.py, tsd/query/decode.py), only slower."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tsd.storage.hbase._rows",
            ["tsd/storage/hbase/_rows.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "tsd.codec._points",
            ["tsd/codec/_points.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
