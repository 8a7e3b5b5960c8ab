"""config/opentsdb.conf lists every key tsd reads, each with its default."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from tsd.config import KEYS, Config, build_config, parse_properties

CONFIG_FILE = Path(__file__).resolve().parents[2] / "config" / "opentsdb.conf"
SETTING = re.compile(r"^#(tsd\.[a-z0-9_.]+ =(?: .*)?)$")


def listed_settings() -> dict[str, str]:
    lines = [
        m.group(1) for line in CONFIG_FILE.read_text().splitlines() if (m := SETTING.match(line))
    ]
    return parse_properties("\n".join(lines))


def test_every_key_is_listed_once() -> None:
    lines = [
        m.group(1) for line in CONFIG_FILE.read_text().splitlines() if (m := SETTING.match(line))
    ]
    assert sorted(listed_settings()) == sorted(KEYS)
    assert len(lines) == len(KEYS)


def test_listed_values_are_the_defaults() -> None:
    config = build_config(listed_settings())
    assert dataclasses.replace(config, raw={}) == Config()


def test_the_file_as_shipped_changes_nothing() -> None:
    assert parse_properties(CONFIG_FILE.read_text()) == {}
