"""Scenario files -> :class:`~scheduler_engine.snapshot.Snapshot`, and back.

The scenario format (``shared/scenario-format.md``) is the engine's public input: operators write
it by hand for "what if" runs, the Django side writes it from the database, and golden test files
use it.  So validation is exhaustive and collects *every* problem with its path
(``jobs[3].tasks[0].gpu: must be >= 0``) instead of stopping at the first one: a person fixing a
file wants the whole list, and the Django caller wants to map each problem to a field.

Public API
----------
``load_scenario(path) -> Snapshot``         YAML (``.yaml``/``.yml``) or JSON file.
``load_dict(data, *, source="<dict>")``      an already-parsed scenario dict.
``snapshot_to_dict(snapshot) -> dict``       a scenario dict that loads back to an equal snapshot.
``snapshots_equal(a, b) -> bool``            field-by-field equality (numpy-aware, ignores ``source``).
``ScenarioError``                            ``.problems``: list of ``(path, message)``.
``validate_node / validate_queue / validate_job(row) -> [(path, message)]``  one row in scenario form,
                                             paths relative to the row (the contract every door checks).
``partition_scenario(data) -> Partition``    the rows the engine accepts, and those it refuses (with why).

Defaults follow the format: preemptible = priority < 100; minAvailable = number of tasks; task
name ``<job>-<index>``; queue priority 100; a queue resource field that is absent is 0 (KAI's CRD
has no default: quota 0, limit 0, weight 0 - see fairshare-spec a.1); ``overQuotaWeight: -1``
means unset and becomes 1; ``kValue`` 0.  Job priority defaults to 50 (train).
"""
from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass, fields
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import yaml

from .snapshot import (
    ACTION_NAMES,
    INPUT_STATES,
    NRES,
    RESOURCES,
    UNLIMITED,
    Config,
    DeviceClasses,
    Jobs,
    Nodes,
    Queues,
    Snapshot,
    SubGroups,
    TaskState,
    Tasks,
)
from .units import (
    MAX_DURATION,
    UnitError,
    format_cpu,
    format_duration,
    format_memory,
    parse_cpu,
    parse_duration,
    parse_gpu,
    parse_memory,
    parse_number,
)

__all__ = [
    "ScenarioError",
    "Partition",
    "Problem",
    "load_scenario",
    "load_dict",
    "label_key_problem",
    "partition_scenario",
    "validate_job",
    "validate_node",
    "validate_queue",
    "snapshot_to_dict",
    "snapshots_equal",
    "STATUS_LABELS",
    "JOB_STATUS_LABELS",
]

# statuses a cycle can report for a task / a job (expect values are checked against these)
STATUS_LABELS = tuple(s.label for s in TaskState)
JOB_STATUS_LABELS = STATUS_LABELS + ("Mixed",)

# Sanity bounds: far above any real cluster, low enough that a typo cannot allocate gigabytes.
MAX_GPUS_PER_NODE = 1_000_000
MAX_REPLICAS = 1_000_000
MAX_TASKS = 10_000_000
MAX_MINUTES = MAX_DURATION / 60.0
MAX_PRIORITY = 2**31 - 1
MAX_ROUNDS = 10_000
MAX_CONSOLIDATION_PREEMPTEES = 1_000_000
MAX_SCENARIO_SEARCH_BUDGET = 100_000_000
MAX_GPU_MEMORY_MIB = 2**40
MAX_PROBLEMS_SHOWN = 200
MAX_DEVICE_CLASSES = 1_000
MAX_DEVICES_PER_NODE = 1_000_000
MAX_SUBGROUPS_PER_JOB = 10_000

_TOP_KEYS = ("name", "config", "deviceClasses", "nodes", "queues", "jobs", "usage", "expect", "simulation")
#: Top-level blocks a Snapshot holds as arrays only (not copied into ``Snapshot.source``).
_CLUSTER_KEYS = frozenset(("nodes", "queues", "jobs"))
_CONFIG_KEYS = (
    "actions",
    "placement",
    "kValue",
    "defaultReclaimMinRuntime",
    "defaultPreemptMinRuntime",
    "reclaimMinRuntimeResolution",
    "reclaimerUtilizationMultiplier",
    "now",
    "rounds",
    "stalenessGracePeriod",
    "stableRounds",
    "maxConsolidationPreemptees",
    "scenarioSearchBudget",
)
_NODE_KEYS = ("name", "gpus", "gpuMemory", "cpu", "memory", "labels", "unschedulable", "ready", "reservedByOthers",
              "devices")
_DEVICE_CLASS_KEYS = ("name", "countsAs")
_COUNTS_AS = ("gpu",)
_QUEUE_KEYS = (
    "name",
    "parent",
    "priority",
    "createdMinutesAgo",
    "resources",
    "reclaimMinRuntime",
    "preemptMinRuntime",
)
_QUEUE_RES_KEYS = ("quota", "overQuotaWeight", "limit")
_JOB_KEYS = (
    "name",
    "queue",
    "priority",
    "preemptible",
    "minAvailable",
    "createdMinutesAgo",
    "startedMinutesAgo",
    "staleFor",
    "stalenessGracePeriod",
    "preemptionDelay",
    "topology",
    "tasks",
    "replicas",
    "task",
    "subGroups",
    "minSubGroups",
)
_SUBGROUP_KEYS = ("name", "parent", "minAvailable", "minSubGroups", "topology")
_TASK_KEYS = ("name", "gpu", "gpuMemory", "cpu", "memory", "state", "priority", "node", "gpuGroups", "nodeSelector",
              "subGroup", "claims", "devices")
_CLAIM_KEYS = ("deviceClass", "count")
_EXPECT_KEYS = ("jobs", "tasks", "queues", "nodes")
_EXPECT_JOB_KEYS = ("status", "node", "subGroups")
_EXPECT_TASK_KEYS = ("status", "node", "devices")
_EXPECT_SUBGROUP_KEYS = ("placed", "satisfied")
_EXPECT_QUEUE_KEYS = ("fairShare", "allocated")
_EXPECT_NODE_KEYS = ("idleGpus", "releasingGpus")
_SIM_KEYS = ("cycles", "cycleSeconds", "windowSize", "windowType", "halfLifePeriod", "arrivals")
_ARRIVAL_KEYS = (
    "queue",
    "count",
    "atCycle",
    "gpu",
    "gpuMemory",
    "cpu",
    "memory",
    "replicas",
    "duration",
    "priority",
    "preemptible",
    "minAvailable",
)
_PLACEMENTS = ("binpack", "spread")
_PLACEMENT_RESOURCES = ("gpu", "cpu")
_RESOLUTIONS = ("lca", "queue")
_NODE_STATES = ("Running", "Releasing", "StuckInReleasing")  # input states that hold a node

_PARSERS = {"gpu": parse_gpu, "cpu": parse_cpu, "memory": parse_memory}
_PARSED_MAX = 65536

#: The allowed-key tuples above as sets, for mapping()'s one-comparison check.
_KEY_SETS: dict[tuple, frozenset] = {
    keys: frozenset(keys) for name, keys in list(globals().items())
    if name.startswith("_") and name.endswith("_KEYS") and isinstance(keys, tuple)
}


class ScenarioError(ValueError):
    """An invalid scenario. ``problems`` lists every ``(path, message)`` found."""

    def __init__(self, problems: list[tuple[str, str]], source: str = "<dict>"):
        self.problems = list(problems)
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        lines = [f"{p}: {m}" if p else m for p, m in self.problems[:MAX_PROBLEMS_SHOWN]]
        if len(self.problems) > MAX_PROBLEMS_SHOWN:
            lines.append(f"... and {len(self.problems) - MAX_PROBLEMS_SHOWN} more problems")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self._render()


# --------------------------------------------------------------------------------------------------
# reading files


_SafeBase = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml parser when available (much faster)


class _UniqueKeyLoader(_SafeBase):  # type: ignore[misc, valid-type]
    """Safe loader that refuses duplicate mapping keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, f"unhashable mapping key {key!r}", key_node.start_mark
            ) from None
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in a scenario")


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def load_scenario(path: str | Path) -> Snapshot:
    """Load and validate one scenario file (YAML, or JSON when the name ends in ``.json``)."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError([("", f"cannot read scenario file: {exc}")], source) from None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_json_pairs)
        else:
            data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        kind = "JSON" if path.suffix.lower() == ".json" else "YAML"
        raise ScenarioError([("", f"not valid {kind}: {exc}")], source) from None
    return load_dict(data, source=source)


def load_dict(data: Any, *, source: str = "<dict>") -> Snapshot:
    """Validate a parsed scenario dict and build the snapshot; raises :class:`ScenarioError`."""
    v = _Validator()
    snap = v.scenario(data, source)
    if v.problems:
        raise ScenarioError(v.problems, source)
    assert snap is not None
    return snap


# --------------------------------------------------------------------------------------------------
# the contract, one row at a time
#
# The control plane checks every write against these (API, admin, services, scenario import,
# Kubernetes sync) and the scheduling cycle quarantines whatever still fails them, so the rules
# live here once: the loader's own checks, run on one node / queue / job in scenario form.

Problem = tuple[str, str]

_LABEL_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
_DNS_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes label key (``[prefix/]name``: the prefix a DNS subdomain of
    at most 253 characters, the name at most 63 alphanumerics, '-', '_', '.'), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return "is not a Kubernetes label key: the prefix before '/' is empty"
    if not name or len(name) > 63 or not _LABEL_NAME_RE.match(name):
        return ("is not a Kubernetes label key: the name must be 1 to 63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix)):
        return "is not a Kubernetes label key: the prefix must be a DNS subdomain (lower case, at most 253 characters)"
    return None


def _relative(problems: list[Problem], prefix: str) -> list[Problem]:
    """Problems of row ``prefix`` (``jobs[0]``) with paths relative to the row (``tasks[1].gpu``)."""
    out = []
    for path, msg in problems:
        msg = msg.replace(f"{prefix}.", "")  # references to sibling fields, e.g. "(also tasks[0].name)"
        if path == prefix:
            out.append(("", msg))
        elif path.startswith(prefix + "."):
            out.append((path[len(prefix) + 1:], msg))
        elif path.startswith(prefix + "["):
            out.append((path[len(prefix):], msg))
    return out


def validate_node(node: Any, *, device_classes: Any = None) -> list[Problem]:
    """The loader's rules for one node dict (``nodes[i]`` of a scenario); paths relative to it
    (``reservedByOthers.gpu``, ``devices.<class>``).  ``device_classes`` is the scenario's
    ``deviceClasses`` list the node's ``devices`` refer to.  Empty list = valid."""
    v = _Validator()
    v.dclasses = v.device_classes(device_classes)
    v.problems.clear()  # the caller's device classes are not the node's problem
    v.nodes([node])
    return _relative(v.problems, "nodes[0]")


def validate_queue(queue: Any) -> list[Problem]:
    """The loader's rules for one queue's own fields (``resources.memory.quota``, ``priority``,
    ...).  Its ``parent`` is not resolved: the tree (unknown parents, cycles) is a property of
    all queues together, checked by :func:`load_dict` and :func:`partition_scenario`."""
    v = _Validator()
    rows = [queue]
    if isinstance(queue, dict) and isinstance(queue.get("parent"), str) and queue.get("parent") != queue.get("name"):
        rows = [queue, {"name": queue["parent"]}]  # a stand-in, so the reference resolves
    v.queues(rows)
    return _relative(v.problems, "queues[0]")


def validate_job(job: Any, *, nodes: Iterable[str | dict] = (), device_classes: Any = None) -> list[Problem]:
    """The loader's rules for one job and its tasks (``tasks[2].gpu``, ``task.gpuMemory``,
    ``minAvailable``, ``subGroups[1].parent``, ``tasks[0].claims[0].deviceClass``).  Its queue is
    taken to be an existing leaf queue (the caller resolves queues); a task's ``node`` must be one
    of ``nodes`` (names, or node dicts when a task pins the node's ``devices``); claims refer to
    ``device_classes`` (the scenario's ``deviceClasses`` list)."""
    return check_job(job, nodes=nodes, device_classes=device_classes)[0]


def check_job(job: Any, *, nodes: Iterable[str | dict] = (), device_classes: Any = None) -> tuple[list[Problem], int]:
    """:func:`validate_job` and the job's gang size as the engine takes it: ``minAvailable`` (default
    all tasks), or with ``subGroups`` the fewest tasks that satisfy the root (0 when invalid)."""
    v = _Validator()
    v.dclasses = v.device_classes(device_classes)
    rows: dict[str, dict] = {}
    for n in nodes:
        row = {"name": n} if isinstance(n, str) else n
        rows.setdefault(row.get("name") if isinstance(row, dict) else None, row)
    node_table = v.nodes(list(rows.values()))
    queue_name = job.get("queue") if isinstance(job, dict) else None
    queue_table = v.queues([{"name": queue_name}] if isinstance(queue_name, str) and queue_name.strip() else [])
    v.problems.clear()  # the stand-ins' own problems (none expected) are not the job's
    jobs, _ = v.jobs([job], node_table, queue_table)
    problems = _relative(v.problems, "jobs[0]")
    return problems, (0 if problems or not len(jobs) else int(jobs.min_available[0]))


@dataclass
class Partition:
    """A scenario split into what the engine accepts and what it refuses, row by row.

    ``data`` is the scenario without the refused rows; ``refused`` maps ``"nodes"`` / ``"queues"``
    / ``"jobs"`` to ``{index in the input list: [(path relative to the row, reason), ...]}``;
    ``problems`` are those no row can be blamed for (``config``): the scenario is unusable.
    """

    data: dict[str, Any]
    refused: dict[str, dict[int, list[Problem]]]
    problems: list[Problem]


_ROW_RE = re.compile(r"^(nodes|queues|jobs)\[(\d+)\](?:\.|\[|$)")
_USAGE_RE = re.compile(r"^usage\.([^.]+)")
MAX_PARTITION_PASSES = 8


def partition_scenario(data: Any) -> Partition:
    """Split a scenario into the rows the engine accepts and the rows it refuses.

    One refused row does not refuse the rest: the scheduling cycle runs the engine on
    ``Partition.data`` and reports the refused rows.  What a refused row takes with it:

    * a queue: its whole subtree (a child cannot be placed in a tree without its parent) and
      every job on those queues;
    * a node: every job with a task on it (the task's resources cannot be accounted);
    * a ``usage`` entry: only itself (the queue is scheduled without usage history).

    Problems outside the rows (``config``) are returned in ``problems``: then nothing runs.
    """
    if not isinstance(data, dict):
        return Partition(data={}, refused={"nodes": {}, "queues": {}, "jobs": {}},
                         problems=[("", f"a scenario must be a mapping at the top level, got {_type_name(data)}")])
    work = dict(data)
    rows: dict[str, list[tuple[int, Any]]] = {}
    for part in ("nodes", "queues", "jobs"):
        items = data.get(part)
        rows[part] = list(enumerate(items)) if isinstance(items, list) else []
    refused: dict[str, dict[int, list[Problem]]] = {"nodes": {}, "queues": {}, "jobs": {}}
    usage = dict(data["usage"]) if isinstance(data.get("usage"), dict) else data.get("usage")
    for _ in range(MAX_PARTITION_PASSES):
        for part in rows:
            if isinstance(data.get(part), list):
                work[part] = [r for _, r in rows[part]]
        if usage is not None:
            work["usage"] = usage
        v = _Validator()
        v.scenario(work, "<partition>")
        if not v.problems:
            return Partition(data=work, refused=refused, problems=[])
        other: list[Problem] = []
        new: dict[str, set[int]] = {"nodes": set(), "queues": set(), "jobs": set()}
        for path, msg in v.problems:
            m = _ROW_RE.match(path)
            if m:
                part, pos = m.group(1), int(m.group(2))
                orig = rows[part][pos][0]
                refused[part].setdefault(orig, []).extend(_relative([(path, msg)], f"{part}[{pos}]"))
                new[part].add(pos)
                continue
            u = _USAGE_RE.match(path)
            if u and isinstance(usage, dict) and u.group(1) in usage:
                usage.pop(u.group(1))
                continue
            other.append((path, msg))
        if other:
            return Partition(data=work, refused=refused, problems=other)
        _cascade(rows, new, refused)
        for part in rows:
            rows[part] = [(o, r) for k, (o, r) in enumerate(rows[part]) if k not in new[part]]
    return Partition(data=work, refused=refused,
                     problems=[("", f"still invalid after {MAX_PARTITION_PASSES} passes of removing refused rows")])


def _name_of(row: Any) -> str | None:
    name = row.get("name") if isinstance(row, dict) else None
    return name if isinstance(name, str) else None


def _cascade(rows: dict[str, list[tuple[int, Any]]], new: dict[str, set[int]],
             refused: dict[str, dict[int, list[Problem]]]) -> None:
    """Add to ``new`` (positions in ``rows``) what the refused rows take with them."""
    def first(part: str, pos: int) -> str:
        path, msg = refused[part][rows[part][pos][0]][0]
        return f"{path}: {msg}" if path else msg

    bad_queue: dict[str, str] = {}
    for pos in new["queues"]:
        name = _name_of(rows["queues"][pos][1])
        if name is not None:
            bad_queue[name] = f"queue {name!r} is refused ({first('queues', pos)})"
    # descendants, to a fixed point (a parent may come after its child in the list)
    changed = True
    while changed and bad_queue:
        changed = False
        for pos, (orig, q) in enumerate(rows["queues"]):
            name, parent = _name_of(q), q.get("parent") if isinstance(q, dict) else None
            if pos in new["queues"] or name is None or not isinstance(parent, str) or parent not in bad_queue:
                continue
            new["queues"].add(pos)
            refused["queues"].setdefault(orig, []).append(("parent", f"parent {bad_queue[parent]}"))
            bad_queue[name] = f"queue {name!r} is refused (its parent {bad_queue[parent]})"
            changed = True
    bad_node: dict[str, str] = {}
    for pos in new["nodes"]:
        name = _name_of(rows["nodes"][pos][1])
        if name is not None:
            bad_node[name] = f"node {name!r} is refused ({first('nodes', pos)})"
    if not bad_queue and not bad_node:
        return
    for pos, (orig, job) in enumerate(rows["jobs"]):
        if pos in new["jobs"] or not isinstance(job, dict):
            continue
        reason: Problem | None = None
        if isinstance(job.get("queue"), str) and job["queue"] in bad_queue:
            reason = ("queue", bad_queue[job["queue"]])
        elif bad_node:
            tasks = job.get("tasks")
            if isinstance(tasks, list):
                for k, t in enumerate(tasks):
                    node = t.get("node") if isinstance(t, dict) else None
                    if isinstance(node, str) and node in bad_node:
                        reason = (f"tasks[{k}].node", bad_node[node])
                        break
        if reason is not None:
            new["jobs"].add(pos)
            refused["jobs"].setdefault(orig, []).append(reason)


# --------------------------------------------------------------------------------------------------
# validation

_BAD = object()  # marks a value that failed validation (a problem was already recorded)


def _type_name(x: Any) -> str:
    if x is None:
        return "null"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer", float: "a number"}.get(
        type(x), type(x).__name__
    )


class _Validator:
    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []
        # names declared in the file, valid or not: a reference to an invalid object is not also
        # reported as "unknown" (its own problem already is)
        self.declared: dict[str, set[str]] = {"node": set(), "queue": set(), "job": set(), "task": set(),
                                              "deviceClass": set()}
        # device classes of the scenario (``deviceClasses``): nodes offer them, tasks claim them
        self.dclasses: DeviceClasses = DeviceClasses()
        # every job's subgroups, built by jobs() beside the Jobs / Tasks tables
        self.sub_groups: SubGroups = SubGroups()
        # (template dict, parsed values) of the latest `replicas` template that validated
        self._template: tuple | None = None
        # resource() results by (resource, type, value, allow_negative)
        self._parsed: dict[tuple, float] = {}

    # ---- primitives -----------------------------------------------------------------------------

    def err(self, path: str, msg: str) -> Any:
        self.problems.append((path, msg))
        return _BAD

    def mapping(self, x: Any, path: str, allowed: Iterable[str] | None) -> dict | Any:
        if type(x) is dict and allowed is not None:
            # The common case in one set comparison (C): a plain dict whose keys are all allowed
            # (a key that is not a string is never among them). 134,000 tasks at 10,000 nodes.
            known = _KEY_SETS.get(allowed) if isinstance(allowed, tuple) else None
            if known is not None and x.keys() <= known:
                return x
        if not isinstance(x, dict):
            return self.err(path, f"must be a mapping, got {_type_name(x)}")
        for k in x:
            if not isinstance(k, str):
                self.err(f"{path}.{k}" if path else str(k), f"keys must be strings, got {_type_name(k)}")
        if allowed is not None:
            allowed = tuple(allowed)
            for k in x:
                if isinstance(k, str) and k not in allowed:
                    self.err(_join(path, k), f"unknown key (allowed: {', '.join(allowed)})")
        return x

    def list_(self, x: Any, path: str) -> list | Any:
        if not isinstance(x, list):
            return self.err(path, f"must be a list, got {_type_name(x)}")
        return x

    def string(self, x: Any, path: str, *, nonempty: bool = True) -> str | Any:
        if not isinstance(x, str):
            return self.err(path, f"must be a string, got {_type_name(x)}")
        if nonempty and not x.strip():
            return self.err(path, "must not be empty")
        return x

    def choice(self, x: Any, path: str, options: Iterable[str]) -> str | Any:
        options = tuple(options)
        if not isinstance(x, str) or x not in options:
            return self.err(path, f"must be one of {', '.join(options)}, got {x!r}")
        return x

    def boolean(self, x: Any, path: str) -> bool | Any:
        if not isinstance(x, bool):
            return self.err(path, f"must be true or false, got {_type_name(x)} {x!r}")
        return x

    def integer(self, x: Any, path: str, *, minimum: int | None = None, maximum: int | None = None) -> int | Any:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            return self.err(path, f"must be an integer, got {_type_name(x)} {x!r}")
        if isinstance(x, float):
            if not math.isfinite(x) or not x.is_integer():
                return self.err(path, f"must be an integer, got {x!r}")
            x = int(x)
        if minimum is not None and x < minimum:
            return self.err(path, f"must be >= {minimum}, got {x}")
        if maximum is not None and x > maximum:
            return self.err(path, f"is too large: {x} (at most {maximum})")
        return x

    def number(
        self, x: Any, path: str, *, allow_negative: bool = False, maximum: float | None = None, minimum: float | None = None
    ) -> float | Any:
        try:
            val = parse_number(x, allow_negative=True, maximum=maximum if maximum is not None else float(2**63))
        except UnitError as exc:
            return self.err(path, str(exc))
        if minimum is not None and val < minimum:
            return self.err(path, f"must be >= {minimum:g}, got {x!r}")
        if val < 0 and not allow_negative:
            return self.err(path, f"must be >= 0, got {x!r}")
        return val

    def resource(self, x: Any, path: str, res: str, *, allow_negative: bool = False) -> float | Any:
        # A scenario repeats a few request values ("500m", 1, 2**30) over every task: each distinct
        # (resource, type, value) is parsed once per load. The type is part of the key because
        # True == 1 == 1.0 hash alike and a bool is refused; failures are not remembered.
        key = (res, type(x), x, allow_negative)
        try:
            return self._parsed[key]
        except KeyError:
            pass
        except TypeError:  # unhashable (a list or a dict given as a quantity): the parser names it
            key = None
        try:
            value = _PARSERS[res](x, allow_negative=allow_negative)
        except UnitError as exc:
            return self.err(path, str(exc))
        if key is not None and len(self._parsed) < _PARSED_MAX:
            self._parsed[key] = value
        return value

    def duration(self, x: Any, path: str, *, allow_negative: bool = False, nullable: bool = True) -> float | Any:
        """Seconds; ``nan`` for null when nullable."""
        if x is None:
            if nullable:
                return math.nan
            return self.err(path, "must be a duration, got null")
        try:
            return parse_duration(x, allow_negative=allow_negative)
        except UnitError as exc:
            return self.err(path, str(exc))

    def minutes(self, x: Any, path: str, *, nullable: bool) -> float | Any:
        if x is None and nullable:
            return math.nan
        return self.number(x, path, maximum=MAX_MINUTES)

    def str_map(self, x: Any, path: str) -> dict[str, str] | Any:
        """Label maps (node labels, node selectors): Kubernetes label keys, string (or integer,
        stringified) values.  A key Kubernetes would refuse can never match a node label, so a
        selector using one is a typo, not a constraint."""
        if x is None:
            return {}
        if self.mapping(x, path, None) is _BAD:
            return _BAD
        out: dict[str, str] = {}
        bad = False
        for k, val in x.items():
            if not isinstance(k, str):
                continue  # already reported by mapping()
            why = label_key_problem(k)
            if why is not None:
                self.err(_join(path, k), why)
                bad = True
                continue
            if isinstance(val, bool) or not isinstance(val, (str, int)):
                self.err(_join(path, k), f"must be a string, got {_type_name(val)}")
                continue
            out[k] = str(val)
        return _BAD if bad else out

    # ---- scenario -------------------------------------------------------------------------------

    def scenario(self, data: Any, source: str) -> Snapshot | None:
        if self.mapping(data, "", _TOP_KEYS) is _BAD:
            self.problems[-1] = ("", f"a scenario must be a mapping at the top level, got {_type_name(data)}")
            return None
        name = data.get("name", Path(source).stem if source != "<dict>" else "")
        if name is None:
            name = ""
        if not isinstance(name, str):
            self.err("name", f"must be a string, got {_type_name(name)}")
            name = str(name)

        config = self.config(data.get("config"))
        self.dclasses = dclasses = self.device_classes(data.get("deviceClasses"))
        nodes = self.nodes(data.get("nodes"))
        queues = self.queues(data.get("queues"))
        jobs, tasks = self.jobs(data.get("jobs"), nodes, queues)
        usage = self.usage(data.get("usage"), queues)
        expect = data.get("expect")
        if expect is not None:
            self.expect(expect, nodes, queues, jobs, tasks)
        if data.get("simulation") is not None:
            self.simulation(data["simulation"], queues)
        if self.problems:
            return None
        return Snapshot(
            name=name,
            config=config,
            nodes=nodes,
            queues=queues,
            jobs=jobs,
            tasks=tasks,
            usage=usage,
            expect=copy.deepcopy(expect) if expect is not None else None,
            # the cluster itself (nodes, queues, jobs) lives in the arrays: copying it too cost 6 s of
            # a 10,000-node cycle's load phase (2.7 million values) for blocks nothing reads back
            source=_jsonable({k: v for k, v in data.items() if k not in _CLUSTER_KEYS}),
            sub_groups=self.sub_groups,
            device_classes=dclasses,
        )

    def config(self, c: Any) -> Config:
        cfg = Config()
        if c is None:
            return cfg
        if self.mapping(c, "config", _CONFIG_KEYS) is _BAD:
            return cfg
        if c.get("actions") is not None:
            acts = self.list_(c["actions"], "config.actions")
            if acts is not _BAD:
                out: list[str] = []
                for i, a in enumerate(acts):
                    a = self.choice(a, f"config.actions[{i}]", ACTION_NAMES)
                    if a is _BAD:
                        continue
                    if a in out:
                        self.err(f"config.actions[{i}]", f"action {a!r} is listed twice")
                        continue
                    out.append(a)
                cfg.actions = tuple(out)
        if c.get("placement") is not None:
            p = c["placement"]
            if self.mapping(p, "config.placement", _PLACEMENT_RESOURCES) is not _BAD:
                placement = dict(cfg.placement)
                for res in _PLACEMENT_RESOURCES:
                    if res in p:
                        val = self.choice(p[res], f"config.placement.{res}", _PLACEMENTS)
                        if val is not _BAD:
                            placement[res] = val
                cfg.placement = placement
        if c.get("kValue") is not None:
            k = self.number(c["kValue"], "config.kValue", maximum=1e12)
            if k is not _BAD:
                cfg.k_value = k
        for key, attr in (("defaultReclaimMinRuntime", "default_reclaim_min_runtime"),
                          ("defaultPreemptMinRuntime", "default_preempt_min_runtime")):
            if c.get(key) is not None:
                d = self.duration(c[key], f"config.{key}", nullable=False)
                if d is not _BAD:
                    setattr(cfg, attr, d)
        if c.get("reclaimMinRuntimeResolution") is not None:
            r = self.choice(c["reclaimMinRuntimeResolution"], "config.reclaimMinRuntimeResolution", _RESOLUTIONS)
            if r is not _BAD:
                cfg.reclaim_min_runtime_resolution = r
        if c.get("reclaimerUtilizationMultiplier") is not None:
            m = self.number(c["reclaimerUtilizationMultiplier"], "config.reclaimerUtilizationMultiplier",
                            minimum=1.0, maximum=1e6)
            if m is not _BAD:
                cfg.reclaimer_utilization_multiplier = m
        if "now" in c:
            now = self.timestamp(c["now"], "config.now")
            if now is not _BAD:
                cfg.now = now
        if c.get("rounds") is not None:
            r = self.integer(c["rounds"], "config.rounds", minimum=1, maximum=MAX_ROUNDS)
            if r is not _BAD:
                cfg.rounds = r
                cfg.rounds_given = True
        if c.get("stableRounds") is not None:
            r = self.integer(c["stableRounds"], "config.stableRounds", minimum=0, maximum=MAX_ROUNDS)
            if r is not _BAD:
                cfg.stable_rounds = r
        if c.get("stalenessGracePeriod") is not None:
            g = self.duration(c["stalenessGracePeriod"], "config.stalenessGracePeriod", allow_negative=True,
                              nullable=False)
            if g is not _BAD:
                cfg.staleness_grace_period = g
        if c.get("maxConsolidationPreemptees") is not None:
            n = self.integer(c["maxConsolidationPreemptees"], "config.maxConsolidationPreemptees", minimum=-1,
                             maximum=MAX_CONSOLIDATION_PREEMPTEES)
            if n is not _BAD:
                cfg.max_consolidation_preemptees = n
        if c.get("scenarioSearchBudget") is not None:
            n = self.integer(c["scenarioSearchBudget"], "config.scenarioSearchBudget", minimum=-1,
                             maximum=MAX_SCENARIO_SEARCH_BUDGET)
            if n is not _BAD:
                cfg.scenario_search_budget = n
        return cfg

    def timestamp(self, x: Any, path: str) -> datetime | None | Any:
        if x is None:
            return None
        if isinstance(x, datetime):
            dt = x
        elif isinstance(x, date):
            dt = datetime(x.year, x.month, x.day)
        elif isinstance(x, str):
            try:
                dt = datetime.fromisoformat(x.strip())
            except ValueError:
                return self.err(path, f"must be an ISO 8601 timestamp like '2026-01-01T00:00:00Z', got {x!r}")
        else:
            return self.err(path, f"must be an ISO 8601 timestamp string, got {_type_name(x)}")
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return dt.astimezone(timezone.utc)

    # ---- device classes (dynamic resource allocation) --------------------------------------------

    def device_classes(self, raw: Any) -> DeviceClasses:
        """``deviceClasses``: named classes of devices nodes offer and tasks claim. ``countsAs: gpu``
        (or, without ``countsAs``, a name containing "gpu" in any case, KAI ``IsGPUDeviceClass``)
        makes a claimed device count as one GPU in quota, fair share and node capacity."""
        names: list[str] = []
        as_gpu: list[bool] = []
        seen: dict[str, int] = {}
        items = [] if raw is None else self.list_(raw, "deviceClasses")
        if items is _BAD:
            items = []
        if len(items) > MAX_DEVICE_CLASSES:
            self.err("deviceClasses", f"too many device classes: {len(items)} (at most {MAX_DEVICE_CLASSES})")
            items = []
        for i, c in enumerate(items):
            p = f"deviceClasses[{i}]"
            if self.mapping(c, p, _DEVICE_CLASS_KEYS) is _BAD:
                continue
            name = self.string(c.get("name"), f"{p}.name") if "name" in c else self.err(f"{p}.name", "is required")
            if isinstance(name, str):
                self.declared["deviceClass"].add(name)
            if name is not _BAD:
                if name in seen:
                    self.err(f"{p}.name", f"duplicate device class name {name!r} (also deviceClasses[{seen[name]}])")
                    name = _BAD
                else:
                    seen[name] = i
            counts = c.get("countsAs")
            if counts is not None:
                counts = self.choice(counts, f"{p}.countsAs", _COUNTS_AS)
            if _BAD in (name, counts):
                continue
            names.append(name)
            as_gpu.append(counts == "gpu" if counts is not None else "gpu" in name.lower())
        return DeviceClasses(names=names, counts_as_gpu=np.array(as_gpu, dtype=bool))

    def device_counts(self, x: Any, path: str) -> dict[int, int] | Any:
        """A node's ``devices``: device class -> number of devices offered (a whole number >= 0)."""
        if x is None:
            return {}
        if self.mapping(x, path, None) is _BAD:
            return _BAD
        out: dict[int, int] = {}
        ok = True
        for k, val in x.items():
            if not isinstance(k, str):
                ok = False
                continue
            kp = _join(path, k)
            if k not in self.dclasses.index:
                if k not in self.declared["deviceClass"]:
                    self.err(kp, f"unknown device class {k!r} (declare it in deviceClasses)")
                ok = False
                continue
            n = self.integer(val, kp, minimum=0, maximum=MAX_DEVICES_PER_NODE)
            if n is _BAD:
                ok = False
                continue
            out[self.dclasses.index[k]] = n
        return out if ok else _BAD

    # ---- nodes ----------------------------------------------------------------------------------

    def nodes(self, raw: Any) -> Nodes:
        names: list[str] = []
        cap: list[list[float]] = []
        reserved: list[list[float]] = []
        gpus: list[int] = []
        gpu_mem: list[float] = []
        labels: list[dict[str, str]] = []
        unsched: list[bool] = []
        ready: list[bool] = []
        devices: list[dict[int, int]] = []
        seen: dict[str, int] = {}
        items = [] if raw is None else self.list_(raw, "nodes")
        if items is _BAD:
            items = []
        for i, n in enumerate(items):
            p = f"nodes[{i}]"
            if self.mapping(n, p, _NODE_KEYS) is _BAD:
                continue
            name = self.string(n.get("name"), f"{p}.name") if "name" in n else self.err(f"{p}.name", "is required")
            if isinstance(name, str):
                self.declared["node"].add(name)
            if name is not _BAD:
                if name in seen:
                    self.err(f"{p}.name", f"duplicate node name {name!r} (also nodes[{seen[name]}])")
                    name = _BAD
                else:
                    seen[name] = i
            g = self.integer(_opt(n, "gpus", 0), f"{p}.gpus", minimum=0, maximum=MAX_GPUS_PER_NODE)
            gm = n.get("gpuMemory")
            gm = 0.0 if gm is None else self.number(gm, f"{p}.gpuMemory", maximum=MAX_GPU_MEMORY_MIB)
            cpu = self.resource(_opt(n, "cpu", 0), f"{p}.cpu", "cpu")
            mem = self.resource(_opt(n, "memory", 0), f"{p}.memory", "memory")
            lab = self.str_map(n.get("labels"), f"{p}.labels")
            us = self.boolean(_opt(n, "unschedulable", False), f"{p}.unschedulable")
            rd = self.boolean(_opt(n, "ready", True), f"{p}.ready")
            rsv = [0.0, 0.0, 0.0]
            rsv_ok: Any = True
            r = n.get("reservedByOthers")
            if r is not None and self.mapping(r, f"{p}.reservedByOthers", RESOURCES) is not _BAD:
                for k, res in enumerate(RESOURCES):
                    if res in r:
                        val = self.resource(r[res], f"{p}.reservedByOthers.{res}", res)
                        rsv[k] = 0.0 if val is _BAD else val
                # Other schedulers' pods cannot hold more than the node has: a larger value is a
                # typo that would make the node's free capacity negative.
                for k, (res, have) in enumerate(zip(RESOURCES, (g, cpu, mem))):
                    if res in r and have is not _BAD and rsv[k] > float(have):
                        shown = format_cpu(have) if res == "cpu" else _num(have)
                        what = "gpus" if res == "gpu" else res
                        rsv_ok = self.err(f"{p}.reservedByOthers.{res}",
                                          f"must be <= the node's {what} ({shown}), got {r[res]!r}")
            dv = self.device_counts(n.get("devices"), f"{p}.devices")
            if _BAD in (name, g, gm, cpu, mem, lab, us, rd, dv, rsv_ok):
                continue
            names.append(name)
            devices.append(dv)
            cap.append([float(g), cpu, mem])
            reserved.append(rsv)
            gpus.append(g)
            gpu_mem.append(gm)
            labels.append(lab)
            unsched.append(us)
            ready.append(rd)
        return Nodes(
            names=names,
            capacity=np.array(cap, dtype=np.float64).reshape(-1, NRES),
            reserved=np.array(reserved, dtype=np.float64).reshape(-1, NRES),
            gpus=np.array(gpus, dtype=np.int64),
            gpu_memory=np.array(gpu_mem, dtype=np.float64),
            labels=labels,
            unschedulable=np.array(unsched, dtype=bool),
            ready=np.array(ready, dtype=bool),
            devices=_count_matrix(devices, len(self.dclasses)),
        )

    # ---- queues ---------------------------------------------------------------------------------

    def queue_value(self, x: Any, path: str, res: str, *, unlimited_ok: bool) -> float | Any:
        """A quota/limit: ``-1`` = unlimited, otherwise a resource amount >= 0 (task-request units)."""
        if unlimited_ok and not isinstance(x, bool) and isinstance(x, (int, float)) and x == -1:
            return UNLIMITED
        if unlimited_ok and isinstance(x, str) and x.strip() == "-1":
            return UNLIMITED
        try:
            return _PARSERS[res](x)
        except UnitError as exc:
            hint = " (or -1 for unlimited)" if unlimited_ok else ""
            return self.err(path, f"{exc}{hint}")

    def queues(self, raw: Any) -> Queues:
        items = [] if raw is None else self.list_(raw, "queues")
        if items is _BAD:
            items = []
        names: list[str] = []
        parent_names: list[tuple[str | None, str]] = []  # (parent name, path)
        prio: list[int] = []
        created: list[float] = []
        deserved: list[list[float]] = []
        weight: list[list[float]] = []
        limit: list[list[float]] = []
        rmr: list[float] = []
        pmr: list[float] = []
        seen: dict[str, int] = {}
        for i, q in enumerate(items):
            p = f"queues[{i}]"
            if self.mapping(q, p, _QUEUE_KEYS) is _BAD:
                continue
            name = self.string(q.get("name"), f"{p}.name") if "name" in q else self.err(f"{p}.name", "is required")
            if isinstance(name, str):
                self.declared["queue"].add(name)
            if name is not _BAD:
                if name in seen:
                    self.err(f"{p}.name", f"duplicate queue name {name!r} (also queues[{seen[name]}])")
                    name = _BAD
                else:
                    seen[name] = i
            par = q.get("parent")
            if par is not None:
                par = self.string(par, f"{p}.parent")
            pr = self.integer(_opt(q, "priority", 100), f"{p}.priority", minimum=-MAX_PRIORITY, maximum=MAX_PRIORITY)
            ca = self.minutes(_opt(q, "createdMinutesAgo", 0), f"{p}.createdMinutesAgo", nullable=False)
            d = [0.0] * NRES
            w = [0.0] * NRES
            lim = [0.0] * NRES
            res_ok = True
            rs = q.get("resources")
            if rs is not None and self.mapping(rs, f"{p}.resources", RESOURCES) is not _BAD:
                for k, res in enumerate(RESOURCES):
                    if res not in rs:
                        continue
                    rp = f"{p}.resources.{res}"
                    spec = rs[res]
                    if spec is None:
                        continue
                    if self.mapping(spec, rp, _QUEUE_RES_KEYS) is _BAD:
                        res_ok = False
                        continue
                    if spec.get("quota") is not None:
                        val = self.queue_value(spec["quota"], f"{rp}.quota", res, unlimited_ok=True)
                        res_ok &= val is not _BAD
                        d[k] = val if val is not _BAD else 0.0
                    if spec.get("limit") is not None:
                        val = self.queue_value(spec["limit"], f"{rp}.limit", res, unlimited_ok=True)
                        res_ok &= val is not _BAD
                        lim[k] = val if val is not _BAD else 0.0
                    if spec.get("overQuotaWeight") is not None:
                        ow = spec["overQuotaWeight"]
                        if not isinstance(ow, bool) and isinstance(ow, (int, float)) and ow == -1:
                            w[k] = 1.0  # -1 = unset, treated as 1 (scenario-format "Units")
                        else:
                            val = self.number(ow, f"{rp}.overQuotaWeight", maximum=1e12)
                            if val is _BAD:
                                self.problems[-1] = (
                                    f"{rp}.overQuotaWeight",
                                    self.problems[-1][1] + " (or -1 for unset)",
                                )
                                res_ok = False
                            else:
                                w[k] = val
            elif rs is not None:
                res_ok = False
            r1 = self.duration(q.get("reclaimMinRuntime"), f"{p}.reclaimMinRuntime")
            r2 = self.duration(q.get("preemptMinRuntime"), f"{p}.preemptMinRuntime")
            if _BAD in (name, par, pr, ca, r1, r2) or not res_ok:
                continue
            names.append(name)
            parent_names.append((par, f"{p}.parent"))
            prio.append(pr)
            created.append(ca)
            deserved.append(d)
            weight.append(w)
            limit.append(lim)
            rmr.append(r1)
            pmr.append(r2)
        index = {n: i for i, n in enumerate(names)}
        parent = np.full(len(names), -1, dtype=np.int64)
        for i, (par, path) in enumerate(parent_names):
            if par is None:
                continue
            if par not in index:
                if par in seen:  # the parent exists but was invalid; its own problem is reported
                    continue
                self.err(path, f"unknown parent queue {par!r}")
            elif par == names[i]:
                self.err(path, "a queue cannot be its own parent")
            else:
                parent[i] = index[par]
        # cycle detection: walk up from every queue, at most Q steps
        reported: set[int] = set()
        for i in range(len(names)):
            chain = [i]
            j = int(parent[i])
            while j >= 0 and j not in chain and len(chain) <= len(names):
                chain.append(j)
                j = int(parent[j])
            if j >= 0 and j in chain:
                cyc = chain[chain.index(j):]
                if not reported.intersection(cyc):
                    reported.update(cyc)
                    ring = " -> ".join(names[c] for c in cyc + [j])
                    self.err(parent_names[j][1], f"cycle in the queue tree: {ring}")
        return Queues(
            names=names,
            parent=parent,
            priority=np.array(prio, dtype=np.int64),
            created_minutes_ago=np.array(created, dtype=np.float64),
            deserved=np.array(deserved, dtype=np.float64).reshape(-1, NRES),
            weight=np.array(weight, dtype=np.float64).reshape(-1, NRES),
            limit=np.array(limit, dtype=np.float64).reshape(-1, NRES),
            reclaim_min_runtime=np.array(rmr, dtype=np.float64),
            preempt_min_runtime=np.array(pmr, dtype=np.float64),
            index=index,
        )

    # ---- jobs and tasks -------------------------------------------------------------------------

    def jobs(self, raw: Any, nodes: Nodes, queues: Queues) -> tuple[Jobs, Tasks]:
        items = [] if raw is None else self.list_(raw, "jobs")
        if items is _BAD:
            items = []
        is_leaf = queues.is_leaf
        j_names: list[str] = []
        j_queue: list[int] = []
        j_prio: list[int] = []
        j_pre: list[bool] = []
        j_min: list[int] = []
        j_created: list[float] = []
        j_started: list[float] = []
        j_stale: list[float] = []
        j_grace: list[float] = []
        j_delay: list[float] = []
        j_topo_r: list[str | None] = []
        j_topo_p: list[str | None] = []
        j_start: list[int] = []
        j_count: list[int] = []
        j_sg_start: list[int] = []
        j_sg_count: list[int] = []
        j_min_sg: list[int] = []
        sg = _SubGroupColumns()
        t = _TaskColumns()
        job_seen: dict[str, int] = {}
        task_seen: dict[str, str] = {}
        for i, job in enumerate(items):
            p = f"jobs[{i}]"
            if self.mapping(job, p, _JOB_KEYS) is _BAD:
                continue
            name = self.string(job.get("name"), f"{p}.name") if "name" in job else self.err(f"{p}.name", "is required")
            if isinstance(name, str):
                self.declared["job"].add(name)
            if name is not _BAD:
                if name in job_seen:
                    self.err(f"{p}.name", f"duplicate job name {name!r} (also jobs[{job_seen[name]}])")
                    name = _BAD
                else:
                    job_seen[name] = i
            qi: Any = _BAD
            if "queue" not in job:
                self.err(f"{p}.queue", "is required")
            else:
                qn = self.string(job["queue"], f"{p}.queue")
                if qn is not _BAD:
                    if qn not in queues.index:
                        if qn not in self.declared["queue"]:
                            self.err(f"{p}.queue", f"unknown queue {qn!r}")
                    elif not is_leaf[queues.index[qn]]:
                        self.err(f"{p}.queue", f"queue {qn!r} has child queues; only leaf queues take jobs")
                    else:
                        qi = queues.index[qn]
            prio = self.integer(_opt(job, "priority", 50), f"{p}.priority", minimum=-MAX_PRIORITY, maximum=MAX_PRIORITY)
            pre = job.get("preemptible")
            if pre is None:
                pre = (prio < 100) if prio is not _BAD else _BAD
            else:
                pre = self.boolean(pre, f"{p}.preemptible")
            created = self.minutes(_opt(job, "createdMinutesAgo", 0), f"{p}.createdMinutesAgo", nullable=False)
            # null / absent optional fields without building their paths (what the checks give for None)
            x = job.get("startedMinutesAgo")
            started = math.nan if x is None else self.minutes(x, f"{p}.startedMinutesAgo", nullable=True)
            x = job.get("staleFor")
            stale = math.nan if x is None else self.duration(x, f"{p}.staleFor")
            x = job.get("stalenessGracePeriod")
            grace = math.nan if x is None else self.duration(x, f"{p}.stalenessGracePeriod", allow_negative=True)
            x = job.get("preemptionDelay")
            delay = math.nan if x is None else self.duration(x, f"{p}.preemptionDelay")
            x = job.get("topology")
            topo_r, topo_p = (None, None) if x is None else self.topology(x, f"{p}.topology")
            spec = self.sub_group_spec(job, p)
            task_list = self.job_tasks(job, p)
            jname = name if name is not _BAD else f"jobs[{i}]"
            n_before = len(t)
            task_ok = True
            for k, (task, tp) in enumerate(task_list):
                task_ok &= self.task(task, tp, jname, k, nodes, t, task_seen, spec)
            n_tasks = len(t) - n_before
            if task_list is not None and not task_list:
                self.err(f"{p}.tasks", "a job needs at least one task")
                task_ok = False
            ma = job.get("minAvailable")
            min_sg = -1
            if spec is not None:
                if ma is not None:
                    self.err(f"{p}.minAvailable", "a job with subGroups has no job-level minAvailable: its leaf "
                                                   "subgroups set minAvailable and the job sets minSubGroups")
                    ma = _BAD
                elif spec is _BAD or not task_ok:
                    ma = _BAD
                else:
                    ma = self.finish_sub_groups(spec, t.sub_group[n_before:], p)
                    min_sg = spec.root_min
            else:
                if job.get("minSubGroups") is not None:
                    self.err(f"{p}.minSubGroups", "only a job with subGroups sets minSubGroups")
                    ma = _BAD
                elif ma is None:
                    ma = len(task_list)
                else:
                    ma = self.integer(ma, f"{p}.minAvailable", minimum=1, maximum=MAX_REPLICAS)
                    if ma is not _BAD and task_list and ma > len(task_list):
                        self.err(f"{p}.minAvailable", f"must be <= the number of tasks ({len(task_list)}), got {ma}")
                        ma = _BAD
            if len(t) > MAX_TASKS:
                self.err(f"{p}", f"too many tasks in the scenario (at most {MAX_TASKS})")
                break
            if _BAD in (name, qi, prio, pre, created, started, stale, grace, delay, topo_r, topo_p, ma) or not task_ok:
                t.truncate(n_before)
                continue
            j = len(j_names)
            t.job.extend([j] * n_tasks)
            j_names.append(name)
            j_queue.append(qi)
            j_prio.append(prio)
            j_pre.append(pre)
            j_min.append(ma)
            j_created.append(created)
            j_started.append(started)
            j_stale.append(stale)
            j_grace.append(grace)
            j_delay.append(delay)
            j_topo_r.append(topo_r)
            j_topo_p.append(topo_p)
            j_start.append(n_before)
            j_count.append(n_tasks)
            j_sg_start.append(len(sg))
            j_min_sg.append(min_sg)
            if spec is not None:
                base = len(sg)
                sg.add(spec, j)
                sub = t.sub_group
                for x in range(n_before, n_before + n_tasks):
                    sub[x] += base  # local leaf index -> global subgroup index
            j_sg_count.append(len(sg) - j_sg_start[-1])
        self.sub_groups = sg.build()
        jobs = Jobs(
            names=j_names,
            queue=np.array(j_queue, dtype=np.int64),
            priority=np.array(j_prio, dtype=np.int64),
            preemptible=np.array(j_pre, dtype=bool),
            min_available=np.array(j_min, dtype=np.int64),
            created_minutes_ago=np.array(j_created, dtype=np.float64),
            started_minutes_ago=np.array(j_started, dtype=np.float64),
            stale_for=np.array(j_stale, dtype=np.float64),
            staleness_grace_period=np.array(j_grace, dtype=np.float64),
            preemption_delay=np.array(j_delay, dtype=np.float64),
            topology_required=j_topo_r,
            topology_preferred=j_topo_p,
            task_start=np.array(j_start, dtype=np.int64),
            task_count=np.array(j_count, dtype=np.int64),
            sg_start=np.array(j_sg_start, dtype=np.int64),
            sg_count=np.array(j_sg_count, dtype=np.int64),
            min_sub_groups=np.array(j_min_sg, dtype=np.int64),
        )
        return jobs, t.build(len(self.dclasses))

    def topology(self, topo: Any, p: str) -> tuple[Any, Any]:
        """``topology: {required, preferred}`` -> (required label or None, preferred label or None)."""
        if topo is None:
            return None, None
        if self.mapping(topo, p, ("required", "preferred")) is _BAD:
            return _BAD, _BAD
        r = self.string(topo["required"], f"{p}.required") if topo.get("required") is not None else None
        q = self.string(topo["preferred"], f"{p}.preferred") if topo.get("preferred") is not None else None
        return r, q

    def sub_group_spec(self, job: dict, p: str) -> "_SubGroupSpec | None | Any":
        """A job's ``subGroups`` tree (KAI hierarchical PodGroup, ``subgroup_info.FromPodGroup``):
        ``None`` for a job without subgroups, ``_BAD`` when a problem was recorded.

        Checked here: names (unique in the job), parents (known, no cycle), ``minAvailable`` only
        on leaves and ``minSubGroups`` only on subgroups with children (and on the job), both
        whole numbers in range; the task counts per leaf are checked by :meth:`finish_sub_groups`.
        """
        raw = job.get("subGroups")
        if raw is None or (isinstance(raw, list) and not raw):
            return None
        sp = f"{p}.subGroups"
        if self.list_(raw, sp) is _BAD:
            return _BAD
        if len(raw) > MAX_SUBGROUPS_PER_JOB:
            return self.err(sp, f"too many subgroups: {len(raw)} (at most {MAX_SUBGROUPS_PER_JOB})")
        spec = _SubGroupSpec()
        ok = True
        seen: dict[str, int] = {}
        parents: list[tuple[Any, str]] = []
        for i, g in enumerate(raw):
            gp = f"{sp}[{i}]"
            if self.mapping(g, gp, _SUBGROUP_KEYS) is _BAD:
                ok = False
                continue
            name = self.string(g.get("name"), f"{gp}.name") if "name" in g else self.err(f"{gp}.name", "is required")
            if name is not _BAD:
                if name in seen:
                    self.err(f"{gp}.name", f"duplicate subgroup name {name!r} (also {sp}[{seen[name]}])")
                    name = _BAD
                else:
                    seen[name] = i
            par = g.get("parent")
            if par is not None:
                par = self.string(par, f"{gp}.parent")
            ma = g.get("minAvailable")
            if ma is not None:
                ma = self.integer(ma, f"{gp}.minAvailable", minimum=0, maximum=MAX_REPLICAS)
            msg = g.get("minSubGroups")
            if msg is not None:
                msg = self.integer(msg, f"{gp}.minSubGroups", minimum=1, maximum=MAX_SUBGROUPS_PER_JOB)
            tr, tq = self.topology(g.get("topology"), f"{gp}.topology")
            if _BAD in (name, par, ma, msg, tr, tq):
                ok = False
                continue
            spec.names.append(name)
            spec.paths.append(gp)
            spec.min_available.append(ma)
            spec.min_sub_groups.append(msg)
            spec.topo_r.append(tr)
            spec.topo_p.append(tq)
            parents.append((par, f"{gp}.parent"))
        if not ok:
            return _BAD
        index = {n: i for i, n in enumerate(spec.names)}
        spec.index = index
        spec.parent = [-1] * len(spec.names)
        for i, (par, path) in enumerate(parents):
            if par is None:
                continue
            if par == spec.names[i]:
                self.err(path, "a subgroup cannot be its own parent")
                ok = False
            elif par not in index:
                self.err(path, f"unknown parent subgroup {par!r}")
                ok = False
            else:
                spec.parent[i] = index[par]
        if not ok:
            return _BAD
        # cycles: walk up from every subgroup, at most S steps
        reported: set[int] = set()
        for i in range(len(spec.names)):
            chain = [i]
            x = spec.parent[i]
            while x >= 0 and x not in chain:
                chain.append(x)
                x = spec.parent[x]
            if x >= 0:
                cyc = chain[chain.index(x):]
                if not reported.intersection(cyc):
                    reported.update(cyc)
                    ring = " -> ".join(spec.names[c] for c in cyc + [x])
                    self.err(parents[x][1], f"cycle in the subgroup tree: {ring}")
                ok = False
        if not ok:
            return _BAD
        spec.children = [[] for _ in spec.names]
        spec.top = []
        for i, par in enumerate(spec.parent):
            (spec.children[par] if par >= 0 else spec.top).append(i)
        for i in range(len(spec.names)):
            gp = spec.paths[i]
            if spec.children[i]:
                if spec.min_available[i] is not None:
                    self.err(f"{gp}.minAvailable", f"subgroup {spec.names[i]!r} has child subgroups: it sets "
                                                   "minSubGroups (how many children must be satisfied), not minAvailable")
                    ok = False
                m = spec.min_sub_groups[i]
                if m is not None and m > len(spec.children[i]):
                    self.err(f"{gp}.minSubGroups", f"must be <= the number of direct child subgroups "
                                                   f"({len(spec.children[i])}), got {m}")
                    ok = False
            elif spec.min_sub_groups[i] is not None:
                self.err(f"{gp}.minSubGroups", f"subgroup {spec.names[i]!r} is a leaf (no child subgroups): it sets "
                                               "minAvailable (how many of its tasks must be placed), not minSubGroups")
                ok = False
        root = job.get("minSubGroups")
        if root is not None:
            root = self.integer(root, f"{p}.minSubGroups", minimum=1, maximum=MAX_SUBGROUPS_PER_JOB)
            if root is _BAD:
                ok = False
            elif root > len(spec.top):
                self.err(f"{p}.minSubGroups", f"must be <= the number of top-level subgroups ({len(spec.top)}), "
                                              f"got {root}")
                ok = False
        spec.root_min = -1 if root is None or root is _BAD else root
        return spec if ok else _BAD

    def finish_sub_groups(self, spec: "_SubGroupSpec", leaf_of_task: list[int], p: str) -> int | Any:
        """Leaf ``minAvailable`` against the leaf's tasks (default: all of them), and the job's
        derived gang size: the fewest tasks that satisfy the root (used where a single number is
        wanted: messages, victims' core). ``_BAD`` on a problem."""
        counts = [0] * len(spec.names)
        for x in leaf_of_task:
            counts[x] += 1
        ok = True
        for i in range(len(spec.names)):
            if spec.children[i]:
                continue
            m = spec.min_available[i]
            if m is None:
                spec.min_available[i] = counts[i]
            elif m > counts[i]:
                self.err(f"{spec.paths[i]}.minAvailable", f"must be <= the number of tasks in subgroup "
                                                          f"{spec.names[i]!r} ({counts[i]}), got {m}")
                ok = False
        if not ok:
            return _BAD

        def need(kids: list[int], k: int) -> int:
            own = sorted(least(c) for c in kids)
            return sum(own[:len(kids) if k < 0 else k])

        def least(i: int) -> int:
            if not spec.children[i]:
                return int(spec.min_available[i])
            return need(spec.children[i], spec.min_sub_groups[i] if spec.min_sub_groups[i] is not None else -1)

        return need(spec.top, spec.root_min)

    def job_tasks(self, job: dict, p: str) -> list[tuple[Any, str]]:
        """The job's task dicts with their paths, expanding ``replicas`` + ``task``."""
        has_tasks = "tasks" in job
        has_tmpl = "task" in job or "replicas" in job
        if has_tasks and has_tmpl:
            self.err(p, "give either `tasks` or `replicas` with a `task` template, not both")
            return []
        if has_tasks:
            lst = self.list_(job["tasks"], f"{p}.tasks")
            if lst is _BAD:
                return []
            return [(task, f"{p}.tasks[{k}]") for k, task in enumerate(lst)]
        if has_tmpl:
            if "task" not in job:
                self.err(f"{p}.task", "is required with `replicas` (the template every replica copies)")
                return []
            if "replicas" not in job:
                self.err(f"{p}.replicas", "is required with a `task` template")
                return []
            n = self.integer(job["replicas"], f"{p}.replicas", minimum=1, maximum=MAX_REPLICAS)
            tmpl = job["task"]
            if n is _BAD or self.mapping(tmpl, f"{p}.task", _TASK_KEYS) is _BAD:
                return []
            if "name" in tmpl:
                self.err(f"{p}.task.name", "a template has no name (replicas are named <job>-<index>)")
                return []
            # Validate the template once; replicas only differ in their default names.
            return [(tmpl, f"{p}.task")] * n
        self.err(f"{p}.tasks", "is required (or `replicas` with a `task` template)")
        return []

    def task(self, task: Any, p: str, jname: str, k: int, nodes: Nodes, t: "_TaskColumns",
             task_seen: dict[str, str], spec: Any = None) -> bool:
        tmpl = p.endswith(".task")  # a `replicas` template, already checked as a mapping
        if tmpl and k > 0 and self._template is not None and self._template[0] is task:
            # Replicas of a template that validated differ only in their default name.
            name = f"{jname}-{k}"
            self.declared["task"].add(name)
            if name in task_seen:
                self.err(f"{p} (replica {k})", f"duplicate task name {name!r} (also {task_seen[name]})")
                return False
            task_seen[name] = f"{p} (replica {k})"
            _, request, gm, state, prio, node, groups, sel, sgi, claims, pins = self._template
            t.add(name, list(request), gm, state, prio, node, list(groups), dict(sel), sgi, dict(claims),
                  copy.deepcopy(pins))
            return True
        if not tmpl and self.mapping(task, p, _TASK_KEYS) is _BAD:
            return False
        n_problems = len(self.problems)
        name = task.get("name")
        if name is None:
            name = f"{jname}-{k}"
        else:
            name = self.string(name, f"{p}.name")
        if name is not _BAD:
            self.declared["task"].add(name)
            where = f"{p}.name" if not tmpl else f"{p} (replica {k})"
            if name in task_seen:
                self.err(where, f"duplicate task name {name!r} (also {task_seen[name]})")
                name = _BAD
            else:
                task_seen[name] = where
        probs_before = len(self.problems)
        gpu = self.resource(_opt(task, "gpu", 0), f"{p}.gpu", "gpu")
        if gpu is not _BAD and gpu > 1 and not float(gpu).is_integer():
            gpu = self.err(f"{p}.gpu", f"a request above 1 gpu must be whole devices, got {task['gpu']!r}")
        gm = task.get("gpuMemory")
        gm = 0.0 if gm is None else self.number(gm, f"{p}.gpuMemory", maximum=MAX_GPU_MEMORY_MIB)
        if gm is not _BAD and gpu is not _BAD and gm > 0 and gpu > 0:
            gm = self.err(f"{p}.gpuMemory", "set either gpu or gpuMemory, not both")
        cpu = self.resource(_opt(task, "cpu", 0), f"{p}.cpu", "cpu")
        mem = self.resource(_opt(task, "memory", 0), f"{p}.memory", "memory")
        state = self.choice(_opt(task, "state", "Pending"), f"{p}.state", INPUT_STATES)
        prio = task.get("priority")
        prio = math.nan if prio is None else self.number(prio, f"{p}.priority", allow_negative=True,
                                                          maximum=MAX_PRIORITY)
        node: Any = -1
        node_name = task.get("node")
        if node_name is not None:
            node_name = self.string(node_name, f"{p}.node")
            if node_name is not _BAD:
                if node_name not in nodes.index:
                    node = _BAD if node_name in self.declared["node"] else self.err(
                        f"{p}.node", f"unknown node {node_name!r}")
                elif state == "Pending":
                    node = self.err(f"{p}.node", "a Pending task has no node (leave it out or null)")
                else:
                    node = nodes.index[node_name]
            else:
                node = _BAD
        elif state in _NODE_STATES:
            node = self.err(f"{p}.node", f"is required for a {state} task")
        groups: Any = []
        g = task.get("gpuGroups")
        if g is not None:
            lst = self.list_(g, f"{p}.gpuGroups")
            if lst is _BAD:
                groups = _BAD
            else:
                for gi, x in enumerate(lst):
                    if self.string(x, f"{p}.gpuGroups[{gi}]") is _BAD:
                        groups = _BAD
                if groups is not _BAD:
                    groups = list(lst)
                    if groups and node == -1:
                        groups = self.err(f"{p}.gpuGroups", "only a task on a node has gpuGroups")
        # Absent / null optional fields without building their paths (the same results as the
        # checks give for None: 134,000 tasks at 10,000 nodes)
        x = task.get("nodeSelector")
        sel = {} if x is None else self.str_map(x, f"{p}.nodeSelector")
        x = task.get("subGroup")
        sgi = -1 if x is None and spec is None else self.task_sub_group(x, f"{p}.subGroup", spec)
        x = task.get("claims")
        claims = {} if x is None else self.claims(
            x, f"{p}.claims", gpu_task=(gpu is not _BAD and gpu > 0) or (gm is not _BAD and gm > 0))
        x = task.get("devices")
        pins = None if x is None else self.device_pins(x, f"{p}.devices", claims, node, nodes)
        if tmpl and k > 0 and len(self.problems) > probs_before:
            # replicas of a bad template: the first replica already reported the same problems
            del self.problems[probs_before:]
        if len(self.problems) > n_problems or _BAD in (name, gpu, gm, cpu, mem, state, prio, node, groups, sel, sgi,
                                                       claims, pins):
            return False
        t.add(name, [gpu, cpu, mem], gm, TaskState.parse(state), prio, node, groups, sel, sgi, claims, pins)
        if tmpl and k == 0:
            self._template = (task, [gpu, cpu, mem], gm, TaskState.parse(state), prio, node, groups, sel, sgi, claims,
                              pins)
        return True

    def task_sub_group(self, x: Any, p: str, spec: Any) -> int | Any:
        """A task's ``subGroup``: the local index of a leaf subgroup of its job (-1: no subgroups)."""
        if spec is None:
            if x is not None:
                return self.err(p, "the job has no subGroups")
            return -1
        if spec is _BAD:
            return -1  # the job's subGroups problem is already reported
        if x is None:
            return self.err(p, "is required: the job has subGroups, so every task names one leaf subgroup")
        name = self.string(x, p)
        if name is _BAD:
            return _BAD
        i = spec.index.get(name)
        if i is None:
            return self.err(p, f"unknown subgroup {name!r}")
        if spec.children[i]:
            return self.err(p, f"subgroup {name!r} has child subgroups; tasks belong to leaf subgroups")
        return i

    def claims(self, x: Any, p: str, *, gpu_task: bool) -> dict[int, int] | Any:
        """A task's ``claims`` (ResourceClaims): ``[{deviceClass, count}]`` -> {class index: devices}.

        All-or-nothing per task at placement; a class that counts as gpu cannot be claimed by a task
        that also requests GPUs classically (``gpu`` / ``gpuMemory``)."""
        if x is None:
            return {}
        if self.list_(x, p) is _BAD:
            return _BAD
        out: dict[int, int] = {}
        ok = True
        for i, c in enumerate(x):
            cp = f"{p}[{i}]"
            if self.mapping(c, cp, _CLAIM_KEYS) is _BAD:
                ok = False
                continue
            if c.get("deviceClass") is None:
                self.err(f"{cp}.deviceClass", "is required")
                ok = False
                continue
            name = self.string(c["deviceClass"], f"{cp}.deviceClass")
            n = self.integer(_opt(c, "count", 1), f"{cp}.count", minimum=1, maximum=MAX_DEVICES_PER_NODE)
            if name is _BAD or n is _BAD:
                ok = False
                continue
            ci = self.dclasses.index.get(name)
            if ci is None:
                if name not in self.declared["deviceClass"]:
                    self.err(f"{cp}.deviceClass", f"unknown device class {name!r} (declare it in deviceClasses)")
                ok = False
                continue
            if gpu_task and self.dclasses.counts_as_gpu[ci]:
                self.err(f"{cp}.deviceClass", f"device class {name!r} counts as gpu: a task requests GPUs either with "
                                              "gpu / gpuMemory or with claims of a gpu class, not both")
                ok = False
                continue
            out[ci] = out.get(ci, 0) + n
        return out if ok else _BAD

    def device_pins(self, x: Any, p: str, claims: Any, node: Any, nodes: Nodes) -> dict[int, list[int]] | None | Any:
        """``devices: {class: [index, ...]}`` of a task on a node: which of the node's devices its
        claims hold (as ``gpuGroups`` pin shared GPUs). One index per claimed device, distinct, each
        below the node's number of devices of that class."""
        if x is None:
            return None
        if self.mapping(x, p, None) is _BAD:
            return _BAD
        if node is _BAD or claims is _BAD:
            return _BAD
        if node == -1:
            return self.err(p, "only a task on a node holds devices")
        out: dict[int, list[int]] = {}
        ok = True
        for k, v in x.items():
            if not isinstance(k, str):
                ok = False
                continue
            kp = _join(p, k)
            ci = self.dclasses.index.get(k)
            if ci is None:
                if k not in self.declared["deviceClass"]:
                    self.err(kp, f"unknown device class {k!r} (declare it in deviceClasses)")
                ok = False
                continue
            if ci not in claims:
                self.err(kp, f"the task claims no {k} devices")
                ok = False
                continue
            if self.list_(v, kp) is _BAD:
                ok = False
                continue
            have = int(nodes.devices[node, ci]) if nodes.devices.shape[1] > ci else 0
            idx: list[int] = []
            for di, d in enumerate(v):
                d = self.integer(d, f"{kp}[{di}]", minimum=0)
                if d is _BAD:
                    ok = False
                elif d >= have:
                    self.err(f"{kp}[{di}]", f"node {nodes.names[node]} has {have} {k} devices (indices 0..{have - 1}), "
                                            f"got {d}")
                    ok = False
                elif d in idx:
                    self.err(f"{kp}[{di}]", f"device {d} is listed twice")
                    ok = False
                else:
                    idx.append(d)
            if ok and len(idx) != claims[ci]:
                self.err(kp, f"the task claims {claims[ci]} {k} devices, {len(idx)} listed")
                ok = False
            out[ci] = idx
        return out if ok else _BAD

    # ---- usage, expect, simulation --------------------------------------------------------------

    def usage(self, raw: Any, queues: Queues) -> np.ndarray:
        usage = np.zeros((len(queues), NRES), dtype=np.float64)
        if raw is None or self.mapping(raw, "usage", None) is _BAD:
            return usage
        for qn, per in raw.items():
            p = _join("usage", qn)
            if not isinstance(qn, str):
                continue
            if qn not in queues.index:
                if qn not in self.declared["queue"]:
                    self.err(p, f"unknown queue {qn!r}")
                continue
            if self.mapping(per, p, RESOURCES) is _BAD:
                continue
            for k, res in enumerate(RESOURCES):
                if res in per:
                    val = self.number(per[res], f"{p}.{res}", maximum=1.0)
                    if val is not _BAD:
                        usage[queues.index[qn], k] = val
                    elif self.problems:
                        self.problems[-1] = (f"{p}.{res}", f"must be a number in [0, 1], got {per[res]!r}")
        return usage

    def expect(self, raw: Any, nodes: Nodes, queues: Queues, jobs: Jobs, tasks: Tasks) -> None:
        if self.mapping(raw, "expect", _EXPECT_KEYS) is _BAD:
            return
        for section, known, what in (("jobs", jobs.index, "job"), ("tasks", tasks.index, "task")):
            block = raw.get(section)
            if block is None:
                continue
            if self.mapping(block, f"expect.{section}", None) is _BAD:
                continue
            for name, e in block.items():
                if not isinstance(name, str):
                    continue
                p = _join(f"expect.{section}", name)
                if name not in known:
                    if name not in self.declared[what]:
                        self.err(p, f"unknown {what} {name!r}")
                    continue
                if self.mapping(e, p, _EXPECT_JOB_KEYS if what == "job" else _EXPECT_TASK_KEYS) is _BAD:
                    continue
                if "status" in e:
                    self.choice(e["status"], f"{p}.status", JOB_STATUS_LABELS if what == "job" else STATUS_LABELS)
                if e.get("node") is not None:
                    nn = self.string(e["node"], f"{p}.node")
                    if nn is not _BAD and nn not in self.declared["node"]:
                        self.err(f"{p}.node", f"unknown node {nn!r}")
                if what == "job" and e.get("subGroups") is not None:
                    self.expect_sub_groups(e["subGroups"], f"{p}.subGroups", jobs, jobs.index[name])
                if what == "task" and e.get("devices") is not None:
                    self.expect_devices(e["devices"], f"{p}.devices")
        block = raw.get("queues")
        if block is not None and self.mapping(block, "expect.queues", None) is not _BAD:
            for name, e in block.items():
                if not isinstance(name, str):
                    continue
                p = _join("expect.queues", name)
                if name not in queues.index:
                    if name not in self.declared["queue"]:
                        self.err(p, f"unknown queue {name!r}")
                    continue
                if self.mapping(e, p, _EXPECT_QUEUE_KEYS) is _BAD:
                    continue
                for key in _EXPECT_QUEUE_KEYS:
                    per = e.get(key)
                    if per is None:
                        continue
                    if self.mapping(per, f"{p}.{key}", RESOURCES) is _BAD:
                        continue
                    for res in RESOURCES:
                        if res in per:
                            self.resource(per[res], f"{p}.{key}.{res}", res)
        block = raw.get("nodes")
        if block is not None and self.mapping(block, "expect.nodes", None) is not _BAD:
            for name, e in block.items():
                if not isinstance(name, str):
                    continue
                p = _join("expect.nodes", name)
                if name not in nodes.index:
                    if name not in self.declared["node"]:
                        self.err(p, f"unknown node {name!r}")
                    continue
                if self.mapping(e, p, _EXPECT_NODE_KEYS) is _BAD:
                    continue
                for key in _EXPECT_NODE_KEYS:
                    if key in e:
                        self.number(e[key], f"{p}.{key}", maximum=float(MAX_GPUS_PER_NODE))

    def expect_sub_groups(self, raw: Any, p: str, jobs: Jobs, j: int) -> None:
        """``expect.jobs.<job>.subGroups``: subgroup -> ``{placed: N, satisfied: bool}``."""
        if self.mapping(raw, p, None) is _BAD:
            return
        sg = self.sub_groups
        a = int(jobs.sg_start[j])
        names = set(sg.names[a:a + int(jobs.sg_count[j])])
        for name, e in raw.items():
            if not isinstance(name, str):
                continue
            ep = _join(p, name)
            if name not in names:
                self.err(ep, f"unknown subgroup {name!r} of the job")
                continue
            if self.mapping(e, ep, _EXPECT_SUBGROUP_KEYS) is _BAD:
                continue
            if "placed" in e:
                self.integer(e["placed"], f"{ep}.placed", minimum=0)
            if "satisfied" in e:
                self.boolean(e["satisfied"], f"{ep}.satisfied")

    def expect_devices(self, raw: Any, p: str) -> None:
        """``expect.tasks.<task>.devices``: device class -> device indices on the task's node."""
        if self.mapping(raw, p, None) is _BAD:
            return
        for name, v in raw.items():
            if not isinstance(name, str):
                continue
            ep = _join(p, name)
            if name not in self.dclasses.index:
                self.err(ep, f"unknown device class {name!r}")
                continue
            if self.list_(v, ep) is _BAD:
                continue
            for i, d in enumerate(v):
                self.integer(d, f"{ep}[{i}]", minimum=0)

    def simulation(self, raw: Any, queues: Queues) -> None:
        """Validated here so every scenario error is reported at load time; ``simulate`` reads
        the block from ``Snapshot.source``."""
        if self.mapping(raw, "simulation", _SIM_KEYS) is _BAD:
            return
        p = "simulation"
        if "cycles" in raw:
            self.integer(raw["cycles"], f"{p}.cycles", minimum=1, maximum=10_000_000)
        if "cycleSeconds" in raw:
            d = self.duration(raw["cycleSeconds"], f"{p}.cycleSeconds", nullable=False)
            if d is not _BAD and d <= 0:
                self.err(f"{p}.cycleSeconds", "must be > 0")
        if "windowSize" in raw:
            self.integer(raw["windowSize"], f"{p}.windowSize", minimum=1, maximum=10_000_000)
        if "windowType" in raw:
            self.choice(raw["windowType"], f"{p}.windowType", ("sliding", "tumbling"))
        if "halfLifePeriod" in raw:
            self.number(raw["halfLifePeriod"], f"{p}.halfLifePeriod", maximum=1e9)
        arr = raw.get("arrivals")
        if arr is None:
            return
        if self.list_(arr, f"{p}.arrivals") is _BAD:
            return
        is_leaf = queues.is_leaf
        for i, a in enumerate(arr):
            ap = f"{p}.arrivals[{i}]"
            if self.mapping(a, ap, _ARRIVAL_KEYS) is _BAD:
                continue
            if "queue" not in a:
                self.err(f"{ap}.queue", "is required")
            else:
                qn = self.string(a["queue"], f"{ap}.queue")
                if qn is not _BAD:
                    if qn not in queues.index:
                        if qn not in self.declared["queue"]:
                            self.err(f"{ap}.queue", f"unknown queue {qn!r}")
                    elif not is_leaf[queues.index[qn]]:
                        self.err(f"{ap}.queue", f"queue {qn!r} has child queues; only leaf queues take jobs")
            if "count" in a:
                self.integer(a["count"], f"{ap}.count", minimum=1, maximum=MAX_REPLICAS)
            if "atCycle" in a:
                self.integer(a["atCycle"], f"{ap}.atCycle", minimum=0, maximum=10_000_000)
            for res in RESOURCES:
                if res in a:
                    self.resource(a[res], f"{ap}.{res}", res)
            if a.get("gpuMemory") is not None:
                self.number(a["gpuMemory"], f"{ap}.gpuMemory", maximum=MAX_GPU_MEMORY_MIB)
            replicas = 1
            if "replicas" in a:
                replicas = self.integer(a["replicas"], f"{ap}.replicas", minimum=1, maximum=MAX_REPLICAS)
            if a.get("duration") is not None:
                self.duration(a["duration"], f"{ap}.duration")
            if "priority" in a:
                self.integer(a["priority"], f"{ap}.priority", minimum=-MAX_PRIORITY, maximum=MAX_PRIORITY)
            if a.get("preemptible") is not None:
                self.boolean(a["preemptible"], f"{ap}.preemptible")
            if a.get("minAvailable") is not None:
                ma = self.integer(a["minAvailable"], f"{ap}.minAvailable", minimum=1, maximum=MAX_REPLICAS)
                if ma is not _BAD and replicas is not _BAD and ma > replicas:
                    self.err(f"{ap}.minAvailable", f"must be <= replicas ({replicas}), got {ma}")


class _TaskColumns:
    """Growing per-task columns (lists), turned into a :class:`Tasks` at the end."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.job: list[int] = []
        self.request: list[list[float]] = []
        self.gpu_memory: list[float] = []
        self.state: list[int] = []
        self.priority: list[float] = []
        self.node: list[int] = []
        self.gpu_groups: list[list[str]] = []
        self.node_selector: list[dict[str, str]] = []
        self.sub_group: list[int] = []
        self.claims: list[dict[int, int]] = []
        self.devices: list[dict[int, list[int]] | None] = []

    def __len__(self) -> int:
        return len(self.names)

    def add(self, name, request, gm, state, prio, node, groups, sel, sub_group=-1, claims=None, devices=None) -> None:
        self.names.append(name)
        self.request.append(request)
        self.gpu_memory.append(gm)
        self.state.append(int(state))
        self.priority.append(prio)
        self.node.append(node)
        self.gpu_groups.append(groups)
        self.node_selector.append(sel)
        self.sub_group.append(sub_group)
        self.claims.append(claims or {})
        self.devices.append(devices)

    def truncate(self, n: int) -> None:
        for attr in ("names", "request", "gpu_memory", "state", "priority", "node", "gpu_groups", "node_selector",
                     "sub_group", "claims", "devices"):
            del getattr(self, attr)[n:]

    def build(self, n_classes: int = 0) -> Tasks:
        return Tasks(
            names=self.names,
            job=np.array(self.job, dtype=np.int64),
            request=np.array(self.request, dtype=np.float64).reshape(-1, NRES),
            gpu_memory=np.array(self.gpu_memory, dtype=np.float64),
            state=np.array(self.state, dtype=np.int8),
            priority=np.array(self.priority, dtype=np.float64),
            node=np.array(self.node, dtype=np.int64),
            gpu_groups=self.gpu_groups,
            node_selector=self.node_selector,
            sub_group=np.array(self.sub_group, dtype=np.int64),
            claims=_count_matrix(self.claims, n_classes),
            devices=self.devices,
        )


class _SubGroupSpec:
    """One job's subgroups while they are validated (local indices; -1 = the job root)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.paths: list[str] = []
        self.index: dict[str, int] = {}
        self.parent: list[int] = []
        self.children: list[list[int]] = []
        self.top: list[int] = []
        self.min_available: list[Any] = []
        self.min_sub_groups: list[Any] = []
        self.topo_r: list[str | None] = []
        self.topo_p: list[str | None] = []
        self.root_min = -1


class _SubGroupColumns:
    """Growing per-subgroup columns of every job, turned into :class:`SubGroups` at the end."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.job: list[int] = []
        self.parent: list[int] = []
        self.min_available: list[int] = []
        self.min_sub_groups: list[int] = []
        self.topo_r: list[str | None] = []
        self.topo_p: list[str | None] = []

    def __len__(self) -> int:
        return len(self.names)

    def add(self, spec: _SubGroupSpec, j: int) -> None:
        base = len(self.names)
        for i, name in enumerate(spec.names):
            leaf = not spec.children[i]
            self.names.append(name)
            self.job.append(j)
            self.parent.append(spec.parent[i] + base if spec.parent[i] >= 0 else -1)
            self.min_available.append(int(spec.min_available[i]) if leaf else -1)
            m = spec.min_sub_groups[i]
            self.min_sub_groups.append(-1 if leaf or m is None else int(m))
            self.topo_r.append(spec.topo_r[i])
            self.topo_p.append(spec.topo_p[i])

    def build(self) -> SubGroups:
        return SubGroups(
            names=self.names,
            job=np.array(self.job, dtype=np.int64),
            parent=np.array(self.parent, dtype=np.int64),
            min_available=np.array(self.min_available, dtype=np.int64),
            min_sub_groups=np.array(self.min_sub_groups, dtype=np.int64),
            topology_required=self.topo_r,
            topology_preferred=self.topo_p,
        )


def _count_matrix(rows: list[dict[int, int]], width: int) -> np.ndarray:
    """Per-row ``{column: count}`` dicts as an (n, width) int array."""
    out = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        for c, n in row.items():
            out[i, c] = n
    return out


def _opt(d: dict, key: str, default: Any) -> Any:
    """``d[key]``, or ``default`` when the key is absent or null (null means "unset" in the format)."""
    value = d.get(key)
    return default if value is None else value


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _jsonable(x: Any) -> Any:
    """Deep copy with timestamps as ISO strings, so ``Snapshot.source`` can be dumped as JSON."""
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_jsonable(v) for v in x]
    if isinstance(x, datetime):
        if x.tzinfo is None:
            x = x.replace(tzinfo=timezone.utc)
        return x.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(x, date):
        return x.isoformat()
    return x


# --------------------------------------------------------------------------------------------------
# export


def _num(x: float) -> int | float:
    x = float(x)
    return int(x) if x.is_integer() else x


def _opt_duration(x: float) -> str | float | None:
    return None if math.isnan(x) else format_duration(x)


def _opt_minutes(x: float) -> int | float | None:
    return None if math.isnan(x) else _num(x)


def _queue_amount(x: float, res: str) -> Any:
    if x == UNLIMITED:
        return -1
    if res == "cpu":
        return format_cpu(x)
    if res == "memory":
        return format_memory(x)
    return _num(x)


def snapshot_to_dict(snapshot: Snapshot) -> dict:
    """A scenario dict (scenario format, all defaults written out) that loads back to an equal snapshot.

    Built from the arrays, not from ``snapshot.source``, so a snapshot rewritten between rounds
    or assembled by the Django side exports what the engine actually sees.  Only input task
    states can be exported (a Binding/Pipelined task is a cycle result, not an input).
    """
    cfg = snapshot.config
    config: dict[str, Any] = {
        "actions": list(cfg.actions),
        "placement": dict(cfg.placement),
        "kValue": _num(cfg.k_value),
        "defaultReclaimMinRuntime": format_duration(cfg.default_reclaim_min_runtime),
        "defaultPreemptMinRuntime": format_duration(cfg.default_preempt_min_runtime),
        "reclaimMinRuntimeResolution": cfg.reclaim_min_runtime_resolution,
        "reclaimerUtilizationMultiplier": _num(cfg.reclaimer_utilization_multiplier),
        "stalenessGracePeriod": format_duration(cfg.staleness_grace_period),
        "stableRounds": int(cfg.stable_rounds),
        "maxConsolidationPreemptees": int(cfg.max_consolidation_preemptees),
        "scenarioSearchBudget": int(cfg.scenario_search_budget),
    }
    if cfg.rounds_given or cfg.rounds != 1:
        config["rounds"] = int(cfg.rounds)
    if cfg.now is not None:
        config["now"] = _jsonable(cfg.now)
    nd = snapshot.nodes
    dcs = snapshot.device_classes
    dc_names = list(dcs.names)
    nodes = []
    for i, name in enumerate(nd.names):
        nodes.append({
            "name": name,
            "gpus": int(nd.gpus[i]),
            "gpuMemory": _num(nd.gpu_memory[i]),
            "cpu": format_cpu(nd.capacity[i, 1]),
            "memory": format_memory(nd.capacity[i, 2]),
            "labels": dict(nd.labels[i]),
            "unschedulable": bool(nd.unschedulable[i]),
            "ready": bool(nd.ready[i]),
            "reservedByOthers": {
                "gpu": _num(nd.reserved[i, 0]),
                "cpu": format_cpu(nd.reserved[i, 1]),
                "memory": format_memory(nd.reserved[i, 2]),
            },
        })
        if dc_names:
            row = nd.devices[i]
            nodes[-1]["devices"] = {dc_names[c]: int(row[c]) for c in range(len(dc_names)) if row[c]}
    qs = snapshot.queues
    queues = []
    for i, name in enumerate(qs.names):
        par = int(qs.parent[i])
        queues.append({
            "name": name,
            "parent": qs.names[par] if par >= 0 else None,
            "priority": int(qs.priority[i]),
            "createdMinutesAgo": _num(qs.created_minutes_ago[i]),
            "resources": {
                res: {
                    "quota": _queue_amount(qs.deserved[i, k], res),
                    "overQuotaWeight": _num(qs.weight[i, k]),
                    "limit": _queue_amount(qs.limit[i, k], res),
                }
                for k, res in enumerate(RESOURCES)
            },
            "reclaimMinRuntime": _opt_duration(qs.reclaim_min_runtime[i]),
            "preemptMinRuntime": _opt_duration(qs.preempt_min_runtime[i]),
        })
    js, ts = snapshot.jobs, snapshot.tasks
    sg = snapshot.sub_groups
    jobs = []
    for j, name in enumerate(js.names):
        tasks = []
        for t in js.tasks_of(j):
            state = TaskState(int(ts.state[t]))
            if state.label not in INPUT_STATES:
                raise ValueError(f"task {ts.names[t]!r} is {state.label}: only input states can be exported")
            node = int(ts.node[t])
            tasks.append({
                "name": ts.names[t],
                "gpu": _num(ts.request[t, 0]),
                "gpuMemory": _num(ts.gpu_memory[t]) if ts.gpu_memory[t] else None,
                "cpu": format_cpu(ts.request[t, 1]),
                "memory": format_memory(ts.request[t, 2]),
                "state": state.label,
                "priority": None if math.isnan(ts.priority[t]) else _num(ts.priority[t]),
                "node": nd.names[node] if node >= 0 else None,
                "gpuGroups": list(ts.gpu_groups[t]),
                "nodeSelector": dict(ts.node_selector[t]),
            })
            if ts.sub_group[t] >= 0:
                tasks[-1]["subGroup"] = sg.names[int(ts.sub_group[t])]
            if dc_names:
                row = ts.claims[t]
                cl = [{"deviceClass": dc_names[c], "count": int(row[c])} for c in range(len(dc_names)) if row[c]]
                if cl:
                    tasks[-1]["claims"] = cl
                pins = ts.devices[t]
                if pins:
                    tasks[-1]["devices"] = {dc_names[c]: list(v) for c, v in pins.items()}
        jobs.append({
            "name": name,
            "queue": qs.names[int(js.queue[j])],
            "priority": int(js.priority[j]),
            "preemptible": bool(js.preemptible[j]),
            "minAvailable": int(js.min_available[j]),
            "createdMinutesAgo": _num(js.created_minutes_ago[j]),
            "startedMinutesAgo": _opt_minutes(js.started_minutes_ago[j]),
            "staleFor": _opt_duration(js.stale_for[j]),
            "stalenessGracePeriod": _opt_duration(js.staleness_grace_period[j]),
            "preemptionDelay": _opt_duration(js.preemption_delay[j]),
            "topology": {"required": js.topology_required[j], "preferred": js.topology_preferred[j]},
            "tasks": tasks,
        })
        a, c = int(js.sg_start[j]), int(js.sg_count[j])
        if c:
            del jobs[-1]["minAvailable"]
            m = int(js.min_sub_groups[j])
            jobs[-1]["minSubGroups"] = m if m >= 0 else None
            groups = []
            for g in range(a, a + c):
                par = int(sg.parent[g])
                row: dict[str, Any] = {"name": sg.names[g], "parent": sg.names[par] if par >= 0 else None}
                if int(sg.min_available[g]) >= 0:
                    row["minAvailable"] = int(sg.min_available[g])
                else:
                    ms = int(sg.min_sub_groups[g])
                    row["minSubGroups"] = ms if ms >= 0 else None
                row["topology"] = {"required": sg.topology_required[g], "preferred": sg.topology_preferred[g]}
                groups.append(row)
            jobs[-1]["subGroups"] = groups
    out: dict[str, Any] = {"name": snapshot.name, "config": config, "nodes": nodes, "queues": queues, "jobs": jobs}
    if dc_names:
        out["deviceClasses"] = [{"name": n, **({"countsAs": "gpu"} if dcs.counts_as_gpu[i] else {})}
                                for i, n in enumerate(dc_names)]
    usage = {}
    for i, name in enumerate(qs.names):
        per = {res: float(snapshot.usage[i, k]) for k, res in enumerate(RESOURCES) if snapshot.usage[i, k]}
        if per:
            usage[name] = per
    if usage:
        out["usage"] = usage
    if snapshot.expect is not None:
        out["expect"] = copy.deepcopy(snapshot.expect)
    if snapshot.source and snapshot.source.get("simulation") is not None:
        out["simulation"] = copy.deepcopy(snapshot.source["simulation"])
    return out


def _field_equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return False
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.array_equal(a, b))
    return a == b


def snapshots_equal(a: Snapshot, b: Snapshot) -> bool:
    """Equality of everything the engine reads (``source`` is ignored: it is provenance)."""
    if a.name != b.name or a.config != b.config or a.expect != b.expect:
        return False
    if not _field_equal(a.usage, b.usage):
        return False
    for part in ("nodes", "queues", "jobs", "tasks", "sub_groups", "device_classes"):
        pa, pb = getattr(a, part), getattr(b, part)
        for f in fields(pa):
            if not _field_equal(getattr(pa, f.name), getattr(pb, f.name)):
                return False
    return True
