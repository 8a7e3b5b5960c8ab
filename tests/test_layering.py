"""codec/ and protocol/ stay pure: importing them pulls in no asyncio, aiohttp or storage."""

import pkgutil
import subprocess
import sys

import pytest

import tsd.codec
import tsd.protocol

PURE_MODULES = [
    info.name
    for package in (tsd.codec, tsd.protocol)
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
] + ["tsd.codec", "tsd.protocol", "tsd.model", "tsd.errors", "tsd.config"]

FORBIDDEN = ("asyncio", "aiohttp", "tsd.storage", "structlog")


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_module_imports_nothing_async(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        f"bad = [m for m in {FORBIDDEN!r} if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} imports {out.stdout.strip()}"
