#!/usr/bin/env python3
"""Snapshot of the azurerm provider's argument names, read from its Go source.

terraform cannot download providers here, so `terraform validate` cannot tell
us that an argument was renamed. This script reads the schema maps of the
resource types that terraform/ uses straight from the provider's source at
given tags and writes, for each tag, every argument and nested block with its
required / computed-only / ForceNew flags:

    python3 tests/terraform/azurerm_schema.py --repo PROVIDER_GIT_DIR \\
        [--tag v4.77.0 --tag v4.81.0] [--out tests/terraform/azurerm_schema.json] \\
        [--other tls=DIR --other random=DIR --other local=DIR --other time=DIR]

PROVIDER_GIT_DIR is a clone (bare or not) of
github.com/hashicorp/terraform-provider-azurerm. Without --tag the floor of
terraform/versions.tf and the newest 4.x tag in the clone are used.
test_schema.py then fails on any argument or block in terraform/*.tf that
one of the snapshot's versions does not have, and on a required argument
that is missing.

--other adds the plugin-framework providers (tls, random, local, time) at
the floor of their pins and their newest release of the same major version
(their schema.Schema{Attributes/Blocks} literals).

The azurerm reader understands the shapes the provider uses for these resources:
schema map literals, `Elem: &pluginsdk.Resource{Schema: ...}`, helper
functions returning a *Schema or a schema map (in the same package, another
internal package or vendored go-azure-helpers), typed resources'
Arguments(), and additions or removals under `if !features.FivePointOh()` /
`if features.FivePointOh()` (4.x: FivePointOh() is false). Anything else
raises an error naming the file, instead of guessing: extend the reader.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from go_source import (  # noqa: F401  (SchemaError, Source, active_in_4x: for test_schema.py)
    CALL,
    MAP_LIT,
    MODULE,
    RESOURCE_LIT,
    SCHEMA_LIT,
    _skip,
    active_in_4x,
    close_of,
    fields,
    flag,
    Func,
    heads,
    SchemaError,
    Source,
    split_top,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


class Evaluator:
    def __init__(self, src: Source):
        self.src = src

    # A node: {"args": {name: {"required": bool, "computed_only": bool}},
    #          "blocks": {name: {"required": bool, "node": node}}}

    def schema_map(self, ctx: Func, expr: str) -> dict:
        """A map[string]*Schema given as a literal, a call or an IIFE."""
        expr = expr.strip()
        if m := MAP_LIT.match(expr):
            lit = expr[m.end() :]
            return self._map_literal(ctx, lit)
        if m := re.match(r"^func\s*\(\)\s*map\[string\]\*(?:pluginsdk|schema)\.Schema\s*(?=\{)", expr):
            j = m.end()
            end = close_of(expr, j)
            inline = Func(ctx.file, None, f"{ctx.name}.<iife>", expr[j : end + 1])
            return self.map_func(inline)
        if m := CALL.match(expr):
            return self.map_func(self.src.resolve_call(ctx, m.group(1)))
        if re.fullmatch(r"\w+", expr):
            node = self.schema_map(ctx, self._variable(ctx, expr))
            self._modifications(ctx, expr, node, through_elem=False)
            return node
        raise SchemaError(f"{ctx}: cannot read schema map {expr[:80]!r}")

    def _map_literal(self, ctx: Func, lit: str) -> dict:
        node = {"args": {}, "blocks": {}}
        for part in split_top(lit[1:-1]):
            m = re.match(r'^"([a-z0-9_]+)"\s*:\s*(.*)$', part, re.S)
            if not m:
                raise SchemaError(f"{ctx}: unexpected schema entry {part[:80]!r}")
            self._add(node, ctx, m.group(1), m.group(2))
        return node

    def _add(self, node: dict, ctx: Func, name: str, expr: str):
        kind, info = self.schema(ctx, expr)
        node["args"].pop(name, None)
        node["blocks"].pop(name, None)
        node[kind][name] = info

    def schema(self, ctx: Func, expr: str) -> tuple[str, dict]:
        """One *Schema: ("args", flags) or ("blocks", {required, node})."""
        expr = expr.strip()
        if m := SCHEMA_LIT.match(expr):
            expr = expr[m.end() :]
        if expr.startswith("{"):
            f = fields(expr)
            required, optional, computed = (flag(f.get(k)) for k in ("Required", "Optional", "Computed"))
            try:
                force_new = flag(f.get("ForceNew"))
            except SchemaError:
                force_new = None  # depends on a helper's parameter: unknown
            elem = f.get("Elem", "")
            if m := RESOURCE_LIT.match(elem):
                return "blocks", {"required": required, "force_new": force_new,
                                  "node": self.resource(ctx, elem[m.end() :])}
            if elem and (m := CALL.match(elem)):
                fn = self.src.resolve_call(ctx, m.group(1))
                ret = self.returned(fn)
                if RESOURCE_LIT.match(ret[0]):
                    return "blocks", {"required": required, "force_new": force_new,
                                      "node": self.resource(fn, RESOURCE_LIT.sub("", ret[0]))}
            return "args", {"required": required, "force_new": force_new,
                            "computed_only": computed and not optional and not required}
        if m := CALL.match(expr):
            fn = self.src.resolve_call(ctx, m.group(1)).bind(split_top(m.group(2)))
            return self.schema_func(fn)
        raise SchemaError(f"{ctx}: cannot read schema {expr[:80]!r}")

    def resource(self, ctx: Func, lit: str) -> dict:
        f = fields(lit)
        if "Schema" not in f:
            raise SchemaError(f"{ctx}: Resource without Schema")
        return self.schema_map(ctx, f["Schema"])

    def returned(self, fn: Func) -> list[str]:
        """Expressions of the function's top-level return statements."""
        out = []
        body = fn.body
        for m in re.finditer(r"\breturn\b", body):
            # Skip returns inside nested func literals (validators, ...).
            if any(re.search(r"\bfunc\b", h) for h in heads(body, m.start())[1:]):
                continue
            start = m.end()
            end = start
            while end < len(body) and body[end] not in "\n;":
                if body[end] in "{([":
                    end = close_of(body, end) + 1
                    continue
                k = _skip(body, end)
                end = k + 1 if k == end else k
            expr = body[start:end].strip()
            if expr and not expr.startswith(("nil", "fmt.", "err")):
                out.append(expr)
        if not out:
            raise SchemaError(f"{fn}: no return expression")
        return out

    def _variable(self, fn: Func, name: str) -> str:
        m = re.search(rf"\b{name}\s*:?=\s*", fn.body)
        if not m:
            raise SchemaError(f"{fn}: cannot find {name} :=")
        i = m.end()
        j = i
        while fn.body[j] not in "\n;":
            if fn.body[j] in "{([":
                j = close_of(fn.body, j) + 1
                continue
            j += 1
        return fn.body[i:j].strip()

    def _modifications(self, fn: Func, var: str, node: dict, through_elem: bool):
        """var["k"] = ..., var.Schema["k"] = ..., delete(var, "k"), ...Required = x."""
        prefix = rf"\b{var}" + (r"\.Elem\.\(\*(?:pluginsdk|schema)\.Resource\)\.Schema" if through_elem else r"(?:\.Schema)?")
        body = fn.body
        for m in re.finditer(prefix + r'\["([a-z0-9_]+)"\]\s*=\s*', body):
            if not active_in_4x(body, m.start()):
                continue
            i = m.end()
            j = i
            while j < len(body) and body[j] not in "\n;":
                if body[j] in "{([":
                    j = close_of(body, j) + 1
                    continue
                j += 1
            self._add(node, fn, m.group(1), body[i:j])
        for m in re.finditer(prefix + r'\["([a-z0-9_]+)"\]\.(Required|Optional|Computed)\s*=\s*(true|false)', body):
            if not active_in_4x(body, m.start()):
                continue
            name, attr, val = m.group(1), m.group(2), m.group(3) == "true"
            entry = node["args"].get(name) or node["blocks"].get(name)
            if entry is None:
                raise SchemaError(f"{fn}: {attr} of unknown {name}")
            if attr == "Required":
                entry["required"] = val
            elif name in node["args"] and val:
                entry["computed_only"] = False
        if not through_elem:
            for m in re.finditer(rf'\bdelete\(\s*{var}(?:\.Schema)?\s*,\s*"([a-z0-9_]+)"\s*\)', body):
                if active_in_4x(body, m.start()):
                    node["args"].pop(m.group(1), None)
                    node["blocks"].pop(m.group(1), None)

    def map_func(self, fn: Func) -> dict:
        (ret, *more) = self.returned(fn)
        if more and any(r != ret for r in more):
            raise SchemaError(f"{fn}: several different returns")
        if re.fullmatch(r"\w+", ret):
            node = self.schema_map(fn, self._variable(fn, ret))
            self._modifications(fn, ret, node, through_elem=False)
            return node
        return self.schema_map(fn, ret)

    def schema_func(self, fn: Func) -> tuple[str, dict]:
        rets = self.returned(fn)
        kinds = {}
        for ret in rets:
            if re.fullmatch(r"\w+", ret):
                kind, info = self.schema(fn, self._variable(fn, ret))
                if kind == "blocks":
                    self._modifications(fn, ret, info["node"], through_elem=True)
            else:
                kind, info = self.schema(fn, ret)
            kinds.setdefault(kind, []).append(info)
        if len(kinds) != 1:
            raise SchemaError(f"{fn}: returns both blocks and attributes")
        ((kind, infos),) = kinds.items()
        if kind == "args":
            return kind, infos[0]
        # Several returns (e.g. a helper with a bool parameter): the union.
        merged = infos[0]
        for other in infos[1:]:
            merge(merged["node"], other["node"])
        return kind, merged

    def resource_func(self, fn: Func) -> dict:
        (ret, *_) = self.returned(fn)
        var = None
        if re.fullmatch(r"\w+", ret):
            var = ret
            ret = self._variable(fn, ret)
        m = RESOURCE_LIT.match(ret)
        if not m:
            raise SchemaError(f"{fn}: does not return a Resource literal")
        node = self.resource(fn, ret[m.end() :])
        if var:
            self._modifications(fn, var, node, through_elem=False)
        return node


def merge(a: dict, b: dict):
    for kind in ("args", "blocks"):
        for k, v in b[kind].items():
            if k not in a[kind]:
                a[kind][k] = v
            elif kind == "blocks":
                merge(a[kind][k]["node"], v["node"])


# --- resource lookup ---------------------------------------------------------

def find_resource(src: Source, ev: Evaluator, rtype: str, data: bool = False) -> dict:
    reg_fn = "SupportedDataSources" if data else "SupportedResources"
    for d, files in src.by_dir.items():
        if not d.startswith("internal/services/"):
            continue
        for gf in files:
            if not gf.path.endswith("/registration.go"):
                continue
            fn = src.funcs.get((d, "Registration", reg_fn))
            if fn and (m := re.search(rf'"{rtype}"\s*:\s*(\w+)\(\)', fn.body)):
                return ev.resource_func(src.func(d, m.group(1)))
        # Typed resources: func (r T) ResourceType() string { return "azurerm_x" }
        for (fd, recv, name), fn in src.funcs.items():
            if fd == d and name == "ResourceType" and recv and re.search(rf'return\s+"{rtype}"', fn.body):
                if data != ("DataSource" in recv):
                    continue
                args = src.func(d, "Arguments", recv)
                return ev.map_func(args)
    raise SchemaError(f"{rtype}: not found")


def provider_schema(src: Source, ev: Evaluator) -> dict:
    fn = src.func("internal/provider", "azureProvider")
    m = re.search(r"\bSchema\s*:\s*(map\[string\]\*schema\.Schema\s*\{)", fn.body)
    if not m:
        raise SchemaError("provider: no Schema map in azureProvider")
    i = m.start(1)
    lit_start = fn.body.index("{", i)
    lit = fn.body[i : close_of(fn.body, lit_start) + 1]
    return ev.schema_map(fn, lit)


# --- plugin-framework providers (tls, random, local, time) ------------------

FW_ATTR = re.compile(r"^(?:schema|[a-z]+schema)\.(\w+Attribute)\s*(?=\{)")
FW_BLOCK = re.compile(r"^(?:schema|[a-z]+schema)\.(ListNestedBlock|SetNestedBlock|SingleNestedBlock)\s*(?=\{)")


class FrameworkEvaluator:
    """Schemas written with terraform-plugin-framework: schema.Schema{
    Attributes: map[string]schema.Attribute{...}, Blocks: ...}."""

    def __init__(self, src: Source):
        self.src = src

    def _expr(self, ctx: Func, expr: str) -> tuple[Func, str]:
        expr = expr.strip()
        if m := CALL.match(expr):
            fn = self.src.resolve_call(ctx, m.group(1))
            (ret, *_) = Evaluator(self.src).returned(fn)
            return self._expr(fn, ret)
        return ctx, expr

    def schema_lit(self, ctx: Func, expr: str) -> dict:
        ctx, expr = self._expr(ctx, expr)
        m = re.match(r"^(?:schema|[a-z]+schema)\.(?:Schema|NestedBlockObject|SingleNestedBlock)\s*(?=\{)", expr)
        if not m:
            raise SchemaError(f"{ctx}: cannot read framework schema {expr[:80]!r}")
        f = fields(expr[m.end():])
        node = {"args": {}, "blocks": {}}
        if "Attributes" in f:
            ctx2, attrs = self._expr(ctx, f["Attributes"])
            lit = attrs[attrs.index("{"):]
            for part in split_top(lit[1:-1]):
                am = re.match(r'^"([a-z0-9_]+)"\s*:\s*(.*)$', part, re.S)
                if not am:
                    raise SchemaError(f"{ctx2}: unexpected attribute entry {part[:80]!r}")
                c3, value = self._expr(ctx2, am.group(2))
                vm = FW_ATTR.match(value)
                if not vm:
                    raise SchemaError(f"{c3}: cannot read attribute {value[:80]!r}")
                af = fields(value[vm.end():])
                required, optional, computed = (af.get(k) == "true" for k in ("Required", "Optional", "Computed"))
                node["args"][am.group(1)] = {
                    "required": required,
                    "computed_only": computed and not optional and not required,
                    "force_new": "RequiresReplace" in af.get("PlanModifiers", ""),
                }
        if "Blocks" in f:
            ctx2, blocks = self._expr(ctx, f["Blocks"])
            lit = blocks[blocks.index("{"):]
            for part in split_top(lit[1:-1]):
                bm = re.match(r'^"([a-z0-9_]+)"\s*:\s*(.*)$', part, re.S)
                if not bm:
                    raise SchemaError(f"{ctx2}: unexpected block entry {part[:80]!r}")
                c3, value = self._expr(ctx2, bm.group(2))
                vm = FW_BLOCK.match(value)
                if not vm:
                    raise SchemaError(f"{c3}: cannot read block {value[:80]!r}")
                bf = fields(value[vm.end():])
                inner = bf["NestedObject"] if "NestedObject" in bf else value
                node["blocks"][bm.group(1)] = {
                    "required": False,
                    "force_new": "RequiresReplace" in bf.get("PlanModifiers", ""),
                    "node": self.schema_lit(c3, inner),
                }
        return node


def framework_resources(src: Source, prefix: str, types: set[str]) -> dict:
    out = {}
    for (d, recv, name), fn in src.funcs.items():
        if name != "Metadata" or not recv:
            continue
        m = re.search(r'resp\.TypeName\s*=\s*req\.ProviderTypeName\s*\+\s*"(\w+)"', fn.body)
        if not m or f"{prefix}{m.group(1)}" not in types:
            continue
        schema_fn = src.func(d, "Schema", recv)
        if "resource.SchemaRequest" not in schema_fn.file.text[: schema_fn.file.text.find(schema_fn.body)][-300:]:
            continue  # a data source with the same name
        sm = re.search(r"resp\.Schema\s*=\s*", schema_fn.body)
        if not sm:
            raise SchemaError(f"{schema_fn}: no resp.Schema =")
        i = sm.end()
        j = i
        while schema_fn.body[j] not in "\n;":
            if schema_fn.body[j] in "{([":
                j = close_of(schema_fn.body, j) + 1
                continue
            j += 1
        out[f"{prefix}{m.group(1)}"] = FrameworkEvaluator(src).schema_lit(schema_fn, schema_fn.body[i:j])
    missing = types - set(out)
    if missing:
        raise SchemaError(f"not found: {sorted(missing)}")
    return out


# --- inputs -----------------------------------------------------------------

def load_tag(git_dir: str, tag: str, paths: list[str] | None = None) -> dict[str, str]:
    paths = paths or ["internal", "vendor/github.com/hashicorp/go-azure-helpers/resourcemanager/commonschema"]
    tar = subprocess.run(["git", "-C", git_dir, "archive", "--format=tar", tag, *paths],
                         check=True, capture_output=True).stdout
    files = {}
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        for member in tf:
            if member.isfile() and member.name.endswith(".go") and not member.name.endswith("_test.go"):
                if "/client/" in member.name or "/parse/" in member.name or "/validate/" in member.name:
                    continue
                files[member.name] = tf.extractfile(member).read().decode("utf-8", "replace")
    return files


def used_types() -> tuple[set[str], set[str]]:
    """azurerm resource and data source types in terraform/*.tf."""
    text = "\n".join(p.read_text() for p in (REPO / "terraform").glob("*.tf"))
    res = set(re.findall(r'^resource\s+"(azurerm_\w+)"', text, re.M))
    data = set(re.findall(r'^data\s+"(azurerm_\w+)"', text, re.M))
    return res, data


def version_floor(provider: str = "azurerm") -> str:
    text = (REPO / "terraform" / "versions.tf").read_text()
    m = re.search(rf'\b{provider}\s*=\s*\{{[^}}]*version\s*=\s*"[^"]*>=\s*(\d+\.\d+\.\d+)', text, re.S)
    if not m:
        raise SchemaError(f"no {provider} lower bound in terraform/versions.tf")
    return "v" + m.group(1)


def other_snapshot(provider: str, git_dir: str) -> dict:
    """tls / random / local / time: resource types used, at the floor and the
    newest release of the same major version."""
    text = "\n".join(p.read_text() for p in (REPO / "terraform").glob("*.tf"))
    types = set(re.findall(rf'^resource\s+"({provider}_\w+)"', text, re.M))
    floor = version_floor(provider)
    out = {"source": f"https://github.com/hashicorp/terraform-provider-{provider}", "tags": {}}
    for tag in (floor, newest_tag(git_dir, int(floor[1:].split(".")[0]))):
        commit = subprocess.run(["git", "-C", git_dir, "rev-parse", f"{tag}^{{commit}}"], check=True,
                                capture_output=True, text=True).stdout.strip()
        src = Source(load_tag(git_dir, tag, ["internal"]))
        out["tags"][tag] = {"commit": commit, "resources": framework_resources(src, provider, types)}
        print(f"{provider} {tag} ({commit[:12]}): {len(types)} resources", file=sys.stderr)
    return out


def newest_tag(git_dir: str, major: int) -> str:
    tags = subprocess.run(["git", "-C", git_dir, "tag", "--list", f"v{major}.*"], check=True,
                          capture_output=True, text=True).stdout.split()
    tags = [t for t in tags if re.fullmatch(rf"v{major}\.\d+\.\d+", t)]
    return max(tags, key=lambda t: tuple(map(int, t[1:].split("."))))


def snapshot(git_dir: str, tags: list[str], extra_types: list[str]) -> dict:
    res, data = used_types()
    res |= set(extra_types)
    out = {"source": f"https://{MODULE}", "tags": {}}
    for tag in tags:
        commit = subprocess.run(["git", "-C", git_dir, "rev-parse", f"{tag}^{{commit}}"], check=True,
                                capture_output=True, text=True).stdout.strip()
        src = Source(load_tag(git_dir, tag))
        ev = Evaluator(src)
        entry = {"commit": commit, "provider": provider_schema(src, ev), "resources": {}, "data_sources": {}}
        for t in sorted(res):
            entry["resources"][t] = find_resource(src, ev, t)
        for t in sorted(data):
            entry["data_sources"][t] = find_resource(src, ev, t, data=True)
        out["tags"][tag] = entry
        print(f"{tag} ({commit[:12]}): {len(res)} resources, {len(data)} data sources", file=sys.stderr)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", required=True, help="git dir of a terraform-provider-azurerm clone")
    ap.add_argument("--tag", action="append", help="tag to read (repeat); default: floor and newest 4.x")
    ap.add_argument("--type", action="append", default=[], help="extra resource type to include")
    ap.add_argument("--other", action="append", default=[], metavar="NAME=GIT_DIR",
                    help="clone of terraform-provider-NAME (tls, random, local, time); "
                         "providers not given keep their entries from the current snapshot")
    ap.add_argument("--out", default=str(HERE / "azurerm_schema.json"))
    args = ap.parse_args(argv)
    tags = args.tag or [version_floor(), newest_tag(args.repo, int(version_floor()[1:].split(".")[0]))]
    snap = snapshot(args.repo, tags, args.type)
    old = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
    snap["providers"] = old.get("providers", {})
    for spec in args.other:
        name, _, git_dir = spec.partition("=")
        snap["providers"][name] = other_snapshot(name, git_dir)
    Path(args.out).write_text(json.dumps(snap, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
