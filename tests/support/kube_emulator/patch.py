"""The three PATCH flavours: JSON merge patch (RFC 7386), strategic merge patch, JSON patch (RFC 6902)."""
from __future__ import annotations

import copy
from typing import Any

from .common import ApiError

def json_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch: objects merge recursively, ``null`` removes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


# patchMergeKey of the list fields a control plane plausibly patches (from the core/v1 OpenAPI
# x-kubernetes-patch-merge-key / patch-strategy=merge markers).  Lists not named here are replaced.
_SMP_MERGE_KEYS = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "ownerReferences": "uid",
    "addresses": "type",
    "imagePullSecrets": "name",
    "resourceClaims": "name",
    "schedulingGates": "name",
}
_SMP_PRIMITIVE_MERGE = {"finalizers"}


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge patch for the core/v1 fields above: keyed lists merge, ``$patch`` directives honoured."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$retainKeys") or key == "$patch":
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            fld = key.split("/", 1)[1]
            result[fld] = [v for v in result.get(fld) or [] if v not in value]
            continue
        if key.startswith("$setElementOrder/"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in _SMP_MERGE_KEYS and isinstance(result.get(key), list):
            result[key] = _smp_merge_list(result[key], value, _SMP_MERGE_KEYS[key])
        elif isinstance(value, list) and key in _SMP_PRIMITIVE_MERGE and isinstance(result.get(key), list):
            merged = list(result[key])
            merged.extend(v for v in value if v not in merged)
            result[key] = merged
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = copy.deepcopy(value)
    return result


def _smp_merge_list(current: list, patch: list, merge_key: str) -> list:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")]
    result = [copy.deepcopy(i) for i in current]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise ApiError(400, f"map: {item!r} does not contain declared merge key: {merge_key}")
        idx = next((n for n, cur in enumerate(result) if isinstance(cur, dict) and cur.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                result.pop(idx)
            continue
        if idx is None:
            result.append({k: copy.deepcopy(v) for k, v in item.items() if v is not None})
        else:
            result[idx] = strategic_merge_patch(result[idx], item)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(400, f"json patch: invalid path {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc: Any, ops: list) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    doc = copy.deepcopy(doc)

    def parent(d: Any, parts: list[str]) -> tuple[Any, str]:
        cur = d
        for p in parts[:-1]:
            if isinstance(cur, list):
                cur = cur[int(p)]
            elif isinstance(cur, dict) and p in cur:
                cur = cur[p]
            else:
                raise ApiError(422, f"json patch: path segment {p!r} does not exist", reason="Invalid")
        return cur, parts[-1]

    def get(d: Any, parts: list[str]) -> Any:
        cur = d
        for p in parts:
            try:
                cur = cur[int(p)] if isinstance(cur, list) else cur[p]
            except (KeyError, IndexError, ValueError, TypeError):
                raise ApiError(422, f"json patch: path {'/'.join(parts)!r} does not exist", reason="Invalid") from None
        return cur

    def remove(d: Any, parts: list[str]) -> Any:
        par, last = parent(d, parts)
        try:
            return par.pop(int(last)) if isinstance(par, list) else par.pop(last)
        except (KeyError, IndexError, ValueError):
            raise ApiError(422, f"json patch: cannot remove missing path /{'/'.join(parts)}", reason="Invalid") from None

    def add(d: Any, parts: list[str], value: Any) -> Any:
        if not parts:
            return value
        par, last = parent(d, parts)
        if isinstance(par, list):
            if last == "-":
                par.append(value)
            else:
                par.insert(int(last), value)
        elif isinstance(par, dict):
            par[last] = value
        else:
            raise ApiError(422, f"json patch: cannot add at /{'/'.join(parts)}", reason="Invalid")
        return d

    if not isinstance(ops, list):
        raise ApiError(400, "json patch: the body must be a JSON array of operations")
    for op in ops:
        kind = op.get("op")
        parts = _pointer(op.get("path", ""))
        if kind == "add":
            doc = add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            remove(doc, parts)
        elif kind == "replace":
            get(doc, parts)
            if not parts:
                doc = copy.deepcopy(op.get("value"))
            else:
                par, last = parent(doc, parts)
                par[int(last) if isinstance(par, list) else last] = copy.deepcopy(op.get("value"))
        elif kind == "move":
            value = remove(doc, _pointer(op["from"]))
            doc = add(doc, parts, value)
        elif kind == "copy":
            doc = add(doc, parts, copy.deepcopy(get(doc, _pointer(op["from"]))))
        elif kind == "test":
            if get(doc, parts) != op.get("value"):
                raise ApiError(422, f"json patch: test operation failed at {op.get('path')}", reason="Invalid")
        else:
            raise ApiError(400, f"json patch: unknown operation {kind!r}")
    return doc
