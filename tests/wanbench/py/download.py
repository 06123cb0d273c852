#!/usr/bin/env python3
"""wanbench's python-sdk-dl row: download blobs with the official azure-storage-blob SDK.

The download counterpart of upload.py: the baseline many users have (the
SDK's own ranged reads, retries and `max_concurrency`), run as its own
process inside the site namespace.

Prints one JSON object on stdout (its shape: sdk_run.py), status "downloaded".
Each blob PREFIX + NAME is written to TO/NAME. The SDK does no end-to-end
hash check; the bench hashes the files it wrote.
"""

import os
import sys

import sdk_run


def main() -> int:
    p = sdk_run.parser(__doc__)
    p.add_argument("--to", required=True, help="directory the files are written to")
    p.add_argument("names", nargs="+", help="blob names below the prefix")
    a = p.parse_args()
    counted = sdk_run.Counted(a)
    os.makedirs(a.to, exist_ok=True)

    def download(name: str) -> dict:
        blob = a.prefix + name
        path = os.path.join(a.to, name)
        try:
            with open(path, "wb") as f:
                size = counted.container.download_blob(
                    blob, max_concurrency=a.max_concurrency
                ).readinto(f)
            return {"path": path, "blob": blob, "bytes": size, "status": "downloaded"}
        except Exception as e:  # report per file, like relay-client --json
            return {"path": path, "blob": blob, "bytes": 0, "status": "failed", "error": str(e)}

    return sdk_run.run(a, counted, download, a.names, "downloaded")


if __name__ == "__main__":
    sys.exit(main())
