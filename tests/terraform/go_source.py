"""The Go-source side of azurerm_schema.py: a minimal Go lexer (strings,
comments, bracket matching), the provider's files and functions (`Source`),
and the helpers that read a schema literal's fields and the `features`
conditions around them. Split from azurerm_schema.py, which evaluates the
schema maps with these.
"""

from __future__ import annotations

import re

MODULE = "github.com/hashicorp/terraform-provider-azurerm"


class SchemaError(RuntimeError):
    pass


# --- a minimal Go lexer: strings, comments, bracket matching -----------------

def _skip(text: str, i: int) -> int:
    """If text[i] starts a string, rune or comment, the index after it; else i."""
    c = text[i]
    if c == '"':
        j = i + 1
        while text[j] != '"':
            j += 2 if text[j] == "\\" else 1
        return j + 1
    if c == "`":
        return text.index("`", i + 1) + 1
    if c == "'":
        j = i + 1
        while text[j] != "'":
            j += 2 if text[j] == "\\" else 1
        return j + 1
    if text.startswith("//", i):
        j = text.find("\n", i)
        return len(text) if j < 0 else j
    if text.startswith("/*", i):
        return text.index("*/", i) + 2
    return i


def close_of(text: str, i: int) -> int:
    """Index of the bracket closing the one at text[i]."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    stack = [pairs[text[i]]]
    j = i + 1
    while stack:
        k = _skip(text, j)
        if k != j:
            j = k
            continue
        c = text[j]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if c != stack.pop():
                raise SchemaError(f"unbalanced {c!r} at {j}")
        j += 1
    return j - 1


def strip_comments(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        k = _skip(text, i)
        if k != i:
            if text[i] in "\"`'":
                out.append(text[i:k])
            i = k
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def split_top(text: str, sep: str = ",") -> list[str]:
    """Splits at sep outside brackets and strings."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        k = _skip(text, i)
        if k != i:
            i = k
            continue
        c = text[i]
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


# --- package index ----------------------------------------------------------

FUNC_RE = re.compile(r"^func\s+(?:\(\s*\w*\s*\*?(\w+)\s*\)\s*)?(\w+)\s*\(", re.M)


class GoFile:
    def __init__(self, path: str, text: str):
        self.path = path
        self.text = strip_comments(text)
        self.imports: dict[str, str] = {}
        m = re.search(r"^import\s*\((.*?)^\)", self.text, re.M | re.S)
        block = m.group(1) if m else ""
        for line in block.splitlines() + re.findall(r'^import\s+(.+)$', self.text, re.M):
            im = re.match(r'\s*(\w+)?\s*"([^"]+)"', line)
            if im:
                alias = im.group(1) or im.group(2).rsplit("/", 1)[-1]
                self.imports[alias] = im.group(2)


class Func:
    def __init__(self, file: GoFile, recv: str | None, name: str, body: str, params: list[str] | None = None):
        self.file, self.recv, self.name, self.body = file, recv, name, body
        self.params = params or []

    def bind(self, args: list[str]) -> "Func":
        """This function with literal bool arguments substituted for its
        parameters (e.g. base64.OptionalSchema(false) -> ForceNew: false)."""
        if not args or len(args) != len(self.params) or not all(a in ("true", "false") for a in args):
            return self
        body = self.body
        for name, value in zip(self.params, args):
            body = re.sub(rf"\b{name}\b", value, body)
        return Func(self.file, self.recv, f"{self.name}({', '.join(args)})", body)

    def __repr__(self):
        return f"{self.file.path}:{self.name}"


class Source:
    """The provider's Go files at one tag (internal/ and the vendored helpers)."""

    def __init__(self, files: dict[str, str]):
        self.by_dir: dict[str, list[GoFile]] = {}
        self.funcs: dict[tuple[str, str | None, str], Func] = {}
        for path, text in files.items():
            if not path.endswith(".go") or path.endswith("_test.go"):
                continue
            gf = GoFile(path, text)
            d = path.rsplit("/", 1)[0]
            self.by_dir.setdefault(d, []).append(gf)
            for m in FUNC_RE.finditer(gf.text):
                # Skip to the body: the first "{" after the parameter list and
                # result types that is not part of interface{} / struct{}.
                i = close_of(gf.text, m.end() - 1) + 1
                while True:
                    j = gf.text.index("{", i)
                    if re.search(r"(interface|struct)\s*$", gf.text[i:j]):
                        i = close_of(gf.text, j) + 1
                        continue
                    break
                body = gf.text[j : close_of(gf.text, j) + 1]
                plist = gf.text[m.end() : close_of(gf.text, m.end() - 1)]
                params = [p.split()[0] for p in split_top(plist) if p.split()]
                self.funcs[(d, m.group(1), m.group(2))] = Func(gf, m.group(1), m.group(2), body, params)

    def func(self, d: str, name: str, recv: str | None = None) -> Func:
        try:
            return self.funcs[(d, recv, name)]
        except KeyError:
            raise SchemaError(f"no func {recv + '.' if recv else ''}{name} in {d}") from None

    def resolve_call(self, ctx: Func, callee: str) -> Func:
        if "." in callee:
            alias, name = callee.split(".", 1)
            path = ctx.file.imports.get(alias)
            if path is None:
                raise SchemaError(f"{ctx}: unknown package {alias}")
            if path.startswith(MODULE + "/"):
                d = path[len(MODULE) + 1 :]
            else:
                d = "vendor/" + path
            return self.func(d, name)
        return self.func(ctx.file.path.rsplit("/", 1)[0], callee)


# --- schema evaluation ------------------------------------------------------

SCHEMA_LIT = re.compile(r"^&?(?:pluginsdk|schema)\.Schema\s*(?=\{)")
RESOURCE_LIT = re.compile(r"^&?(?:pluginsdk|schema)\.Resource\s*(?=\{)")
MAP_LIT = re.compile(r"^map\[string\]\*(?:pluginsdk|schema)\.Schema\s*(?=\{)")
CALL = re.compile(r"^([A-Za-z_][\w.]*)\((.*)\)$", re.S)


def flag(value: str | None) -> bool:
    if value is None or value == "false":
        return False
    if value == "true":
        return True
    if m := re.fullmatch(r"func\(\)\s*bool\s*\{\s*return\s+(.+?)\s*\}\(\)", value, re.S):
        value = m.group(1)
    v = feature_value(value)
    if v is None:
        raise SchemaError(f"cannot evaluate flag {value!r}")
    return v


def fields(lit: str) -> dict[str, str]:
    """Fields of a composite literal {A: x, B: y}."""
    out = {}
    for part in split_top(lit[1:-1]):
        m = re.match(r"^(\w+)\s*:\s*(.*)$", part, re.S)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def heads(body: str, pos: int) -> list[str]:
    """The text before each "{" that encloses pos ("if x", "else-of if x",
    "func(...) error", a composite literal's type, ...)."""
    stack, closed, i = [], [], 0
    while i < pos:
        k = _skip(body, i)
        if k != i:
            i = k
            continue
        c = body[i]
        if c == "{":
            start = max(body.rfind("\n", 0, i), body.rfind(";", 0, i))
            head = body[start + 1 : i].strip()
            if head.startswith("}"):
                head = head[1:].strip()
            if head == "else" or head.startswith("else "):
                head = "else-of " + (closed[-1] if closed else "")
            stack.append(head)
        elif c == "}":
            closed.append(stack.pop())
        i += 1
    return stack


# Feature switches as a 4.x release evaluates them.
FEATURES_4X = {"FivePointOh": False, "FivePointOhBeta": False, "FourPointOh": True, "FourPointOhBeta": True}


def feature_value(expr: str) -> bool | None:
    """Value of a bare (possibly negated) features.X() expression, else None."""
    m = re.fullmatch(r"(!?)\s*features\.(\w+)\(\)", expr.strip())
    if not m or m.group(2) not in FEATURES_4X:
        return None
    return FEATURES_4X[m.group(2)] != bool(m.group(1))


def active_in_4x(body: str, pos: int) -> bool:
    """False when pos sits in a branch a 4.x release does not run."""
    for head in heads(body, pos):
        invert = head.startswith("else-of ")
        cond = head[len("else-of ") :] if invert else head
        if not cond.startswith("if "):
            continue
        if "features." in cond:
            value = feature_value(cond[3:])
            if value is None:
                raise SchemaError(f"cannot evaluate feature condition {cond!r}")
            if value == invert:
                return False
    return True
