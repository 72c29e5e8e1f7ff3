"""aiohttp's default TLS contexts load no CA store at import, and verify as before when used
(core/tls.py): each case in a fresh interpreter, the package imported before aiohttp as a
sidecar starts, against an HTTPS server whose private CA ``SSL_CERT_FILE`` names or not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tls import make_tls

_CLIENT = """\
import asyncio, json, ssl, sys
import priority_pubsub
import aiohttp, aiohttp.connector as connector
from aiohttp import web

async def main():
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain({cert!r}, {key!r})
    app = web.Application()
    app.router.add_get("/", lambda request: web.Response(text="ok"))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    verified, unverified = connector._SSL_CONTEXT_VERIFIED, connector._SSL_CONTEXT_UNVERIFIED
    seen = {{"kind": type(verified).__name__, "mode": int(verified.verify_mode),
             "hostname": verified.check_hostname,
             "cas_at_import": [verified.cert_store_stats()["x509_ca"],
                               unverified.cert_store_stats()["x509_ca"]]}}
    async with aiohttp.ClientSession() as session:
        try:
            async with session.get(f"https://127.0.0.1:{{port}}/") as response:
                seen["verified"] = await response.text()
        except aiohttp.ClientConnectorCertificateError:
            seen["verified"] = "refused"
        async with session.get(f"https://127.0.0.1:{{port}}/", ssl=False) as response:
            seen["unverified"] = await response.text()
    seen["cas_after"] = verified.cert_store_stats()["x509_ca"]
    await runner.cleanup()
    print(json.dumps(seen))

asyncio.run(main())
"""


def _run(tmp_path: Path, *, trusted: bool) -> dict[str, object]:
    tls = make_tls(tmp_path / "tls")
    env = {**os.environ, "SSL_CERT_FILE": str(tls.ca if trusted else tmp_path / "none.pem"),
           "SSL_CERT_DIR": str(tmp_path / "no-certs")}
    done = subprocess.run(
        [sys.executable, "-c", _CLIENT.format(cert=str(tls.cert), key=str(tls.key))],
        capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("trusted", [True, False], ids=["ca-trusted", "ca-unknown"])
def test_the_default_contexts_load_no_ca_at_import_and_verify_when_used(
    tmp_path: Path, trusted: bool
) -> None:
    seen = _run(tmp_path, trusted=trusted)
    assert seen["kind"] == "CaOnFirstUse"
    assert seen["mode"] == 2  # CERT_REQUIRED
    assert seen["hostname"] is True
    assert seen["cas_at_import"] == [0, 0]
    assert seen["verified"] == ("ok" if trusted else "refused")
    assert seen["unverified"] == "ok"
    assert seen["cas_after"] == (1 if trusted else 0)
