"""Slurm-compatible fair-share report (``sshare``): the math and the three output formats.

Pure Python, no Django: the selector builds the association tree (queues are accounts, the
owners of workloads in a leaf queue are its users) and this module computes the columns under
either definition and renders them.  Definitions (docs/slurm-fairshare.md 4.3-4.6, Slurm docs
classic_fair_share.html and fair_tree.html, restated):

Classic (``PriorityFlags=NO_FAIR_TREE``)
    NormShares   S = product down the path of shares / sum of sibling shares (cluster-global)
    NormUsage    U = RawUsage / RawUsage(root)
    EffectvUsage first tier UE = U; below UE = U + (UE_parent - U) * shares / sum(sibling shares)
    FairShare    F = 2 ** (-UE / S / dampening)   (0 when S = 0)
Fair Tree (Slurm's default)
    NormShares   S = shares / sum(sibling shares)               (within the level)
    EffectvUsage U = RawUsage / RawUsage(parent)               (0 if the parent has none)
    LevelFS      S / U; 0 if S = 0, inf if U = 0
    FairShare    rank / N over a depth-first walk with siblings ordered by LevelFS (desc; users
                 before accounts on a tie), N user associations, rank counting down from N;
                 tied sibling users share a rank, tied sibling accounts have their children
                 merged, a user tied with an account shares the rank of its top user.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

CLASSIC = "classic"
FAIR_TREE = "fair_tree"
ALGORITHMS = (FAIR_TREE, CLASSIC)

SHORT_COLUMNS = ("Account", "User", "RawShares", "NormShares", "RawUsage", "EffectvUsage", "FairShare")
LONG_COLUMNS_CLASSIC = ("Account", "User", "RawShares", "NormShares", "RawUsage", "NormUsage", "EffectvUsage",
                        "FairShare")
LONG_COLUMNS_FAIR_TREE = LONG_COLUMNS_CLASSIC + ("LevelFS",)
KAI_COLUMNS = ("GPUDeserved", "GPUFairShare", "GPUAllocated")
ALL_COLUMNS = LONG_COLUMNS_FAIR_TREE + KAI_COLUMNS
_WIDTHS = {"Account": 20, "User": 10, "RawShares": 10, "NormShares": 11, "RawUsage": 11, "NormUsage": 11,
           "EffectvUsage": 13, "FairShare": 10, "LevelFS": 10, "GPUDeserved": 11, "GPUFairShare": 12,
           "GPUAllocated": 12}


@dataclass
class Assoc:
    """One association: an account (``user == ""``) or a user under an account.

    ``shares`` None means ``FairShare=parent``; the root has ``parent=None``.
    """

    key: str
    parent: str | None
    account: str
    user: str = ""
    shares: float | None = 1.0
    raw_usage: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    # computed
    depth: int = 0
    norm_shares: float = 0.0
    norm_usage: float = 0.0
    effective_usage: float = 0.0
    level_fs: float | None = None
    fairshare: float | None = None

    @property
    def is_user(self) -> bool:
        return bool(self.user)


class Tree:
    def __init__(self, assocs: Iterable[Assoc]):
        self.nodes: dict[str, Assoc] = {}
        for a in assocs:
            if a.key in self.nodes:
                raise ValueError(f"duplicate association {a.key!r}")
            self.nodes[a.key] = a
        roots = [a for a in self.nodes.values() if a.parent is None]
        if len(roots) != 1:
            raise ValueError("exactly one root association is required")
        self.root = roots[0]
        self.children: dict[str, list[Assoc]] = {k: [] for k in self.nodes}
        for a in self.nodes.values():
            if a.parent is not None:
                if a.parent not in self.nodes:
                    raise ValueError(f"association {a.key!r}: unknown parent {a.parent!r}")
                self.children[a.parent].append(a)
        self._set_depth(self.root, 0)

    def _set_depth(self, node: Assoc, depth: int) -> None:
        stack = [(node, depth)]
        seen = set()
        while stack:
            n, d = stack.pop()
            if n.key in seen:
                raise ValueError("the association tree has a cycle")
            seen.add(n.key)
            n.depth = d
            stack.extend((c, d + 1) for c in self.children[n.key])
        if len(seen) != len(self.nodes):
            raise ValueError("some associations are not reachable from the root")

    def preorder(self, order=None) -> list[Assoc]:
        out: list[Assoc] = []

        def visit(n: Assoc) -> None:
            out.append(n)
            kids = self.children[n.key]
            for c in (order(kids) if order else kids):
                visit(c)

        visit(self.root)
        return out


def _shares(a: Assoc) -> float:
    return 0.0 if a.shares is None else max(0.0, float(a.shares))


def _rollup_usage(tree: Tree) -> None:
    """Account usage = own + subtree (only leaves carry raw usage of their own in our mapping)."""
    for n in reversed(tree.preorder()):
        kids = tree.children[n.key]
        if kids:
            n.raw_usage = float(n.extra.get("own_usage", 0.0)) + sum(c.raw_usage for c in kids)


def compute_classic(tree: Tree, *, dampening: float = 1.0) -> None:
    _rollup_usage(tree)
    root = tree.root
    total = root.raw_usage
    root.norm_shares, root.effective_usage = 1.0, (1.0 if total > 0 else 0.0)
    root.norm_usage = 1.0 if total > 0 else 0.0
    for n in tree.preorder():
        kids = tree.children[n.key]
        denom = sum(_shares(c) for c in kids if c.shares is not None)
        for c in kids:
            c.norm_usage = c.raw_usage / total if total > 0 else 0.0
            if c.shares is None:  # FairShare=parent: the parent's values
                c.norm_shares, c.effective_usage = n.norm_shares, n.effective_usage
            else:
                frac = _shares(c) / denom if denom > 0 else 0.0
                c.norm_shares = n.norm_shares * frac
                if n is root:
                    c.effective_usage = c.norm_usage
                else:
                    c.effective_usage = c.norm_usage + (n.effective_usage - c.norm_usage) * frac
            c.fairshare = (2.0 ** (-c.effective_usage / c.norm_shares / dampening)) if c.norm_shares > 0 else 0.0
            c.level_fs = None


def compute_fair_tree(tree: Tree) -> None:
    _rollup_usage(tree)
    root = tree.root
    root.norm_shares, root.effective_usage, root.norm_usage = 1.0, (1.0 if root.raw_usage > 0 else 0.0), 1.0
    total = root.raw_usage
    for n in tree.preorder():
        kids = tree.children[n.key]
        denom = sum(_shares(c) for c in kids if c.shares is not None)
        for c in kids:
            c.norm_usage = c.raw_usage / total if total > 0 else 0.0
            c.norm_shares = (_shares(c) / denom if denom > 0 else 0.0) if c.shares is not None else 1.0
            c.effective_usage = c.raw_usage / n.raw_usage if n.raw_usage > 0 else 0.0
            if c.shares is None:
                c.level_fs = math.inf
            elif c.norm_shares == 0:
                c.level_fs = 0.0
            elif c.effective_usage == 0:
                c.level_fs = math.inf
            else:
                c.level_fs = c.norm_shares / c.effective_usage
            c.fairshare = None
    users = [a for a in tree.nodes.values() if a.is_user]
    n_users = len(users)
    if n_users == 0:
        return
    counter = {"rank_i": n_users, "rank": n_users}

    def sort_key(a: Assoc):
        return (-a.level_fs, 1 if not a.is_user else 0, a.account, a.user)

    def walk(siblings: list[Assoc], tied_in: bool) -> None:
        ordered = sorted(siblings, key=sort_key)
        i = 0
        prev: Assoc | None = None
        while i < len(ordered):
            a = ordered[i]
            tied = (prev.level_fs == a.level_fs) if prev is not None else tied_in
            if not tied:
                counter["rank"] = counter["rank_i"]
            if a.is_user:
                a.fairshare = counter["rank"] / n_users
                counter["rank_i"] -= 1
                prev, i = a, i + 1
                continue
            group = [a]
            j = i + 1
            while j < len(ordered) and not ordered[j].is_user and ordered[j].level_fs == a.level_fs:
                group.append(ordered[j])
                j += 1
            merged = [c for g in group for c in tree.children[g.key]]
            walk(merged, tied)
            prev, i = a, j

    walk(tree.children[root.key], False)


def compute(tree: Tree, algorithm: str) -> None:
    if algorithm == CLASSIC:
        compute_classic(tree)
    elif algorithm == FAIR_TREE:
        compute_fair_tree(tree)
    else:
        raise ValueError(f"algorithm: expected one of {', '.join(ALGORITHMS)}, got {algorithm!r}")


# ----------------------------------------------------------------------------- rows and formats


def default_columns(*, long: bool, algorithm: str, kai: bool = False) -> tuple[str, ...]:
    cols = (LONG_COLUMNS_FAIR_TREE if algorithm == FAIR_TREE else LONG_COLUMNS_CLASSIC) if long else SHORT_COLUMNS
    return cols + (KAI_COLUMNS if kai else ())


def _fmt_float(x: float | None) -> str:
    if x is None:
        return ""
    if math.isinf(x):
        return "inf"
    return f"{x:.6f}"


def cell(a: Assoc, column: str, algorithm: str, *, indent: bool = True) -> str:
    if column == "Account":
        return (" " * a.depth if indent else "") + a.account
    if column == "User":
        return a.user
    if column == "RawShares":
        if a.parent is None:
            return ""
        return "parent" if a.shares is None else _fmt_num(a.shares)
    if column == "NormShares":
        return _fmt_float(a.norm_shares)
    if column == "RawUsage":
        return str(int(round(a.raw_usage)))
    if column == "NormUsage":
        return _fmt_float(a.norm_usage)
    if column == "EffectvUsage":
        return _fmt_float(a.effective_usage)
    if column == "FairShare":
        if a.parent is None or (algorithm == FAIR_TREE and not a.is_user):
            return ""
        return _fmt_float(a.fairshare)
    if column == "LevelFS":
        return "" if a.parent is None or a.level_fs is None else _fmt_float(a.level_fs)
    if column in KAI_COLUMNS:
        value = a.extra.get(column)
        return "" if value is None else _fmt_num(value)
    raise ValueError(f"unknown column {column!r}")


def _fmt_num(x: float) -> str:
    f = float(x)
    return str(int(f)) if f.is_integer() else f"{f:g}"


def render_text(rows: Sequence[Assoc], columns: Sequence[str], algorithm: str) -> str:
    widths = [_WIDTHS[c] for c in columns]
    head = " ".join((c.ljust(w) if c in ("Account", "User") else c.rjust(w))[:w] for c, w in zip(columns, widths))
    sep = " ".join("-" * w for w in widths)
    lines = [head, sep]
    for a in rows:
        cells = []
        for c, w in zip(columns, widths):
            v = cell(a, c, algorithm)
            cells.append((v.ljust(w) if c in ("Account", "User") else v.rjust(w))[:w])
        lines.append(" ".join(cells))
    return "\n".join(line.rstrip() for line in lines) + "\n"


def render_parsable(rows: Sequence[Assoc], columns: Sequence[str], algorithm: str, *, trailing: bool = True) -> str:
    end = "|" if trailing else ""
    lines = ["|".join(columns) + end]
    lines += ["|".join(cell(a, c, algorithm, indent=False) for c in columns) + end for a in rows]
    return "\n".join(lines) + "\n"


def _number(x: float | None) -> dict[str, Any]:
    """Slurm data_parser style number: {set, infinite, number}."""
    if x is None:
        return {"set": False, "infinite": False, "number": 0}
    if math.isinf(x):
        return {"set": True, "infinite": True, "number": 0}
    return {"set": True, "infinite": False, "number": x}


def as_json(rows: Sequence[Assoc], algorithm: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Shaped after Slurm's ``sshare --json`` (data_parser field names; exact schema not verified)."""
    shares = []
    for a in rows:
        shares.append({
            "name": a.user or a.account,
            "account": a.account,
            "user": a.user,
            "parent": "" if a.parent is None else (a.parent or "root"),
            "type": ["USER"] if a.is_user else ["ASSOCIATION"],
            "shares": _number(None if a.shares is None or a.parent is None else float(a.shares)),
            "shares_normalized": _number(a.norm_shares),
            "usage": int(round(a.raw_usage)),
            "usage_normalized": _number(a.norm_usage),
            "effective_usage": _number(a.effective_usage),
            "fairshare": {"factor": _number(a.fairshare), "level": _number(a.level_fs)},
            "kai": {k: a.extra.get(k) for k in KAI_COLUMNS if k in a.extra},
        })
    return {"shares": {"shares": shares, "total_shares": len(shares)}, "algorithm": algorithm, "meta": meta or {}}


def render(rows: Sequence[Assoc], *, columns: Sequence[str], algorithm: str, output: str,
           meta: dict[str, Any] | None = None) -> str:
    if output == "text":
        return render_text(rows, columns, algorithm)
    if output == "parsable":
        return render_parsable(rows, columns, algorithm, trailing=True)
    if output == "parsable2":
        return render_parsable(rows, columns, algorithm, trailing=False)
    if output == "json":
        return json.dumps(as_json(rows, algorithm, meta), indent=2) + "\n"
    raise ValueError(f"output: expected text, parsable, parsable2 or json, got {output!r}")


def select_rows(tree: Tree, *, accounts: Sequence[str] = (), users: Sequence[str] = (), users_only: bool = False,
                order_by_fs: bool = False) -> list[Assoc]:
    """Rows in tree order (``sshare`` prints a tree), filtered like ``-A``, ``-u`` and ``-U``.

    ``-A``: those accounts, their sub-accounts and their users; ``-u``: those users (and the
    accounts above them unless ``-U``); ``-U``: user rows only.
    """
    rows = tree.preorder()
    if accounts:
        wanted = set(accounts)
        keep: set[str] = set()
        for a in rows:
            if not a.is_user and a.account in wanted:
                stack = [a]
                while stack:
                    n = stack.pop()
                    keep.add(n.key)
                    stack.extend(tree.children[n.key])
        rows = [a for a in rows if a.key in keep]
    if users:
        wanted_users = set(users)
        hits = [a for a in rows if a.is_user and a.user in wanted_users]
        keep = {a.key for a in hits}
        for a in hits:
            p = a.parent
            while p is not None:
                keep.add(p)
                p = tree.nodes[p].parent
        rows = [a for a in rows if a.key in keep]
    if users_only:
        rows = [a for a in rows if a.is_user]
    return rows
