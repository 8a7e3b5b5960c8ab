"""The compiled helpers: the Thrift reply reader (tsd/storage/hbase/_rows.c) and the seconds
cell decoder (tsd/query/_decode.c); everything else is in pyproject.toml. ``optional``:
without a C compiler tsd installs anyway and uses their pure-Python fallbacks
(tsd/storage/hbase/rows.py, tsd/query/decode.py's numpy path), only slower."""

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
            "tsd.query._decode",
            ["tsd/query/_decode.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
