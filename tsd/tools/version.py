"""``tsdb version``: the build, as the telnet ``version`` command prints it (OpenTSDB's
``tsdb version`` runs BuildData.main: revisionString, then buildString)."""

from __future__ import annotations

import argparse
import sys

from tsd.buildinfo import version_reply


def configure(parser: argparse.ArgumentParser) -> None:
    """No options."""


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(version_reply().decode())
    return 0
