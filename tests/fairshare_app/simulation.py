"""A small closed-loop simulator for fair-share tests: a clock the test controls, the real
accounting + decay code (fairshare_app), the engine through queues_app.cycle.engine_io, and a
minimal "cluster" that applies the engine's decisions to the database.

Each cycle at ``clock``:
  1. ``usage_account(now=clock)`` records the interval that just ended and refreshes U;
  2. the cluster finishes what was in flight: Releasing pods are gone (task back to Pending,
     no node; the pod is recreated), Pipelined tasks wait again as Pending;
  3. ``build_snapshot_with_index(now=clock)`` -- usage and kValue come from fairshare_app --
     and ``run_engine`` decide;
  4. decisions are applied: Binding -> Running on the node (workload started now), victims ->
     Releasing (they keep holding the node until the next cycle), Pipelined kept for a cycle.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from fairshare_app.services.accounting import usage_account
from queues_app.cycle.engine_io import build_snapshot_with_index, run_engine
from queues_app.models import Task, Workload

HOLDING = ("Running", "Releasing", "Binding")


@dataclass
class SimulationTrace:
    holder: list[str | None] = field(default_factory=list)  # queue holding GPUs after each cycle

    @property
    def switches(self) -> int:
        seq = [h for h in self.holder if h is not None]
        return sum(1 for a, b in zip(seq, seq[1:]) if a != b)

    def turns(self) -> list[tuple[str, int]]:
        """(queue, cycles held) for each uninterrupted turn, in order."""
        out: list[tuple[str, int]] = []
        for h in self.holder:
            if h is None:
                continue
            if out and out[-1][0] == h:
                out[-1] = (h, out[-1][1] + 1)
            else:
                out.append((h, 1))
        return out


def _settle(now: datetime) -> None:
    Task.objects.filter(state__in=("Releasing", "Pipelined")).update(state="Pending", node=None, gpu_groups=[])
    for wl in Workload.objects.filter(status="Running").exclude(tasks__state__in=HOLDING):
        Workload.objects.filter(pk=wl.pk).update(status="Pending")


def _apply(result, index, now: datetime) -> None:
    by_name = index.task_id
    node_ids = index.node_id
    started: set[int] = set()
    for tname, decision in result.tasks.items():
        status = decision["status"]
        tid = by_name[tname]
        if status == "Binding":
            Task.objects.filter(pk=tid).update(state="Running", node_id=node_ids[decision["node"]])
            started.add(tid)
        elif status == "Releasing":
            Task.objects.filter(pk=tid, state="Running").update(state="Releasing")
        elif status == "Pipelined":
            Task.objects.filter(pk=tid).update(state="Pipelined", node_id=node_ids[decision["node"]])
    if started:
        wl_ids = set(Task.objects.filter(pk__in=started).values_list("workload_id", flat=True))
        Workload.objects.filter(pk__in=wl_ids).update(status="Running", started_at=now)


def holder_now() -> str | None:
    names = set(Task.objects.filter(state="Running").values_list("workload__queue__name", flat=True))
    return names.pop() if len(names) == 1 else (None if not names else "+".join(sorted(names)))


def run(*, start: datetime, cycles: int, cycle_seconds: int) -> SimulationTrace:
    trace = SimulationTrace()
    clock = start
    for _ in range(cycles):
        usage_account(now=clock)
        _settle(clock)
        snapshot, index = build_snapshot_with_index(now=clock)
        _apply(run_engine(snapshot), index, clock)
        trace.holder.append(holder_now())
        clock += timedelta(seconds=cycle_seconds)
    usage_account(now=clock)
    return trace
