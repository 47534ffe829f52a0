"""Label and field selectors as the API server parses and applies them (per-kind field sets)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

from .common import _deep, ApiError

@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present  # "!"


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


_SET_RE = re.compile(r"^([A-Za-z0-9./_-]+)\s+(in|notin)\s*\(([^()]*)\)$")
_EQ_RE = re.compile(r"^([A-Za-z0-9./_-]+)\s*(==|!=|=)\s*([A-Za-z0-9._-]*)$")
_KEY_RE = re.compile(r"^(!?)\s*([A-Za-z0-9./_-]+)$")


def parse_label_selector(text: str | None) -> list[_Requirement]:
    """Equality (``=``, ``==``, ``!=``) and set-based (``in``, ``notin``, ``key``, ``!key``) requirements."""
    if not text:
        return []
    reqs = []
    for part in _split_top_level(text):
        if m := _SET_RE.match(part):
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append(_Requirement(m.group(1), m.group(2), values))
        elif m := _EQ_RE.match(part):
            reqs.append(_Requirement(m.group(1), "!=" if m.group(2) == "!=" else "=", (m.group(3),)))
        elif m := _KEY_RE.match(part):
            reqs.append(_Requirement(m.group(2), "!" if m.group(1) else "exists"))
        else:
            raise ApiError(400, f"unable to parse requirement: {part!r}: invalid label selector")
    return reqs


def _pod_fields(obj: dict) -> dict[str, str]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return {
        "metadata.name": obj["metadata"].get("name", ""),
        "metadata.namespace": obj["metadata"].get("namespace", ""),
        "spec.nodeName": spec.get("nodeName", "") or "",
        "spec.restartPolicy": spec.get("restartPolicy", "") or "",
        "spec.schedulerName": spec.get("schedulerName", "") or "",
        "spec.serviceAccountName": spec.get("serviceAccountName", "") or "",
        "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
        "status.phase": status.get("phase", "") or "",
        "status.podIP": status.get("podIP", "") or "",
        "status.nominatedNodeName": status.get("nominatedNodeName", "") or "",
    }


def _node_fields(obj: dict) -> dict[str, str]:
    return {
        "metadata.name": obj["metadata"].get("name", ""),
        "spec.unschedulable": "true" if _deep(obj, "spec.unschedulable") else "false",
    }


def _event_fields(obj: dict) -> dict[str, str]:
    inv = obj.get("involvedObject") or {}
    src = obj.get("source") or {}
    return {
        "metadata.name": obj["metadata"].get("name", ""),
        "metadata.namespace": obj["metadata"].get("namespace", ""),
        "involvedObject.kind": inv.get("kind", "") or "",
        "involvedObject.namespace": inv.get("namespace", "") or "",
        "involvedObject.name": inv.get("name", "") or "",
        "involvedObject.uid": inv.get("uid", "") or "",
        "involvedObject.apiVersion": inv.get("apiVersion", "") or "",
        "involvedObject.resourceVersion": inv.get("resourceVersion", "") or "",
        "involvedObject.fieldPath": inv.get("fieldPath", "") or "",
        "reason": obj.get("reason", "") or "",
        "reportingComponent": obj.get("reportingComponent", "") or "",
        "source": src.get("component", "") or "",
        "type": obj.get("type", "") or "",
    }


def _events_v1_fields(obj: dict) -> dict[str, str]:
    """Field labels of events.k8s.io/v1 (computed on the core form the store keeps)."""
    core = _event_fields(obj)
    return {
        "metadata.name": core["metadata.name"],
        "metadata.namespace": core["metadata.namespace"],
        "regarding.kind": core["involvedObject.kind"],
        "regarding.namespace": core["involvedObject.namespace"],
        "regarding.name": core["involvedObject.name"],
        "regarding.uid": core["involvedObject.uid"],
        "regarding.apiVersion": core["involvedObject.apiVersion"],
        "regarding.resourceVersion": core["involvedObject.resourceVersion"],
        "regarding.fieldPath": core["involvedObject.fieldPath"],
        "reason": core["reason"],
        "reportingController": core["reportingComponent"],
        "type": core["type"],
    }


@dataclass(frozen=True)
class _Selector:
    labels: tuple[_Requirement, ...] = ()
    fields: tuple[tuple[str, bool, str], ...] = ()  # (field, equal?, value)
    namespace: str | None = None
    field_fn: Callable[[dict], dict[str, str]] | None = None

    def matches(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        if not all(r.matches(labels) for r in self.labels):
            return False
        if self.fields:
            values = self.field_fn(obj)
            for fld, equal, want in self.fields:
                if (values[fld] == want) != equal:
                    return False
        return True


def parse_field_selector(text: str | None, supported: Iterable[str], kind: str) -> tuple[tuple[str, bool, str], ...]:
    if not text:
        return ()
    allowed = set(supported)
    out = []
    for part in _split_top_level(text):
        m = re.match(r"^([A-Za-z.]+)\s*(==|!=|=)\s*(.*)$", part)
        if not m:
            raise ApiError(400, f"invalid selector: '{text}'; can't understand '{part}'")
        fld, op, value = m.group(1), m.group(2), m.group(3).strip()
        if fld not in allowed:
            raise ApiError(400, f'field label not supported: {fld}', details={"kind": kind})
        out.append((fld, op != "!=", value))
    return tuple(out)
