"""Authentication, rights and TLS over real sockets (issue 13 item 8).

With ``tsd.core.authentication.enable``: every HTTP endpoint answers a missing or wrong
credential with 401 and ``WWW-Authenticate``, a credential short of the route's right with
403, and changes nothing; telnet answers a first line that is not a valid credential with
``AUTH_FAIL`` and closes. TLS is served on the same port with a certificate made here.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import secrets
import shutil
import ssl
import subprocess
from pathlib import Path

import aiohttp
import pytest

from tests.server.conftest import MakeTsd
from tests.server.support import eventually, storage_snapshot, stored
from tsd.config import build_config
from tsd.daemon import Daemon
from tsd.errors import ConfigError
from tsd.server.http.access import ROUTE_RIGHTS

T0 = 1_700_000_000
RIGHTS = {"reader": "read", "writer": "write", "admin": "admin"}
SECRETS = {name: secrets.token_hex(16) for name in RIGHTS}


def users_file(directory: Path) -> Path:
    path = directory / "users"
    lines = ["# name rights secret"] + [
        f"{name} {RIGHTS[name]} sha256:{hashlib.sha256(secret.encode()).hexdigest()}"
        for name, secret in SECRETS.items()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def basic(name: str, secret: str | None = None) -> dict[str, str]:
    return {"Authorization": aiohttp.encode_basic_auth(name, secret or SECRETS[name])}


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {SECRETS[name]}"}


@pytest.fixture
async def secured(make_tsd: MakeTsd, tmp_path: Path) -> Daemon:
    """A daemon with authentication on, holding one point of ``good.m``."""
    daemon = await make_tsd(
        **{
            "tsd.core.authentication.enable": "true",
            "tsd.core.authentication.users_file": str(users_file(tmp_path)),
            "tsd.http.query.allow_delete": "true",
        }
    )
    point = {"metric": "good.m", "timestamp": T0, "value": 1, "tags": {"h": "a"}}
    async with (
        aiohttp.ClientSession(headers=basic("writer")) as http,
        http.post(f"http://127.0.0.1:{daemon.port}/api/put?sync", json=point) as reply,
    ):
        assert reply.status == 204
    return daemon


#: one request per route of the table (a route added to the table must be added here)
ENDPOINTS = {
    "": ("GET", "/"),
    "s": ("GET", "/s/tsd.js"),
    "api": ("GET", "/api"),
    "version": ("GET", "/version"),
    "api/version": ("GET", "/api/version"),
    "stats": ("GET", "/stats"),
    "api/stats": ("GET", "/api/stats"),
    "metrics": ("GET", "/metrics"),
    "api/serializers": ("GET", "/api/serializers"),
    "aggregators": ("GET", "/aggregators"),
    "api/aggregators": ("GET", "/api/aggregators"),
    "suggest": ("GET", "/suggest?type=metrics&q="),
    "api/suggest": ("GET", "/api/suggest?type=metrics&q="),
    "api/search": ("GET", "/api/search/lookup?m=good.m"),
    "api/query": ("GET", f"/api/query?start={T0}&m=sum:good.m"),
    "api/put": ("POST", "/api/put?sync"),
    "api/write": ("POST", "/api/v1/write"),
    "api/read": ("POST", "/api/v1/read"),
    "api/rollup": ("POST", "/api/rollup?sync"),
    "api/histogram": ("POST", "/api/histogram?sync"),
    "api/uid": ("GET", "/api/uid/assign?metric=new.m"),
    "api/annotation": ("GET", f"/api/annotation?start_time={T0}&method_override=delete"),
    "api/annotations": ("GET", f"/api/annotations?start_time={T0}"),
    "api/config": ("GET", "/api/config"),
    "api/dropcaches": ("GET", "/api/dropcaches"),
    "diediedie": ("GET", "/diediedie"),
}
PUT_BODY = f'{{"metric":"new.m","timestamp":{T0},"value":1,"tags":{{"h":"a"}}}}'

BAD_CREDENTIALS = [
    pytest.param({}, id="none"),
    pytest.param(basic("reader", "wrong"), id="wrong_password"),
    pytest.param(basic("nobody", "x"), id="unknown_user"),
    pytest.param({"Authorization": "Bearer wrong"}, id="wrong_token"),
    pytest.param({"Authorization": "Basic !!!"}, id="malformed"),
    pytest.param({"Authorization": "OpenTSDB key:digest:1:2"}, id="other_scheme"),
]


def test_the_endpoint_list_covers_every_route() -> None:
    assert set(ENDPOINTS) == set(ROUTE_RIGHTS)


@pytest.mark.parametrize("headers", BAD_CREDENTIALS)
async def test_every_endpoint_refuses_bad_credentials(
    secured: Daemon, headers: dict[str, str]
) -> None:
    before = await storage_snapshot(secured)
    async with aiohttp.ClientSession(headers=headers) as http:
        for route, (method, path) in ENDPOINTS.items():
            body = PUT_BODY if route == "api/put" else None
            url = f"http://127.0.0.1:{secured.port}{path}"
            async with http.request(method, url, data=body) as reply:
                assert reply.status == 401, route
                assert reply.headers["WWW-Authenticate"] == 'Basic realm="tsd", charset="UTF-8"'
                assert (await reply.json())["error"]["code"] == 401
    assert await storage_snapshot(secured) == before
    assert not secured.shutdown_requested


@pytest.mark.parametrize(
    ("who", "method", "path", "status"),
    [
        pytest.param("reader", "GET", f"/api/query?start={T0}&m=sum:good.m", 200, id="read_query"),
        pytest.param("reader", "POST", "/api/put?sync", 403, id="read_cannot_put"),
        pytest.param("reader", "GET", "/api/uid/assign?metric=x", 403, id="read_cannot_assign"),
        pytest.param("writer", "POST", "/api/put?sync", 204, id="write_puts"),
        pytest.param(
            "writer", "GET", f"/api/query?start={T0}&m=sum:good.m", 403, id="write_no_query"
        ),
        pytest.param("writer", "GET", "/api/dropcaches", 403, id="write_no_dropcaches"),
        pytest.param("writer", "GET", "/api/config", 403, id="write_no_config"),
        pytest.param("admin", "GET", "/api/dropcaches", 200, id="admin_dropcaches"),
        pytest.param("admin", "POST", "/api/put?sync", 204, id="admin_puts"),
        pytest.param("admin", "GET", "/api/config", 200, id="admin_config"),
    ],
)
@pytest.mark.parametrize(
    "scheme", [pytest.param(basic, id="basic"), pytest.param(bearer, id="token")]
)
async def test_rights_are_enforced(
    secured: Daemon, who: str, method: str, path: str, status: int, scheme: object
) -> None:
    assert callable(scheme)
    async with (
        aiohttp.ClientSession(headers=scheme(who)) as http,
        http.request(
            method,
            f"http://127.0.0.1:{secured.port}{path}",
            data=PUT_BODY if "put" in path else None,
        ) as reply,
    ):
        assert reply.status == status, await reply.text()
    names = {p.metric for p in await stored(secured)}
    assert ("new.m" in names) == (status == 204)


async def test_a_body_delete_needs_admin(secured: Daemon) -> None:
    base = f"http://127.0.0.1:{secured.port}"
    delete = (
        f'{{"start":{T0 - 1},"delete":true,"queries":[{{"aggregator":"sum","metric":"good.m"}}]}}'
    )
    async with aiohttp.ClientSession() as http:
        async with http.post(base + "/api/query", data=delete, headers=basic("reader")) as r:
            assert r.status == 403
        assert len(await stored(secured)) == 1
        async with http.post(base + "/api/query", data=delete, headers=basic("admin")) as r:
            assert r.status == 200
    assert await stored(secured) == []


# -- telnet -----------------------------------------------------------------------------------


async def telnet(daemon: Daemon, first: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
    writer.write(first)
    await writer.drain()
    return reader, writer


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(b"put m 1700000000 1 h=a\n", id="no_auth_line"),
        pytest.param(b"version\n", id="command_first"),
        pytest.param(b"auth basic reader wrong\n", id="wrong_secret"),
        pytest.param(b"auth token wrong\n", id="wrong_token"),
        pytest.param(b"auth basic reader\n", id="short_line"),
        pytest.param(b"x" * 2000, id="overlong_without_newline"),
    ],
)
async def test_telnet_refuses_bad_first_line(secured: Daemon, first: bytes) -> None:
    reader, writer = await telnet(secured, first + b"put m 1700000000 1 h=a\n")
    assert await reader.read() == b"AUTH_FAIL\r\n"  # then closed
    writer.close()
    assert [p.metric for p in await stored(secured)] == ["good.m"]


@pytest.mark.slow
async def test_telnet_without_credential_line_is_closed_after_socket_timeout(
    make_tsd: MakeTsd, tmp_path: Path
) -> None:
    daemon = await make_tsd(
        **{
            "tsd.core.authentication.enable": "true",
            "tsd.core.authentication.users_file": str(users_file(tmp_path)),
            "tsd.core.socket.timeout": "1",
        }
    )
    reader, writer = await telnet(daemon, b"auth basic ops")  # and never the newline
    assert await reader.read() == b""  # closed by the server, nothing answered
    writer.close()
    await eventually(lambda: not daemon.listener.telnet_protocols)


async def test_telnet_rights(secured: Daemon) -> None:
    line = b"put tel.m %d 1 h=a\n"
    reader, writer = await telnet(secured, f"auth token {SECRETS['reader']}\n".encode())
    assert await reader.readline() == b"AUTH_SUCCESS\r\n"
    writer.write(line % T0 + b"version\n")
    assert await reader.readline() == b"unknown command: put.  Try `help'.\n"
    assert (await reader.readline()).startswith(b"tsd ")
    writer.close()
    # The credential and the first put in one packet, as a collector sends them.
    auth = f"auth basic writer {SECRETS['writer']}\n".encode()
    reader, writer = await telnet(secured, auth + line % T0 + b"diediedie\nversion\n")
    assert await reader.readline() == b"AUTH_SUCCESS\r\n"
    assert await reader.readline() == b"unknown command: diediedie.  Try `help'.\n"
    assert (await reader.readline()).startswith(b"tsd ")
    writer.close()
    assert sorted(p.metric for p in await stored(secured)) == ["good.m", "tel.m"]
    assert not secured.shutdown_requested


# -- TLS --------------------------------------------------------------------------------------


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A self-signed certificate for 127.0.0.1, made with the openssl command, and the keys
    that serve it."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, {"tsd.network.tls.cert": str(cert), "tsd.network.tls.key": str(key)}


def client_context(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


async def assert_tls_version(daemon: Daemon, cert: Path) -> None:
    """A telnet ``version`` over TLS is answered."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", daemon.port, ssl=client_context(cert)
    )
    writer.write(b"version\n")
    assert (await reader.readline()).startswith(b"tsd ")
    writer.close()


@pytest.mark.both_loops
async def test_tls_round_trip_on_the_shared_port(
    make_tsd: MakeTsd, certificate: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    cert, tls_keys = certificate
    daemon = await make_tsd(
        **tls_keys,
        **{
            "tsd.core.authentication.enable": "true",
            "tsd.core.authentication.users_file": str(users_file(tmp_path)),
        },
    )
    tls = client_context(cert)
    base = f"https://127.0.0.1:{daemon.port}"
    async with aiohttp.ClientSession(headers=basic("admin")) as http:
        point = {"metric": "tls.m", "timestamp": T0, "value": 7, "tags": {"h": "a"}}
        async with http.post(base + "/api/put?sync", json=point, ssl=tls) as reply:
            assert reply.status == 204
        async with http.get(base + f"/api/query?start={T0}&m=sum:tls.m", ssl=tls) as reply:
            assert reply.status == 200
            assert (await reply.json())[0]["dps"] == {str(T0): 7}
    # telnet inside TLS, on the same port
    reader, writer = await asyncio.open_connection("127.0.0.1", daemon.port, ssl=tls)
    writer.write(f"auth token {SECRETS['writer']}\nput tls.m {T0 + 1} 8 h=a\n".encode())
    assert await reader.readline() == b"AUTH_SUCCESS\r\n"
    writer.write(b"exit\n")
    assert await reader.read() == b""
    writer.close()
    assert [p.value for p in await stored(daemon)] == [7, 8]
    # plaintext still served unless tsd.network.tls.required
    reader, writer = await telnet(daemon, b"auth basic nobody x\n")
    assert await reader.read() == b"AUTH_FAIL\r\n"
    writer.close()


async def test_tls_required_closes_plaintext(
    make_tsd: MakeTsd, certificate: tuple[Path, dict[str, str]]
) -> None:
    cert, tls_keys = certificate
    daemon = await make_tsd(**tls_keys, **{"tsd.network.tls.required": "true"})
    reader, writer = await telnet(daemon, b"version\n")
    assert await reader.read() == b""
    writer.close()
    await assert_tls_version(daemon, cert)


def client_hello(cert: Path) -> bytes:
    """The first flight of a real TLS client: its ClientHello record."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context(cert).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> float:
    """Seconds until the server closes the connection (at most ``seconds``)."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with contextlib.suppress(ConnectionResetError):
        assert await asyncio.wait_for(reader.read(), seconds) == b""
    return loop.time() - t0


@pytest.mark.slow
@pytest.mark.both_loops
async def test_a_client_hello_cut_short_is_closed_by_the_header_timeout(
    make_tsd: MakeTsd, certificate: tuple[Path, dict[str, str]]
) -> None:
    """Issue 25: such a connection was closed after asyncio's 60 s handshake timeout, not
    by tsd.network.header_timeout."""
    cert, tls_keys = certificate
    daemon = await make_tsd(**tls_keys, **{"tsd.network.header_timeout": "1"})
    hello = client_hello(cert)
    reader, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
    writer.write(hello[: len(hello) // 2])  # 0x16 and half a ClientHello, then nothing
    await writer.drain()
    assert await closed_within(reader, 10) < 5
    collected = {(s.name, s.tag): s.value for s in daemon.registry.collect()}
    assert collected[("connectionmgr.connections", ("type", "timeout"))] == 1
    writer.close()
    # A handshake that completes but is followed by nothing: the same deadline, from the
    # connection on (not a new one after the handshake).
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", daemon.port, ssl=client_context(cert)
    )
    await asyncio.sleep(0.5)
    await closed_within(reader, 10)
    assert loop.time() - t0 < 1.9
    writer.close()
    # A client that completes its handshake and its command in time is served.
    await assert_tls_version(daemon, cert)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        pytest.param({"tsd.core.authentication.enable": "true"}, "no file is set", id="no_file"),
        pytest.param(
            {
                "tsd.core.authentication.enable": "true",
                "tsd.core.authentication.users_file": "{bad}",
            },
            "line 1",
            id="bad_line",
        ),
        pytest.param({"tsd.network.tls.cert": "/nonexistent.pem"}, "cannot load", id="no_cert"),
    ],
)
async def test_bad_security_settings_stop_the_start(
    tmp_path: Path, keys: dict[str, str], message: str
) -> None:
    bad = tmp_path / "bad"
    bad.write_text("reader read plaintext-secret\n")
    values = {
        "tsd.network.bind": "127.0.0.1",
        "tsd.network.port": "0",
        "tsd.storage.data_dir": str(tmp_path / "data"),
        **{k: v.format(bad=bad) for k, v in keys.items()},
    }
    daemon = Daemon(build_config(values))
    try:
        with pytest.raises(ConfigError, match=message):
            await daemon.start()
    finally:
        await daemon.stop()


def test_users_file_secret_is_only_a_digest() -> None:
    from tsd.server.credentials import Credentials, Right

    secret = secrets.token_hex(16)
    text = f"ops read,write sha256:{hashlib.sha256(secret.encode()).hexdigest()}\n"
    credentials = Credentials.parse(text)
    principal = credentials.authorization(
        "Basic " + base64.b64encode(f"ops:{secret}".encode()).decode()
    )
    assert principal is not None
    assert principal.rights == Right.READ | Right.WRITE
    assert secret not in repr(vars(credentials))


def test_an_opentsdb_plugin_class_is_refused_at_load() -> None:
    """An opentsdb.conf naming a Java plugin must not start an open TSD by mistake."""
    keys = {
        "tsd.core.authentication.enable": "true",
        "tsd.core.authentication.plugin": "net.opentsdb.auth.SomePlugin",
    }
    with pytest.raises(ConfigError, match="built-in authentication"):
        build_config(keys)
    assert build_config({**keys, "tsd.core.authentication.plugin": ""}).auth.enable
