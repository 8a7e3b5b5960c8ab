"""Name and tag rules: OpenTSDB 2.4.1 Tags.validateString / Tags.parse /
IncomingDataPoints.checkMetricAndTags, with their exact IllegalArgumentException texts.

Java HashMap orders below were produced by a real JVM (java.util.HashMap.keySet()).
"""

from __future__ import annotations

import pytest

from tsd.errors import BadRequestError
from tsd.protocol.names import (
    NameRules,
    check_metric_and_tags,
    format_java_map,
    java_hash_order,
    java_string_hash,
    parse_tag,
    validate_string,
)

# --- validate_string ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("sys.cpu.user", id="dotted"),
        pytest.param("a-b_c.d/e", id="all_punctuation"),
        pytest.param("ABCxyz0189", id="letters_digits"),
        pytest.param("μs", id="greek_letter"),
        pytest.param("日本", id="cjk_letters"),
        pytest.param("\u00b5\u00c0\u00ff", id="latin1_letters"),
        pytest.param("ª", id="feminine_ordinal_is_a_letter"),
    ],
)
def test_validate_string_accepts(name: str) -> None:
    validate_string("metric name", name)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param(None, "Invalid metric name: null", id="null"),
        pytest.param("", "Invalid metric name: empty string", id="empty"),
        pytest.param("a b", 'Invalid metric name ("a b"): illegal character:  ', id="space"),
        pytest.param("a$b", 'Invalid metric name ("a$b"): illegal character: $', id="dollar"),
        pytest.param("a:b", 'Invalid metric name ("a:b"): illegal character: :', id="colon"),
        pytest.param("x=y", 'Invalid metric name ("x=y"): illegal character: =', id="equals"),
        pytest.param("a\tb", 'Invalid metric name ("a\tb"): illegal character: \t', id="tab"),
        pytest.param(
            "a¼", 'Invalid metric name ("a¼"): illegal character: ¼', id="latin1_non_letter"
        ),
        pytest.param("1²", 'Invalid metric name ("1²"): illegal character: ²', id="superscript"),
        pytest.param("٣", 'Invalid metric name ("٣"): illegal character: ٣', id="non_ascii_digit"),
        pytest.param("a😀", 'Invalid metric name ("a😀"): illegal character: 😀', id="emoji"),
        pytest.param("𝐀", 'Invalid metric name ("𝐀"): illegal character: 𝐀', id="non_bmp_letter"),
        pytest.param(
            "a$b c", 'Invalid metric name ("a$b c"): illegal character: $', id="first_bad"
        ),
    ],
)
def test_validate_string_refuses_with_opentsdb_text(name: str | None, message: str) -> None:
    with pytest.raises(BadRequestError) as info:
        validate_string("metric name", name)
    assert info.value.message == message
    assert info.value.status == 400


def test_special_chars_are_allowed_only_when_configured() -> None:
    validate_string("metric name", "a$b c", special_chars="$ ")
    validate_string("metric name", "a$b", special_chars="$")
    with pytest.raises(BadRequestError, match=r"illegal character: \$"):
        validate_string("metric name", "a$b", special_chars=" ")


# --- parse_tag ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "word",
    [
        pytest.param("foo", id="no_equals"),
        pytest.param("=v", id="empty_key"),
        pytest.param("k=", id="empty_value"),
        pytest.param("=", id="only_equals"),
        pytest.param("k=v=w", id="two_equals"),
        pytest.param("k==v", id="double_equals"),
        pytest.param("", id="empty_word"),
    ],
)
def test_parse_tag_refuses_malformed_word(word: str) -> None:
    tags: dict[str, str] = {}
    with pytest.raises(BadRequestError) as info:
        parse_tag(tags, word)
    assert info.value.message == f"invalid tag: {word}"
    assert tags == {}


def test_parse_tag_tolerates_same_key_same_value() -> None:
    tags: dict[str, str] = {}
    parse_tag(tags, "host=a")
    parse_tag(tags, "host=a")
    assert tags == {"host": "a"}


def test_parse_tag_refuses_same_key_other_value() -> None:
    tags = {"host": "a", "dev": "sda"}
    with pytest.raises(BadRequestError) as info:
        parse_tag(tags, "host=b")
    # HashMap order of {host, dev}: dev first (checked against a JVM).
    assert info.value.message == "duplicate tag: host=b, tags={dev=sda, host=a}"


def test_parse_tag_does_not_validate_characters() -> None:
    tags: dict[str, str] = {}
    parse_tag(tags, "k$=v v")  # checked later, by check_metric_and_tags
    assert tags == {"k$": "v v"}


# --- check_metric_and_tags ------------------------------------------------------------------


def test_check_metric_and_tags_accepts_up_to_max_tags() -> None:
    check_metric_and_tags("m", {f"k{i}": "v" for i in range(8)})
    check_metric_and_tags("m", {f"k{i}": "v" for i in range(3)}, NameRules(max_tags=3))


@pytest.mark.parametrize(
    ("metric", "tags", "rules", "message"),
    [
        pytest.param(
            "m", {}, NameRules(), "Need at least one tag (metric=m, tags={})", id="no_tags"
        ),
        pytest.param(
            "m",
            {k: str(i) for i, k in enumerate("abcdefghi")},
            NameRules(),
            "Too many tags: 9 maximum allowed: 8, tags: "
            "{a=0, b=1, c=2, d=3, e=4, f=5, g=6, h=7, i=8}",
            id="nine_tags",
        ),
        pytest.param(
            "m",
            {"host": "a", "cpu": "0"},
            NameRules(max_tags=1),
            "Too many tags: 2 maximum allowed: 1, tags: {host=a, cpu=0}",
            id="configured_max",
        ),
        pytest.param(
            "a b",
            {"k": "v"},
            NameRules(),
            'Invalid metric name ("a b"): illegal character:  ',
            id="metric_before_tags",
        ),
        pytest.param(
            "m",
            {"k$": "v"},
            NameRules(),
            'Invalid tag name with value [v] ("k$"): illegal character: $',
            id="bad_tag_key",
        ),
        pytest.param(
            "m",
            {"k": "v$"},
            NameRules(),
            'Invalid tag value with key [k] ("v$"): illegal character: $',
            id="bad_tag_value",
        ),
        pytest.param(
            "m", {"k": None}, NameRules(), "Invalid tag value with key [k]: null", id="null_value"
        ),
        pytest.param(
            "m",
            {"k": ""},
            NameRules(),
            "Invalid tag value with key [k]: empty string",
            id="empty_value",
        ),
        pytest.param(
            "m",
            {"zz$": "1", "a$": "2"},
            NameRules(),
            'Invalid tag name with value [2] ("a$"): illegal character: $',
            id="java_hash_order_picks_first_bad_tag",
        ),
    ],
)
def test_check_metric_and_tags_refuses_with_opentsdb_text(
    metric: str, tags: dict[str, str | None], rules: NameRules, message: str
) -> None:
    with pytest.raises(BadRequestError) as info:
        check_metric_and_tags(metric, tags, rules)
    assert info.value.message == message


def test_check_metric_and_tags_honours_special_chars() -> None:
    check_metric_and_tags("a$", {"k$": "v$"}, NameRules(special_chars="$"))


# --- Java HashMap emulation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "java_order"),
    [
        pytest.param(
            ["success", "failed", "errors", "timeouts"],
            ["success", "timeouts", "failed", "errors"],
            id="put_summary_keys",
        ),
        pytest.param(["error", "datapoint"], ["datapoint", "error"], id="put_detail_keys"),
        pytest.param(["b$", "a$"], ["b$", "a$"], id="insertion_order_kept"),
        pytest.param(["zz$", "a$"], ["a$", "zz$"], id="bucket_order"),
        pytest.param(
            ["host", "cpu", "dc", "env", "fqdn", "a", "b", "c", "d"],
            ["a", "b", "c", "d", "fqdn", "host", "cpu", "env", "dc"],
            id="nine_tags",
        ),
        pytest.param(
            [f"k{i:02d}" for i in range(1, 14)],
            ["k11", "k10", "k02", "k13", "k01", "k12", "k04"]
            + ["k03", "k06", "k05", "k08", "k07", "k09"],
            id="resized_to_32",
        ),
        pytest.param(
            ["AaAa", "BBBB", "AaBB", "BBAa", "x"],
            ["x", "AaAa", "BBBB", "AaBB", "BBAa"],
            id="colliding_hashes_keep_insertion_order",
        ),
        pytest.param(["a", "b", "a"], ["a", "b"], id="duplicates_once"),
    ],
)
def test_java_hash_order_matches_the_jvm(keys: list[str], java_order: list[str]) -> None:
    assert java_hash_order(keys) == java_order


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", 0, id="empty"),
        pytest.param("hello", 99162322, id="ascii"),
        pytest.param("μ", 956, id="bmp"),
        pytest.param("😀", 1772899, id="surrogate_pair"),
        pytest.param("polygenelubricants", 2**31, id="int_min_as_unsigned"),
    ],
)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_format_java_map() -> None:
    assert format_java_map({}) == "{}"
    assert format_java_map({"host": "a", "cpu": "0", "dc": None}) == "{host=a, cpu=0, dc=null}"
