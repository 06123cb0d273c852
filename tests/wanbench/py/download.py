#!/usr/bin/env python3
"""wanbench's python-sdk-dl row: download blobs with the official azure-storage-blob SDK.

The download counterpart of upload.py: the baseline many users have (the
SDK's own ranged reads, retries and `max_concurrency`), run as its own
process inside the site namespace.

Prints one JSON object on stdout, as upload.py does, with status
"downloaded":
  {"ok": bool, "seconds": float, "bytes": int, "retries": int, "requests": int,
   "files": [{"path", "blob", "bytes", "status", "error"?}]}
Each blob PREFIX + NAME is written to TO/NAME. The SDK does no end-to-end
hash check; the bench hashes the files it wrote.
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
    p.add_argument("--to", required=True, help="directory the files are written to")
    p.add_argument("--parallel", type=int, default=4, help="files at once")
    p.add_argument("--max-concurrency", type=int, default=8, help="requests per file")
    p.add_argument("names", nargs="+", help="blob names below the prefix")
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
    os.makedirs(a.to, exist_ok=True)

    def download(name: str) -> dict:
        blob = a.prefix + name
        path = os.path.join(a.to, name)
        try:
            with open(path, "wb") as f:
                size = container.download_blob(blob, max_concurrency=a.max_concurrency).readinto(f)
            return {"path": path, "blob": blob, "bytes": size, "status": "downloaded"}
        except Exception as e:  # report per file, like relay-client --json
            return {"path": path, "blob": blob, "bytes": 0, "status": "failed", "error": str(e)}

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.parallel)) as pool:
        files = list(pool.map(download, a.names))
    seconds = time.monotonic() - t0
    ok = all(f["status"] == "downloaded" for f in files)
    total = sum(f["bytes"] for f in files if f["status"] == "downloaded")
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
