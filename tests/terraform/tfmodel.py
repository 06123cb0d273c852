"""Offline model of terraform/: parses every .tf file with python-hcl2 and
renders the cloud-init templates the way Terraform's templatefile() does.

No providers, no network: `terraform validate` cannot run here, so these
helpers let the tests assert the invariants of docs/DEPLOY.md directly on
the source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import hcl2

REPO = Path(__file__).resolve().parents[2]
TERRAFORM = REPO / "terraform"
DEPLOY = REPO / "deploy"


@dataclass(frozen=True)
class Expr:
    """An HCL expression kept as source text, e.g. Expr("var.relay_port")."""

    text: str


def _unquote(s: str) -> str:
    # python-hcl2 keeps string literals quoted ("\"Udp\"") and wraps
    # expressions in ${...}.
    if len(s) >= 2 and s[0] == '"' and s[-1] == '"':
        return s[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return s


def normalize(value):
    """hcl2 output -> plain Python: literals unquoted, expressions as Expr,
    parser bookkeeping (__is_block__, __comments__) dropped."""
    if isinstance(value, dict):
        return {
            _unquote(k): normalize(v)
            for k, v in value.items()
            if k not in ("__is_block__", "__comments__")
        }
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, str):
        if value.startswith("${") and value.endswith("}") and not value.startswith('"'):
            return Expr(value[2:-1])
        return _unquote(value)
    return value


@dataclass
class Resource:
    type: str
    name: str
    body: dict
    file: str

    @property
    def address(self) -> str:
        return f"{self.type}.{self.name}"


class Module:
    def __init__(self, root: Path = TERRAFORM):
        self.root = root
        self.files = sorted(root.glob("*.tf"))
        self.parsed: dict[str, dict] = {}
        for f in self.files:
            with f.open() as fh:
                self.parsed[f.name] = normalize(hcl2.load(fh))

    def blocks(self, kind: str):
        for name, doc in self.parsed.items():
            for block in doc.get(kind, []):
                yield name, block

    def resources(self, rtype: str | None = None) -> list[Resource]:
        out = []
        for fname, block in self.blocks("resource"):
            for t, named in block.items():
                for n, body in named.items():
                    if rtype is None or t == rtype:
                        out.append(Resource(t, n, body, fname))
        return out

    def resource(self, rtype: str, name: str) -> Resource:
        for r in self.resources(rtype):
            if r.name == name:
                return r
        raise KeyError(f"{rtype}.{name}")

    def variables(self) -> dict[str, dict]:
        out = {}
        for _, block in self.blocks("variable"):
            out.update(block)
        return out

    def default(self, var: str):
        return self.variables()[var].get("default")

    def locals(self) -> dict:
        out = {}
        for _, block in self.blocks("locals"):
            out.update(block)
        return out

    def outputs(self) -> dict[str, dict]:
        out = {}
        for _, block in self.blocks("output"):
            out.update(block)
        return out

    def required_providers(self) -> dict[str, dict]:
        out = {}
        for _, block in self.blocks("terraform"):
            for rp in block.get("required_providers", []):
                out.update(rp)
        return out

    def source_text(self) -> str:
        return "\n".join(f.read_text() for f in self.files)


def resolve_var(module: Module, value):
    """Expr("var.x") -> the variable's default; literals unchanged."""
    if isinstance(value, Expr):
        m = re.fullmatch(r"var\.(\w+)", value.text.strip())
        if m:
            return module.default(m.group(1))
        m = re.fullmatch(r"tostring\(var\.(\w+)\)", value.text.strip())
        if m:
            return str(module.default(m.group(1)))
    return value


# --- templatefile() ----------------------------------------------------------

_INTERP = re.compile(r"(\$\$\{|%%\{|\$\{|%\{)")


class TemplateError(ValueError):
    pass


def _render_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (int, float, str)):
        return str(value)
    raise TemplateError(f"templatefile cannot interpolate a {type(value).__name__}")


def render_template(text: str, variables: dict) -> str:
    """Renders a Terraform template like templatefile(): `$${` and `%%{` are
    escapes for a literal `${` / `%{`; `${name}` (spaces allowed) is replaced
    by the variable's string form. Any other interpolation or a `%{`
    directive raises TemplateError: the project's templates use only plain
    variables, so the renderer stays exact. A missing variable is an error,
    as in Terraform."""
    out = []
    pos = 0
    for m in _INTERP.finditer(text):
        if m.start() < pos:
            continue
        out.append(text[pos : m.start()])
        tok = m.group(1)
        if tok == "$${":
            out.append("${")
            pos = m.end()
            continue
        if tok == "%%{":
            out.append("%{")
            pos = m.end()
            continue
        if tok == "%{":
            raise TemplateError(f"template directive at offset {m.start()} is not supported")
        end = text.find("}", m.end())
        if end < 0:
            raise TemplateError(f"unterminated interpolation at offset {m.start()}")
        expr = text[m.end() : end].strip()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", expr):
            raise TemplateError(f"only plain variables are supported, found ${{{expr}}}")
        if expr not in variables:
            raise TemplateError(f"vars map does not contain key {expr!r}")
        out.append(_render_value(variables[expr]))
        pos = end + 1
    out.append(text[pos:])
    return "".join(out)


def template_placeholders(text: str) -> set[str]:
    names = set()
    for m in re.finditer(r"(?<!\$)\$\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}", text):
        names.add(m.group(1))
    return names


def templatefile_calls(module: Module) -> dict[str, dict[str, str]]:
    """Finds templatefile("${path.module}/templates/NAME", { k = v ... }) in
    the raw .tf source and returns {NAME: {k: source text of v}}."""
    calls = {}
    for f in module.files:
        src = f.read_text()
        for m in re.finditer(r'templatefile\("\$\{path\.module\}/templates/([^"]+)",\s*\{', src):
            depth = 1
            i = m.end()
            while depth:
                c = src[i]
                depth += c == "{"
                depth -= c == "}"
                i += 1
            body = src[m.end() : i - 1]
            args = {}
            for line in body.splitlines():
                am = re.match(r"\s*([A-Za-z_]\w*)\s*=\s*(.+?)\s*$", line)
                if am:
                    args[am.group(1)] = am.group(2)
            calls[m.group(1)] = args
    return calls
