"""The compiled Thrift reply reader (tsd/storage/hbase/_rows.c); everything else is in
pyproject.toml. ``optional``: without a C compiler tsd installs anyway and reads HBase replies
with its pure-Python fallback (tsd/storage/hbase/rows.py), only slower."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tsd.storage.hbase._rows",
            ["tsd/storage/hbase/_rows.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
