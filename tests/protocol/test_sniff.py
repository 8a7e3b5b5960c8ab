"""Protocol sniffing on the shared port: OpenTSDB 2.4.1 PipelineFactory.DetectHttpOrRpc
looks at the first byte only; A-Z is HTTP, anything else telnet."""

from __future__ import annotations

import pytest

from tsd.protocol.sniff import looks_like_http


@pytest.mark.parametrize(
    ("first", "is_http"),
    [
        pytest.param(b"GET / HTTP/1.1\r\n", True, id="get"),
        pytest.param(b"POST /api/put HTTP/1.1\r\n", True, id="post"),
        pytest.param(b"OPTIONS", True, id="options"),
        pytest.param(b"A", True, id="first_upper"),
        pytest.param(b"Z", True, id="last_upper"),
        pytest.param(b"PUT m 1 1 k=v\n", True, id="upper_case_put_is_http"),
        pytest.param(b"put m 1 1 k=v\n", False, id="telnet_put"),
        pytest.param(b"version\n", False, id="telnet_version"),
        pytest.param(b"@", False, id="before_a"),
        pytest.param(b"[", False, id="after_z"),
        pytest.param(b"\n", False, id="empty_line"),
        pytest.param(b"\x16\x03\x01", False, id="tls_client_hello"),
        pytest.param(b"\xc1", False, id="high_byte"),
        pytest.param(b" GET", False, id="leading_space"),
    ],
)
def test_first_byte_decides(first: bytes, is_http: bool) -> None:
    assert looks_like_http(first) is is_http
    assert looks_like_http(first[:1]) is is_http


def test_needs_a_byte() -> None:
    with pytest.raises(ValueError, match="at least one byte"):
        looks_like_http(b"")
