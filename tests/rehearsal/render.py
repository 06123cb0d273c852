"""Renders the relay's and the bench VM's cloud-init exactly as `terraform
apply` would: the templatefile() calls are read from the .tf files, their
arguments evaluated from the module's variables (terraform.tfvars.example,
then rehearsal.tfvars, then the variables' defaults), locals and deploy/
files, and the templates rendered by tests/terraform's renderer (the one the
offline tests use). Only values that exist after apply are given: the random
suffix of the account names (a fresh one per run, drawn under the
random_string resource's own rules) and the relay's public address (the
rehearsal balancer's).

Usage (module): rendered(apply_values) -> {"relay": text, "bench": text}.
Usage (CLI): python3 render.py OUT_DIR LB_ADDRESS  (writes *.yaml and values.json)
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import string
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "terraform"))

import hcl2  # noqa: E402

from tfmodel import TERRAFORM, Expr, Module, normalize, render_template, templatefile_calls  # noqa: E402

TEMPLATES = {"relay": "cloud-init-relay.yaml.tftpl", "bench": "cloud-init-bench.yaml.tftpl"}
TFVARS = [TERRAFORM / "terraform.tfvars.example", HERE / "rehearsal.tfvars"]


class EvalError(ValueError):
    pass


def tfvars() -> dict:
    """Variables as `terraform apply -var-file=...example -var-file=rehearsal.tfvars`
    would see them (later files win)."""
    out: dict = {}
    for f in TFVARS:
        with f.open() as fh:
            out.update(normalize(hcl2.load(fh)))
    return out


def random_suffix(module: Module) -> str:
    """What random_string.suffix would produce: its length and character classes
    read from the resource."""
    body = module.resource("random_string", "suffix").body
    alphabet = ""
    if body.get("lower", True):
        alphabet += string.ascii_lowercase
    if body.get("upper", True):
        alphabet += string.ascii_uppercase
    if body.get("numeric", True):
        alphabet += string.digits
    if body.get("special", True):
        raise EvalError("random_string.suffix with special characters: not a valid account name")
    return "".join(secrets.choice(alphabet) for _ in range(int(body["length"])))


class Evaluator:
    """Evaluates the expression shapes the templatefile() arguments use; any
    other shape is an error naming it (extend this, never guess)."""

    def __init__(self, module: Module, variables: dict, applied: dict):
        self.module = module
        self.vars = variables
        self.applied = applied  # apply-time values: {"random_string.suffix.result": ..., "local.relay_public_ip": ...}
        self.locals = module.locals()

    def var(self, name: str):
        if name in self.vars:
            return self.vars[name]
        spec = self.module.variables().get(name)
        if spec is None:
            raise EvalError(f"no variable {name}")
        return spec.get("default")

    def expr(self, text: str):
        text = text.strip()
        if text in self.applied:
            return self.applied[text]
        if len(text) >= 2 and text[0] == text[-1] == '"':
            return re.sub(r"\$\{([^}]+)\}", lambda m: str(self.expr(m.group(1))), text[1:-1])
        if m := re.fullmatch(r"var\.(\w+)", text):
            return self.var(m.group(1))
        if m := re.fullmatch(r"local\.(\w+)", text):
            value = self.locals.get(m.group(1))
            if value is None:
                raise EvalError(f"no local {m.group(1)}")
            if isinstance(value, Expr):
                return self.expr(value.text)
            if isinstance(value, str):
                # A string local keeps its ${...} parts: evaluate them too.
                return self.expr(f'"{value}"')
            return value
        if m := re.fullmatch(r'filebase64\("\$\{path\.module\}/(.+)"\)', text):
            return base64.b64encode((TERRAFORM / m.group(1)).read_bytes()).decode()
        if m := re.fullmatch(r'local\.entra_enabled \? .+ : "([^"]*)"', text, re.S):
            # Entra ID sign-in needs a tenant to ask: the rehearsal runs with it off.
            if self.var("entra_upload_containers"):
                raise EvalError("the rehearsal cannot sign in with Entra ID: leave entra_upload_containers empty")
            return m.group(1)
        raise EvalError(f"rehearsal cannot evaluate {text!r}: extend tests/rehearsal/render.py")


def probe(module: Module, ev: Evaluator) -> dict:
    """The azurerm_lb_probe the balancer plays, with its values evaluated."""
    body = module.resource("azurerm_lb_probe", "relay_health").body

    def value(v):
        return ev.expr(v.text) if isinstance(v, Expr) else v

    return {
        "protocol": value(body["protocol"]),
        "port": int(value(body["port"])),
        "path": value(body["request_path"]),
        "interval_s": int(value(body["interval_in_seconds"])),
        "threshold": int(value(body["number_of_probes"])),
    }


def rendered(lb_address: str, suffix: str | None = None) -> tuple[dict, dict]:
    """({role: cloud-init text}, the values used) for this run."""
    module = Module()
    variables = tfvars()
    suffix = suffix or random_suffix(module)
    ev = Evaluator(module, variables, {
        "random_string.suffix.result": suffix,
        "local.relay_public_ip": lb_address,
    })
    calls = templatefile_calls(module)
    out = {}
    used = {"suffix": suffix, "tfvars": {k: v for k, v in variables.items() if isinstance(v, (str, int, float, list))}}
    for role, name in TEMPLATES.items():
        args = {k: ev.expr(v) for k, v in calls[name].items()}
        text = (TERRAFORM / "templates" / name).read_text()
        out[role] = render_template(text, args)
        used[role] = {k: v for k, v in args.items() if not k.endswith("_b64")}
    used["values"] = {
        "storage_account": ev.expr("local.storage_account_name"),
        "artifacts_account": ev.expr("local.artifacts_account_name"),
        "relay_boot_container": ev.expr("local.relay_boot_container"),
        "bench_boot_container": ev.expr("local.bench_boot_container"),
        "container": ev.expr("var.container_name"),
        "relay_port": int(ev.expr("var.relay_port")),
        "health_port": int(ev.expr("var.health_port")),
        "relay_count": int(ev.expr("var.relay_count")),
        "vnet_address_space": ev.expr("var.vnet_address_space"),
        "tokens": ev.expr("var.tokens"),
        "download_containers": ev.expr("var.download_containers"),
        "probe": probe(module, ev),
    }
    return out, used


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    texts, used = rendered(argv[2])
    for role, text in texts.items():
        (out / f"cloud-init-{role}.yaml").write_text(text)
    (out / "values.json").write_text(json.dumps(used, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
