#!/usr/bin/env python3
"""wanbench's python-sdk row: upload files with the official azure-storage-blob SDK.

Why a script: it is the baseline many users have (the SDK's own chunking,
retries and `max_concurrency`), run as its own process inside the site
namespace so the bench measures it like relay-client (CPU, RSS, wall time).

Prints one JSON object on stdout (its shape: sdk_run.py), status "committed".
Time covers the first request to the last commit (Put Blob or Put Block List),
as upload_blob returns only after the commit; the SDK does no end-to-end
hash check, the bench verifies by downloading.
"""

import os
import sys

import sdk_run


def main() -> int:
    p = sdk_run.parser(__doc__)
    p.add_argument("paths", nargs="+", help="files; blob = prefix + base name")
    a = p.parse_args()
    counted = sdk_run.Counted(a)

    def upload(path: str) -> dict:
        blob = a.prefix + os.path.basename(path)
        size = os.path.getsize(path)
        try:
            with open(path, "rb") as f:
                counted.container.upload_blob(
                    blob, f, length=size, overwrite=False, max_concurrency=a.max_concurrency
                )
            return {"path": path, "blob": blob, "bytes": size, "status": "committed"}
        except Exception as e:  # report per file, like relay-client --json
            return {"path": path, "blob": blob, "bytes": size, "status": "failed", "error": str(e)}

    return sdk_run.run(a, counted, upload, a.paths, "committed")


if __name__ == "__main__":
    sys.exit(main())
