"""A small renderer for the subset of Helm's Go templates that our chart uses.

No ``helm`` binary can be installed on the CI machines (it is in no registry they reach), so the
chart tests render ``deploy/helm/kaiplatform`` with this module, then parse the YAML and check
every manifest against the Kubernetes object schema of the ``kubernetes`` client models.  The
chart is written to stay inside this subset; an unsupported construct raises ``TemplateError``
instead of rendering something plausible, so a chart edit that leaves the subset fails loudly.

Supported: ``{{ }}`` with ``{{-``/``-}}`` trimming, comments, ``if``/``else if``/``else``,
``with``, ``range`` (lists and maps, with ``$i, $v :=``), ``define``/``include``/``template``,
variables, parentheses, pipelines and the functions in ``FUNCS``.
"""
from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class TemplateError(Exception):
    pass


_ACTION = re.compile(r"\{\{(-?)\s*(/\*.*?\*/|.*?)\s*(-?)\}\}", re.S)


# ----------------------------------------------------------------------------- parsing
@dataclass
class Node:
    kind: str  # text | expr | if | with | range | define | template
    text: str = ""
    expr: str = ""
    body: list = field(default_factory=list)
    orelse: list = field(default_factory=list)
    branches: list = field(default_factory=list)  # for if: [(expr, body), ...]


def _tokenize(src: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _ACTION.finditer(src):
        text = src[pos:m.start()]
        if m.group(1):
            text = text.rstrip()
        if out and out[-1][0] == "trim_next":
            out.pop()
            text = text.lstrip()
        out.append(("text", text))
        body = m.group(2)
        if not body.startswith("/*"):
            out.append(("action", body))
        if m.group(3):
            out.append(("trim_next", ""))
        pos = m.end()
    tail = src[pos:]
    if out and out[-1][0] == "trim_next":
        out.pop()
        tail = tail.lstrip()
    out.append(("text", tail))
    return out


def _parse(tokens: list[tuple[str, str]], defines: dict[str, list]) -> list:
    pos = 0

    def block(stop: tuple[str, ...]) -> tuple[list, str]:
        nonlocal pos
        nodes: list = []
        while pos < len(tokens):
            kind, val = tokens[pos]
            pos += 1
            if kind == "text":
                if val:
                    nodes.append(Node("text", text=val))
                continue
            word = val.split(None, 1)[0] if val else ""
            rest = val[len(word):].strip()
            if word in stop:
                return nodes, val
            if word == "if":
                node = Node("if")
                cond = rest
                while True:
                    body, end = block(("else", "end"))
                    node.branches.append((cond, body))
                    if end == "end":
                        break
                    tail = end[4:].strip()
                    if tail.startswith("if "):
                        cond = tail[3:].strip()
                        continue
                    node.orelse, end2 = block(("end",))
                    break
                nodes.append(node)
            elif word in ("with", "range"):
                node = Node(word, expr=rest)
                node.body, end = block(("else", "end"))
                if end.startswith("else"):
                    node.orelse, _ = block(("end",))
                nodes.append(node)
            elif word == "define":
                name = _literal(rest)
                body, _ = block(("end",))
                defines[name] = body
            elif word == "template":
                nodes.append(Node("template", expr=rest))
            elif word in ("end", "else"):
                raise TemplateError(f"unexpected {{{{ {val} }}}}")
            else:
                nodes.append(Node("expr", expr=val))
        if stop:
            raise TemplateError(f"missing {{{{ end }}}} (expected one of {stop})")
        return nodes, ""

    nodes, _ = block(())
    return nodes


def _literal(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    raise TemplateError(f"expected a string literal, got {text!r}")


# ----------------------------------------------------------------------------- evaluation
_TOKEN = re.compile(r'\s*(?:(\()|(\))|(\|)|("(?:\\.|[^"\\])*")|(:=)|(,)|([^\s()|,]+))')


def _lex(expr: str) -> list[str]:
    toks = []
    pos = 0
    expr = expr.strip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            raise TemplateError(f"cannot lex {expr!r} at {pos}")
        toks.append(next(g for g in m.groups() if g is not None))
        pos = m.end()
    return toks


def _truthy(v: Any) -> bool:
    return not (v is None or v is False or v == 0 or v == "" or v == [] or v == {})


def _to_yaml(v: Any) -> str:
    if v in (None, {}, []) and not isinstance(v, (int, float)):
        return "{}" if isinstance(v, dict) or v is None else "[]"
    return yaml.safe_dump(v, default_flow_style=False, sort_keys=False).rstrip("\n")


def _indent(n: int, s: str) -> str:
    pad = " " * int(n)
    return "\n".join(pad + line for line in str(s).split("\n"))


def _required(msg: str, v: Any) -> Any:
    if v is None or v == "":
        raise TemplateError(f"required value missing: {msg}")
    return v


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if v is True:
        return "true"
    if v is False:
        return "false"
    return str(v)


FUNCS = {
    "quote": lambda *a: " ".join('"' + _fmt(x).replace('"', '\\"') + '"' for x in a),
    "squote": lambda v: "'" + _fmt(v) + "'",
    "default": lambda d, v=None: v if _truthy(v) else d,
    "toYaml": _to_yaml,
    "nindent": lambda n, s: "\n" + _indent(n, s),
    "indent": _indent,
    "b64enc": lambda s: base64.b64encode(_fmt(s).encode()).decode(),
    "required": _required,
    "printf": lambda f, *a: _go_printf(f, a),
    "eq": lambda a, *b: any(a == x for x in b),
    "ne": lambda a, b: a != b,
    "not": lambda v: not _truthy(v),
    "and": lambda *a: next((x for x in a if not _truthy(x)), a[-1]),
    "or": lambda *a: next((x for x in a if _truthy(x)), a[-1]),
    "trunc": lambda n, s: _fmt(s)[: int(n)],
    "trimSuffix": lambda suf, s: _fmt(s)[: -len(suf)] if suf and _fmt(s).endswith(suf) else _fmt(s),
    "lower": lambda s: _fmt(s).lower(),
    "toString": _fmt,
    "int": lambda v: int(v),
    "empty": lambda v: not _truthy(v),
}


def _go_printf(fmt: str, args: tuple) -> str:
    return re.sub(r"%[sdv]", lambda _m, it=iter(args): _fmt(next(it)), fmt)


class Renderer:
    def __init__(self, defines: dict[str, list]):
        self.defines = defines

    def render(self, nodes: list, dot: Any, root: Any, scope: dict) -> str:
        out: list[str] = []
        for n in nodes:
            if n.kind == "text":
                out.append(n.text)
            elif n.kind == "expr":
                val = self.pipeline(n.expr, dot, root, scope, assign=True)
                if val is not _ASSIGNED:
                    out.append(_fmt(val))
            elif n.kind == "template":
                toks = _lex(n.expr)
                name = _literal(toks[0])
                arg = self.pipeline(" ".join(toks[1:]), dot, root, scope) if len(toks) > 1 else None
                out.append(self.include(name, arg))
            elif n.kind == "if":
                for cond, body in n.branches:
                    if _truthy(self.pipeline(cond, dot, root, scope)):
                        out.append(self.render(body, dot, root, dict(scope)))
                        break
                else:
                    out.append(self.render(n.orelse, dot, root, dict(scope)))
            elif n.kind == "with":
                v = self.pipeline(n.expr, dot, root, scope)
                out.append(self.render(n.body if _truthy(v) else n.orelse, v if _truthy(v) else dot, root, dict(scope)))
            elif n.kind == "range":
                names, expr = _range_vars(n.expr)
                coll = self.pipeline(expr, dot, root, scope)
                items = list(coll.items()) if isinstance(coll, dict) else list(enumerate(coll or []))
                if isinstance(coll, dict):
                    items.sort(key=lambda kv: str(kv[0]))
                if not items:
                    out.append(self.render(n.orelse, dot, root, dict(scope)))
                for k, v in items:
                    s = dict(scope)
                    if len(names) == 2:
                        s[names[0]], s[names[1]] = k, v
                    elif len(names) == 1:
                        s[names[0]] = v
                    out.append(self.render(n.body, v, root, s))
        return "".join(out)

    def include(self, name: str, arg: Any) -> str:
        if name not in self.defines:
            raise TemplateError(f"no template named {name!r}")
        return self.render(self.defines[name], arg, arg if isinstance(arg, dict) and "Values" in arg else arg, {"$": arg})

    def pipeline(self, expr: str, dot: Any, root: Any, scope: dict, assign: bool = False) -> Any:
        toks = _lex(expr)
        if assign and len(toks) >= 3 and toks[0].startswith("$") and toks[1] == ":=":
            scope[toks[0]] = self._pipe(toks[2:], dot, scope)
            return _ASSIGNED
        return self._pipe(toks, dot, scope)

    def _pipe(self, toks: list[str], dot: Any, scope: dict) -> Any:
        stages: list[list[str]] = [[]]
        depth = 0
        for t in toks:
            if t == "(":
                depth += 1
            elif t == ")":
                depth -= 1
            if t == "|" and depth == 0:
                stages.append([])
            else:
                stages[-1].append(t)
        val: Any = _NOTHING
        for stage in stages:
            val = self._command(stage, dot, scope, val)
        return val

    def _command(self, toks: list[str], dot: Any, scope: dict, piped: Any) -> Any:
        args = self._operands(toks, dot, scope)
        head = toks[0] if toks else ""
        if head in FUNCS or head == "include":
            fn_args = args[1:]
            if piped is not _NOTHING:
                fn_args.append(piped)
            if head == "include":
                return self.include(fn_args[0], fn_args[1] if len(fn_args) > 1 else None)
            return FUNCS[head](*fn_args)
        if piped is not _NOTHING or len(args) != 1:
            raise TemplateError(f"unsupported command {' '.join(toks)!r}")
        return args[0]

    def _operands(self, toks: list[str], dot: Any, scope: dict) -> list:
        out: list = []
        i = 0
        while i < len(toks):
            t = toks[i]
            if t == "(":
                depth, j = 1, i + 1
                while depth:
                    depth += {"(": 1, ")": -1}.get(toks[j], 0)
                    j += 1
                out.append(self._pipe(toks[i + 1:j - 1], dot, scope))
                i = j
                continue
            out.append(self._value(t, dot, scope) if (i > 0 or t not in FUNCS and t != "include") else t)
            i += 1
        return out

    def _value(self, t: str, dot: Any, scope: dict) -> Any:
        if t.startswith('"'):
            return bytes(t[1:-1], "utf-8").decode("unicode_escape")
        if t in ("true", "false"):
            return t == "true"
        if t == "nil":
            return None
        if re.fullmatch(r"-?\d+", t):
            return int(t)
        if re.fullmatch(r"-?\d+\.\d*", t):
            return float(t)
        if t == ".":
            return dot
        if t.startswith("$"):
            name, _, path = t.partition(".")
            if name not in scope:
                raise TemplateError(f"undefined variable {name}")
            return _walk(scope[name], path)
        if t.startswith("."):
            return _walk(dot, t[1:])
        raise TemplateError(f"unsupported operand {t!r}")


_NOTHING = object()
_ASSIGNED = object()


def _walk(v: Any, path: str) -> Any:
    for part in [p for p in path.split(".") if p]:
        if isinstance(v, dict):
            v = v.get(part)
        elif v is None:
            return None
        else:
            raise TemplateError(f"cannot take .{part} of {type(v).__name__}")
    return v


def _range_vars(expr: str) -> tuple[list[str], str]:
    if ":=" in expr:
        left, right = expr.split(":=", 1)
        return [x.strip() for x in left.split(",")], right
    return [], expr


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def render_chart(chart_dir: Path, *, values: dict | None = None, release: str = "kai",
                 namespace: str = "kai-system") -> dict[str, str]:
    """Render every template of a chart; returns {template file name: rendered text}."""
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    vals = _deep_merge(yaml.safe_load((chart_dir / "values.yaml").read_text()) or {}, values or {})
    root = {
        "Values": vals,
        "Release": {"Name": release, "Namespace": namespace, "Service": "Helm", "IsInstall": True},
        "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart.get("appVersion", "")},
    }
    defines: dict[str, list] = {}
    parsed = {}
    for path in sorted((chart_dir / "templates").iterdir()):
        parsed[path.name] = _parse(_tokenize(path.read_text()), defines)
    r = Renderer(defines)
    return {name: r.render(nodes, root, root, {"$": root})
            for name, nodes in parsed.items() if not name.startswith("_") and name.endswith(".yaml")}
