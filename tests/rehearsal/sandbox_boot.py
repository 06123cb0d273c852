#!/usr/bin/env python3
"""Writes the relay VM's files where cloud-init would, for the sandbox check
run on its own (tests/rehearsal/sandbox.sh without a rehearsal's recording).

The cloud-init comes from terraform/templates/cloud-init-relay.yaml.tftpl
through tests/terraform's renderer (the one the offline checks use: the
templatefile() arguments read from compute.tf, variables at their defaults),
with the two addresses that exist only after `terraform apply` given on the
command line: the uploads account (here Azurite) and the artifacts container.
Its `write_files` are written under ROOT with their permissions; nothing
else of cloud-init runs here (users and units are sandbox.sh's business).

    sandbox_boot.py ROOT STORAGE_URL ARTIFACTS_URL

Needs python-hcl2 and PyYAML: run it with the venv tests/terraform/check.sh
makes (${TF_VENV:-/tmp/blob-relay-tfvenv}).
"""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "terraform"))

import yaml  # noqa: E402
from test_cloud_init import evaluate  # noqa: E402
from tfmodel import TERRAFORM, Module, render_template, templatefile_calls  # noqa: E402

TEMPLATE = "cloud-init-relay.yaml.tftpl"


def render(storage_url: str, artifacts_url: str) -> dict:
    module = Module()
    call = templatefile_calls(module)[TEMPLATE]
    values = {k: evaluate(module, v) for k, v in call.items()}
    # The apply-time addresses; everything else as Terraform would pass it.
    for key in ("storage_url", "artifacts_url"):
        if key not in values:
            raise SystemExit(f"sandbox_boot: {TEMPLATE} no longer takes {key}")
    values["storage_url"] = storage_url
    values["artifacts_url"] = artifacts_url
    text = render_template((TERRAFORM / "templates" / TEMPLATE).read_text(), values)
    return yaml.safe_load(text)


def write_files(cfg: dict, root: Path) -> None:
    for entry in cfg["write_files"]:
        dest = root / entry["path"].lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        content = entry["content"]
        data = base64.b64decode(content) if entry.get("encoding") == "b64" else content.encode()
        dest.write_bytes(data)
        os.chmod(dest, int(entry.get("permissions", "0644"), 8))
        print(f"  {entry['path']} ({entry.get('permissions', '0644')})")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    root, storage_url, artifacts_url = argv
    write_files(render(storage_url, artifacts_url), Path(root))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
