"""What upload.py and download.py share: the flags that reach the account,
an SDK container client that counts the requests it sends, and the run over
the files with its one JSON report on stdout:

  {"ok": bool, "seconds": float, "bytes": int, "retries": int, "requests": int,
   "files": [{"path", "blob", "bytes", "status", "error"?}]}

Each script brings only what it does to one file.
"""

import argparse
import concurrent.futures
import json
import sys
import threading
import time

from azure.storage.blob import BlobServiceClient


def parser(doc: str) -> argparse.ArgumentParser:
    """The flags both scripts take; each adds its own."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--endpoint", required=True, help="http://HOST:PORT/ACCOUNT")
    p.add_argument("--account", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--container", required=True)
    p.add_argument("--prefix", default="", help="blob name prefix (ends with /)")
    p.add_argument("--parallel", type=int, default=4, help="files at once")
    p.add_argument("--max-concurrency", type=int, default=8, help="requests per file")
    return p


class Counted:
    """The container of --endpoint and --container, with a count of every HTTP
    request the SDK sends (retries included) and of its retries."""

    def __init__(self, a: argparse.Namespace):
        self.retries = 0
        self.requests = 0
        self._lock = threading.Lock()
        service = BlobServiceClient(
            account_url=a.endpoint,
            credential={"account_name": a.account, "account_key": a.key},
            retry_hook=self._on_retry,
            raw_request_hook=self._on_request,
        )
        self.container = service.get_container_client(a.container)

    def _on_retry(self, *_args, **_kwargs):
        with self._lock:
            self.retries += 1

    def _on_request(self, *_args, **_kwargs):
        with self._lock:
            self.requests += 1


def run(a: argparse.Namespace, counted: Counted, one, items, done: str) -> int:
    """`one` over `items`, --parallel at once; prints the report and returns the
    exit status (0 when every file's status is `done`)."""
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.parallel)) as pool:
        files = list(pool.map(one, items))
    seconds = time.monotonic() - t0
    ok = all(f["status"] == done for f in files)
    total = sum(f["bytes"] for f in files if f["status"] == done)
    json.dump(
        {
            "ok": ok,
            "seconds": seconds,
            "bytes": total,
            "retries": counted.retries,
            "requests": counted.requests,
            "files": files,
        },
        sys.stdout,
    )
    sys.stdout.write("\n")
    return 0 if ok else 1
