#!/usr/bin/env python3
"""Stand-ins for the instance metadata service's managed-identity token
endpoint and for the artifacts container (which answers only that token),
for the sandbox check run on its own: the relay and deploy/blob-relay-fetch.sh
get their tokens as on Azure, so their recordings include that path. The
token is an unsigned JWT with the claims Azurite's `--oauth basic` checks
(issuer, audience, times); it tests nothing about identity (the rehearsal's
identity stage does).

    sandbox_imds.py IMDS_ADDR:PORT BLOBS_ADDR:PORT DIR READY_FILE [CERT KEY]

GET /metadata/identity/oauth2/token (header Metadata: true) on IMDS_ADDR
answers a token; GET /CONTAINER/NAME on BLOBS_ADDR with `Authorization:
Bearer TOKEN` and `x-ms-version` answers DIR/NAME (404 if absent, 403
without the token), over HTTPS with CERT and KEY when given (IMDS is plain
HTTP, as on Azure). READY_FILE is created once both listen.
"""

from __future__ import annotations

import base64
import json
import secrets
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_token() -> str:
    now = int(time.time())
    claims = {
        "aud": "https://storage.azure.com",
        "iss": "https://sts.windows.net/00000000-0000-0000-0000-000000000000/",
        "iat": now - 60,
        "nbf": now - 60,
        "exp": now + 86400,
        "oid": secrets.token_hex(8),
    }
    head = {"alg": "none", "typ": "JWT"}
    return ".".join([b64url(json.dumps(head).encode()), b64url(json.dumps(claims).encode()),
                     b64url(b"unsigned")])


TOKEN = make_token()


class Imds(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path != "/metadata/identity/oauth2/token" or self.headers.get("Metadata") != "true":
            self.send_error(400)
            return
        now = int(time.time())
        body = json.dumps(
            {
                "access_token": TOKEN,
                "expires_in": "3600",
                "expires_on": str(now + 3600),  # a string, as IMDS sends it
                "not_before": str(now),
                "resource": "https://storage.azure.com/",
                "token_type": "Bearer",
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def blobs_handler(root: Path):
    class Blobs(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != f"Bearer {TOKEN}" or not self.headers.get("x-ms-version"):
                self.send_error(403)
                return
            parts = urlsplit(self.path).path.strip("/").split("/")
            path = root / parts[-1]
            if len(parts) != 2 or not path.is_file():
                self.send_error(404)
                return
            body = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    return Blobs


def serve(addr: str, handler, tls: ssl.SSLContext | None = None) -> ThreadingHTTPServer:
    host, _, port = addr.rpartition(":")
    server = ThreadingHTTPServer((host, int(port)), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str]) -> int:
    if len(argv) not in (4, 6):
        print(__doc__, file=sys.stderr)
        return 2
    imds, blobs, root, ready = argv[:4]
    tls = None
    if len(argv) == 6:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(argv[4], argv[5])
    serve(imds, Imds)
    serve(blobs, blobs_handler(Path(root)), tls)
    Path(ready).touch()
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
