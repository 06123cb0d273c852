#!/usr/bin/env python3
"""wanbench's python-sdk row: upload files with the official azure-storage-blob SDK.

Why a script: it is the baseline many users have (the SDK's own chunking,
retries and `max_concurrency`), run as its own process inside the site
namespace so the bench measures it like relay-client (CPU, RSS, wall time).

Prints one JSON object on stdout:
  {"ok": bool, "seconds": float, "bytes": int, "retries": int, "requests": int,
   "files": [{"path", "blob", "bytes", "status", "error"?}]}
Time covers the first request to the last commit (Put Blob or Put Block List),
as upload_blob returns only after the commit; the SDK does no end-to-end
hash check, the bench verifies by downloading.
"""

import argparse
import concurrent.futures
import json
import os
import sys
import threading
import time

from azure.storage.blob import BlobServiceClient


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", required=True, help="http://HOST:PORT/ACCOUNT")
    p.add_argument("--account", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--container", required=True)
    p.add_argument("--prefix", default="", help="blob name prefix (ends with /)")
    p.add_argument("--parallel", type=int, default=4, help="files at once")
    p.add_argument("--max-concurrency", type=int, default=8, help="requests per file")
    p.add_argument("paths", nargs="+", help="files; blob = prefix + base name")
    a = p.parse_args()

    retries = 0
    requests = 0
    lock = threading.Lock()

    def on_retry(*_args, **_kwargs):
        nonlocal retries
        with lock:
            retries += 1

    def on_request(*_args, **_kwargs):
        # Every HTTP request the SDK sends, retries included.
        nonlocal requests
        with lock:
            requests += 1

    service = BlobServiceClient(
        account_url=a.endpoint,
        credential={"account_name": a.account, "account_key": a.key},
        retry_hook=on_retry,
        raw_request_hook=on_request,
    )
    container = service.get_container_client(a.container)

    def upload(path: str) -> dict:
        blob = a.prefix + os.path.basename(path)
        size = os.path.getsize(path)
        try:
            with open(path, "rb") as f:
                container.upload_blob(
                    blob, f, length=size, overwrite=False, max_concurrency=a.max_concurrency
                )
            return {"path": path, "blob": blob, "bytes": size, "status": "committed"}
        except Exception as e:  # report per file, like relay-client --json
            return {"path": path, "blob": blob, "bytes": size, "status": "failed", "error": str(e)}

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.parallel)) as pool:
        files = list(pool.map(upload, a.paths))
    seconds = time.monotonic() - t0
    ok = all(f["status"] == "committed" for f in files)
    total = sum(f["bytes"] for f in files if f["status"] == "committed")
    json.dump(
        {
            "ok": ok,
            "seconds": seconds,
            "bytes": total,
            "retries": retries,
            "requests": requests,
            "files": files,
        },
        sys.stdout,
    )
    sys.stdout.write("\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
