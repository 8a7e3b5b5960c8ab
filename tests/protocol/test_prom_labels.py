"""The remote write mapping (tsd.protocol.prom_labels): every case of issue 30, item 1."""

from __future__ import annotations

import math
import struct

from hypothesis import given
from hypothesis import strategies as st

from tsd.protocol.names import NameRules, check_metric_and_tags
from tsd.protocol.prom_labels import (
    LabelMapper,
    MappedSeries,
    RefusedSeries,
    classify_nonfinite,
    escape,
    is_storable_timestamp,
    unescape,
    unmap_series,
)

STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]


def test_valid_names_are_unchanged() -> None:
    for text in ("go_gc_duration_seconds", "a.b-c/d", "Zürich", "job", "0.25", "é"):
        assert escape(text) == text
        assert unescape(text) == text


def test_what_a_default_prometheus_sends_is_escaped_and_comes_back() -> None:
    cases = {
        "127.0.0.1:9090": "127.0.0.1_.3A9090",
        "+Inf": "_.2BInf",
        "2.42.0+ds": "2.42.0_.2Bds",
        "http://localhost:9090/metrics": "http_.3A//localhost_.3A9090/metrics",
        "netgo,builtinassets": "netgo_.2Cbuiltinassets",
        "a b": "a_.20b",
        "中": "_.E4_.B8_.AD",
        "_.": "_.5F.",  # the escape's own lead-in is escaped
        "x_.3A": "x_.5F.3A",
        "a_:": "a__.3A",
    }
    for text, stored in cases.items():
        assert escape(text) == stored
        assert unescape(stored) == text
        check_metric_and_tags(stored, {"k": stored})  # OpenTSDB takes it


def test_allow_specialchars_are_kept() -> None:
    assert escape("host:9090", ":+") == "host:9090"
    assert escape("+Inf", ":+") == "+Inf"
    assert unescape("host:9090") == "host:9090"
    # a non-ISO-8859-1 special character would be stored as "?": escaped anyway
    assert escape("a€", "€") == "a_.E2_.82_.AC"


@given(st.text())
def test_the_mapping_is_reversible_and_valid(text: str) -> None:
    stored = escape(text)
    assert unescape(stored) == text
    if stored:
        stored.encode("iso-8859-1")
        check_metric_and_tags(stored, {"k": stored}, NameRules())


@given(st.text(alphabet=st.sampled_from("_.:+3AF"), max_size=12))
def test_the_escape_characters_themselves_are_reversible(text: str) -> None:
    assert unescape(escape(text, "+")) == text


def test_a_stored_name_without_well_formed_escapes_reads_as_is() -> None:
    for name in ("a_.b", "a_.3", "_.ZZ", "_.FF"):  # _.FF alone is not UTF-8
        assert unescape(name) == name


def test_series_mapping() -> None:
    mapper = LabelMapper()
    labels = [("__name__", "up"), ("job", "p"), ("instance", "h:1"), ("empty", "")]
    mapped = mapper.map_series(labels)
    assert mapped == MappedSeries("up", (("instance", "h_.3A1"), ("job", "p")))
    # an empty value is no label: it does not come back
    assert unmap_series(mapped.metric, mapped.tags) == [
        ("__name__", "up"),
        ("instance", "h:1"),
        ("job", "p"),
    ]
    assert mapper.map_series([("__name__", "job:rate:5m"), ("a", "b")]) == MappedSeries(
        "job_.3Arate_.3A5m", (("a", "b"),)
    )


def test_series_that_cannot_be_stored() -> None:
    mapper = LabelMapper(max_tags=2)

    def reason(labels: list[tuple[str, str]]) -> str:
        refused = mapper.map_series(labels)
        assert isinstance(refused, RefusedSeries)
        assert refused.message
        return refused.reason

    assert reason([("job", "x")]) == "no_metric_name"
    assert reason([("__name__", ""), ("job", "x")]) == "no_metric_name"
    assert reason([("__name__", "m")]) == "no_labels"
    assert reason([("__name__", "m"), ("a", "")]) == "no_labels"
    assert reason([("__name__", "m"), ("", "x")]) == "empty_label_name"
    assert reason([("__name__", "m"), ("a", "1"), ("b", "2"), ("c", "3")]) == "too_many_labels"
    assert isinstance(mapper.map_series([("__name__", "m"), ("a", "1"), ("b", "2")]), MappedSeries)


def test_nonfinite_values() -> None:
    assert classify_nonfinite(1.5) is None
    assert classify_nonfinite(-0.0) is None
    assert classify_nonfinite(1e308) is None
    assert classify_nonfinite(math.nan) == "nan"
    assert classify_nonfinite(STALE) == "stale"
    assert math.isnan(STALE)
    assert classify_nonfinite(math.inf) == "inf"
    assert classify_nonfinite(-math.inf) == "inf"


def test_timestamps() -> None:
    assert is_storable_timestamp(1_700_000_000_000)
    assert not is_storable_timestamp(1000)  # OpenTSDB would read it as seconds
    assert not is_storable_timestamp(-5)
    assert not is_storable_timestamp(10_000_000_000_000)
