"""Instance metadata (IMDS) stand-in for one rehearsal VM: listens on
169.254.169.254:80 inside that VM's network namespace only (the address is on
the namespace's loopback), and answers the managed-identity token request
the way Azure's IMDS does (GET /metadata/identity/oauth2/token with
`Metadata: true`, api-version and resource; 400 without the header or with
X-Forwarded-For, as IMDS refuses proxied requests).

The token is a JWT for that VM's system-assigned identity: iss
https://sts.windows.net/TENANT/, aud = the requested resource, oid = the VM's
principal id, xms_mirid = its resource id, iat/nbf/exp. Azurite's
`--oauth basic` checks issuer, audience and lifetime but no signature; the
token is signed (HS256, a key made for this run) so it is well formed.

Every request is appended to the log (one JSON line), so the rehearsal can
say which identity asked for what.

Usage: python3 imds.py --vm NAME --principal UUID --tenant UUID --key HEX --log FILE [--lifetime-s N]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(claims: dict, key: bytes) -> str:
    header = {"typ": "JWT", "alg": "HS256", "kid": "rehearsal"}
    signing = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
    sig = hmac.new(key, signing.encode(), hashlib.sha256).digest()
    return signing + "." + b64url(sig)


def token_for(args, resource: str, now: int) -> dict:
    claims = {
        "aud": resource,
        "iss": f"https://sts.windows.net/{args.tenant}/",
        "iat": now, "nbf": now, "exp": now + args.lifetime_s,
        "oid": args.principal, "sub": args.principal, "tid": args.tenant,
        "appid": args.principal, "idtyp": "app",
        "xms_mirid": args.resource_id,
    }
    return {
        "access_token": jwt(claims, bytes.fromhex(args.key)),
        "client_id": args.principal,
        "expires_in": str(args.lifetime_s),
        "expires_on": str(now + args.lifetime_s),
        "ext_expires_in": str(args.lifetime_s),
        "not_before": str(now),
        "resource": resource,
        "token_type": "Bearer",
    }


def handler(args):
    class Imds(BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            q = dict(urllib.parse.parse_qsl(url.query))
            entry = {"t": time.time(), "vm": args.vm, "path": url.path, "resource": q.get("resource")}
            if self.headers.get("Metadata", "").lower() != "true" or self.headers.get("X-Forwarded-For"):
                entry["status"] = 400
                self.reply(400, {"error": "invalid_request", "error_description": "Required metadata header not specified"})
            elif url.path != "/metadata/identity/oauth2/token" or "api-version" not in q:
                entry["status"] = 404 if url.path != "/metadata/identity/oauth2/token" else 400
                self.reply(entry["status"], {"error": "invalid_request", "error_description": "bad request"})
            elif not q.get("resource"):
                entry["status"] = 400
                self.reply(400, {"error": "invalid_request", "error_description": "Required audience parameter not specified"})
            else:
                entry["status"] = 200
                self.reply(200, token_for(args, q["resource"], int(time.time())))
            with open(args.log, "a") as f:
                f.write(json.dumps(entry) + "\n")

    return Imds


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--vm", required=True)
    p.add_argument("--principal", required=True)
    p.add_argument("--tenant", required=True)
    p.add_argument("--resource-id", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--lifetime-s", type=int, default=3600)
    p.add_argument("--listen", default="169.254.169.254:80")
    args = p.parse_args()
    host, port = args.listen.rsplit(":", 1)
    ThreadingHTTPServer((host, int(port)), handler(args)).serve_forever()


if __name__ == "__main__":
    main()
