"""The reclaim action (spec c): gate, victim filter, validator, min-runtime, delay, signatures.

The scenario helpers at the top are shared with the preempt / consolidation / stale-gang tests.
"""
from __future__ import annotations

import math
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_engine.actions import get_action
from scheduler_engine.plugins.minruntime import preempt_min_runtime, reclaim_min_runtime
from scheduler_engine.loader import load_dict
from scheduler_engine.snapshot import GPU, TaskState
from scheduler_engine.state import CycleState


# ----------------------------------------------------------------------------- scenario helpers
def node(name, gpus=4, cpu=64, memory="256Gi", **kw):
    return {"name": name, "gpus": gpus, "gpuMemory": kw.pop("gpuMemory", 100), "cpu": cpu, "memory": memory, **kw}


def queue(name, parent=None, gpu=(-1, 1, -1), age=None, **kw):
    quota, weight, limit = gpu
    q = {"name": name, "parent": parent,
         "resources": {"gpu": {"quota": quota, "overQuotaWeight": weight, "limit": limit},
                       "cpu": {"quota": -1, "overQuotaWeight": 1, "limit": -1},
                       "memory": {"quota": -1, "overQuotaWeight": 1, "limit": -1}}}
    if age is not None:
        q["createdMinutesAgo"] = age
    q.update(kw)
    return q


def running(name, node_name, gpu=1, **kw):
    return {"name": name, "state": "Running", "node": node_name, "gpu": gpu, "cpu": 1, "memory": "1Gi", **kw}


def pending(name, gpu=1, **kw):
    return {"name": name, "state": "Pending", "gpu": gpu, "cpu": 1, "memory": "1Gi", **kw}


def job(name, q, tasks, priority=50, age=1, started=None, **kw):
    out = {"name": name, "queue": q, "priority": priority, "createdMinutesAgo": age, "tasks": tasks}
    if started is not None:
        out["startedMinutesAgo"] = started
    elif any(t.get("state") == "Running" for t in tasks):
        out["startedMinutesAgo"] = age
    out.update(kw)
    return out


def scenario(nodes, queues, jobs, actions, **config):
    cfg = {"actions": list(actions), "now": "2026-01-01T00:00:00Z", "stalenessGracePeriod": "0s"}
    cfg.update(config)
    return {"name": "unit", "config": cfg, "nodes": nodes, "queues": queues, "jobs": jobs}


def run(sc: dict) -> CycleState:
    snap = load_dict(sc)
    state = CycleState(snap)
    for a in snap.config.actions:
        get_action(a)(state)
    return state


def status(s: CycleState, task_name: str) -> tuple[str, str | None]:
    t = s.tasks.index[task_name]
    n = int(s.task_node[t])
    return TaskState(int(s.task_state[t])).label, (s.nodes.names[n] if n >= 0 else None)


def job_status(s: CycleState, job_name: str) -> str:
    j = s.jobs.index[job_name]
    labels = {TaskState(int(s.task_state[t])).label for t in s.job_task_range(j)}
    return labels.pop() if len(labels) == 1 else "Mixed"


def events_of(s: CycleState, job_name: str, reason: str | None = None) -> list[dict]:
    return [e for e in s.events if e["job"] == job_name and (reason is None or e["reason"] == reason)]


def assert_no_overcommit(s: CycleState) -> None:
    """No node or device holds more than its capacity, counting either side of every pipelining."""
    cap = s.node_capacity
    assert np.all(s.node_idle >= -1e-6), s.node_idle
    assert np.all(s.node_releasing >= -1e-6), s.node_releasing
    holders = {int(TaskState.RUNNING), int(TaskState.BINDING), int(TaskState.RELEASING),
               int(TaskState.STUCK_RELEASING)}
    newcomers = {int(TaskState.RUNNING), int(TaskState.BINDING), int(TaskState.PIPELINED),
                 int(TaskState.STUCK_RELEASING)}
    for states in (holders, newcomers):
        used = np.zeros_like(cap)
        dev = np.zeros((s.N, max(s.G, 1)))
        for t in range(s.T):
            if int(s.task_state[t]) in states and s.task_node[t] >= 0:
                n = int(s.task_node[t])
                used[n] += s.task_alloc[t]
                per = s.task_alloc[t, GPU] if s.task_is_shared[t] else 1.0
                for d in s.task_devices[t]:
                    dev[n, d] += per
        assert np.all(used <= cap + 1e-6), (used, cap)
        assert np.all(dev <= 1 + 1e-6), dev


TWO_QUEUES = [queue("top", age=3), queue("q0", "top", gpu=(2, 1, -1), age=2), queue("q1", "top", gpu=(2, 1, -1), age=1)]


def q0_full(n_jobs=4, node_name="n0"):
    return [job(f"r{i}", "q0", [running(f"r{i}-0", node_name)], age=10 - i) for i in range(n_jobs)]


# ----------------------------------------------------------------------------- cases
def test_reclaims_newest_over_share_job_and_pipelines_reclaimer():
    sc = scenario([node("n0", 4)], TWO_QUEUES, q0_full() + [job("p", "q1", [pending("p-0")])], ["reclaim"])
    s = run(sc)
    assert status(s, "p-0") == ("Pipelined", "n0")
    assert job_status(s, "r3") == "Releasing"  # newest job of the over-share queue goes first
    assert [job_status(s, f"r{i}") for i in range(3)] == ["Running"] * 3
    ev = events_of(s, "r3", "Reclaimed")
    assert len(ev) == 1 and ev[0]["victimOf"] == "p" and "make room for job p" in ev[0]["message"]
    assert events_of(s, "p", "Reclaimed")
    assert_no_overcommit(s)


def test_gate_refuses_reclaimer_at_its_fair_share_with_numbers():
    qs = [queue("top", age=3), queue("q0", "top", gpu=(2, 0, -1), age=2), queue("q1", "top", gpu=(2, 0, -1), age=1)]
    jobs = [job("a", "q0", [running("a-0", "n0"), running("a-1", "n0")], age=5, minAvailable=1),
            job("b", "q1", [running("b-0", "n0"), running("b-1", "n0")], age=4, minAvailable=1),
            job("p", "q1", [pending("p-0")], age=1)]
    s = run(scenario([node("n0", 4)], qs, jobs, ["reclaim"]))
    assert status(s, "p-0")[0] == "Pending"
    assert all(status(s, f"a-{i}")[0] == "Running" for i in range(2))
    msgs = [e["message"] for e in events_of(s, "p", "NotReclaiming")]
    assert msgs == ["queue q1 is at its fair share for gpu: 2 allocated + 1 requested > 2 fair share"]


def test_victim_queue_under_deserved_is_filtered_out():
    # q1 holds 2 of its deserved 3: the proportion victim filter removes it before any simulation
    qs = [queue("top", age=3), queue("q0", "top", gpu=(2, 0, -1), age=2), queue("q1", "top", gpu=(3, 0, -1), age=1)]
    jobs = [job("a", "q0", [running("a-0", "n0")], age=5),
            job("x", "q1", [running("x-0", "n0"), running("x-1", "n0")], age=4, minAvailable=1),
            job("p", "q0", [pending("p-0")], age=1)]
    s = run(scenario([node("n0", 3)], qs, jobs, ["reclaim"]))
    assert status(s, "p-0")[0] == "Pending"
    assert job_status(s, "x") == "Running"
    (ev,) = events_of(s, "p", "NotReclaiming")
    assert "no eligible victims" in ev["message"]


def test_no_victims_event_when_only_non_preemptible_jobs_run():
    jobs = [job(f"r{i}", "q0", [running(f"r{i}-0", "n0")], age=10 - i, priority=100, preemptible=False)
            for i in range(4)] + [job("p", "q1", [pending("p-0")])]
    s = run(scenario([node("n0", 4)], TWO_QUEUES, jobs, ["reclaim"]))
    assert status(s, "p-0")[0] == "Pending"
    (ev,) = events_of(s, "p", "NotReclaiming")
    assert "no eligible victims" in ev["message"]


def test_elastic_victim_sheds_surplus_tasks_first():
    jobs = [job("el", "q0", [running(f"el-{i}", "n0") for i in range(4)], minAvailable=1, age=5),
            job("p", "q1", [pending("p-0", gpu=2)])]
    s = run(scenario([node("n0", 4)], TWO_QUEUES, jobs, ["reclaim"]))
    assert status(s, "p-0") == ("Pipelined", "n0")
    assert [status(s, f"el-{i}")[0] for i in range(4)] == ["Running", "Running", "Releasing", "Releasing"]


def test_gang_reclaimer_is_all_or_nothing():
    # victims for two of the gang's three tasks exist, the third fits no node: nothing may be evicted
    qs = [queue("top", age=3), queue("q0", "top", gpu=(1, 1, -1), age=2), queue("q1", "top", gpu=(3, 0, -1), age=1)]
    gang = [pending("p-0"), pending("p-1"), pending("p-2", nodeSelector={"zone": "nowhere"})]
    jobs = q0_full(3, "n0") + [job("p", "q1", gang)]
    s = run(scenario([node("n0", 3)], qs, jobs, ["reclaim"]))
    assert all(status(s, f"p-{i}")[0] == "Pending" for i in range(3))
    assert all(job_status(s, f"r{i}") == "Running" for i in range(3))
    assert not [e for e in s.events if e["reason"] == "Reclaimed"]
    (ev,) = events_of(s, "p", "NotReclaiming")
    assert ev["message"] == ("reclaim failed: for 3 of 3 tasks: even evicting every eligible victim would not "
                             "free enough GPUs on the nodes (3 eligible jobs)")


def test_victim_re_placed_on_another_node_is_pipelined_not_lost():
    # golden 029's shape: q0's 1-GPU job moves next to its sibling, the reclaimer takes the freed node
    qs = [queue("top", age=3), queue("q0", "top", gpu=(3, 0, -1), age=2), queue("q1", "top", gpu=(2, 0, -1), age=1)]
    jobs = [job("a", "q0", [running("a-0", "n0", gpu=2)], age=3),
            job("b", "q0", [running("b-0", "n1", gpu=1)], age=2),
            job("p", "q1", [pending("p-0", gpu=2)], age=1)]
    s = run(scenario([node("n0", 3), node("n1", 2)], qs, jobs, ["reclaim"]))
    assert status(s, "a-0") == ("Running", "n0")
    assert status(s, "b-0") == ("Pipelined", "n0")
    assert status(s, "p-0") == ("Pipelined", "n1")
    (moved,) = events_of(s, "b", "Consolidated")
    assert "moved from node n1 to node n0" in moved["message"] and moved["victimOf"] == "p"
    assert_no_overcommit(s)


def test_min_runtime_protects_young_victims():
    qs = [queue("top", age=3), queue("q0", "top", gpu=(2, 1, -1), age=2, reclaimMinRuntime="10m"),
          queue("q1", "top", gpu=(2, 1, -1), age=1)]
    young = [job(f"r{i}", "q0", [running(f"r{i}-0", "n0")], age=10 - i, started=1) for i in range(4)]
    s = run(scenario([node("n0", 4)], qs, young + [job("p", "q1", [pending("p-0")])], ["reclaim"]))
    assert status(s, "p-0")[0] == "Pending"
    old = [job(f"r{i}", "q0", [running(f"r{i}-0", "n0")], age=30 - i, started=20) for i in range(4)]
    s = run(scenario([node("n0", 4)], qs, old + [job("p", "q1", [pending("p-0")])], ["reclaim"]))
    assert status(s, "p-0") == ("Pipelined", "n0")


def test_default_reclaim_min_runtime_applies_when_no_queue_sets_one():
    jobs = [job(f"r{i}", "q0", [running(f"r{i}-0", "n0")], age=10 - i, started=2) for i in range(4)]
    sc = scenario([node("n0", 4)], TWO_QUEUES, jobs + [job("p", "q1", [pending("p-0")])], ["reclaim"],
                  defaultReclaimMinRuntime="5m")
    assert status(run(sc), "p-0")[0] == "Pending"
    sc["config"]["defaultReclaimMinRuntime"] = "1m"
    assert status(run(sc), "p-0")[0] == "Pipelined"


def test_reclaim_min_runtime_resolution_lca_and_queue():
    qs = [queue("d1", age=5, reclaimMinRuntime="5m"), queue("a", "d1", age=4), queue("b", "d1", age=3, reclaimMinRuntime="1m"),
          queue("c", "d1", age=3), queue("d2", age=2, reclaimMinRuntime="7m"), queue("x", "d2", age=1, reclaimMinRuntime="2m")]
    sc = scenario([node("n0", 1)], qs, [], ["reclaim"], defaultReclaimMinRuntime="9m")
    s = CycleState(load_dict(sc))
    ix = s.queues.index
    # same top level: one level below the lowest common ancestor, toward the victim, then up
    assert reclaim_min_runtime(s, ix["a"], ix["b"]) == 60.0
    assert reclaim_min_runtime(s, ix["a"], ix["c"]) == 300.0  # c unset -> inherits d1
    # different top levels: the victim's top-level queue decides
    assert reclaim_min_runtime(s, ix["x"], ix["b"]) == 300.0
    assert reclaim_min_runtime(s, ix["a"], ix["x"]) == 420.0
    sc["config"]["reclaimMinRuntimeResolution"] = "queue"
    s = CycleState(load_dict(sc))
    assert reclaim_min_runtime(s, ix["a"], ix["x"]) == 120.0  # the victim's own leaf first
    assert reclaim_min_runtime(s, ix["x"], ix["c"]) == 300.0
    assert preempt_min_runtime(s, ix["c"]) == 0.0  # no preemptMinRuntime anywhere, default 0


def test_preemption_delay_blocks_reclaim_with_event():
    jobs = q0_full() + [job("p", "q1", [pending("p-0")], age=1, preemptionDelay="10m")]
    s = run(scenario([node("n0", 4)], TWO_QUEUES, jobs, ["reclaim"]))
    assert status(s, "p-0")[0] == "Pending"
    assert all(job_status(s, f"r{i}") == "Running" for i in range(4))
    (ev,) = events_of(s, "p", "NotReclaiming")
    assert "preemption delay" in ev["message"]
    jobs[-1]["preemptionDelay"] = "30s"
    assert status(run(scenario([node("n0", 4)], TWO_QUEUES, jobs, ["reclaim"])), "p-0")[0] == "Pipelined"


def _saturation_case(multiplier: float) -> dict:
    # spec c: "reclaim-multiplier" vector, reclaimer side ratio 1.25 vs victim side 2
    qs = [queue("d1", gpu=(4, 0, -1), age=9), queue("d1-p1", "d1", gpu=(3, 0, -1), age=8),
          queue("d1-p2", "d1", gpu=(1, 1, -1), age=7), queue("d2", gpu=(3, 0, -1), age=6),
          queue("d2-p1", "d2", gpu=(3, 0, -1), age=5)]
    jobs = [job("d1p2", "d1-p2", [running(f"d1p2-{i}", "n0") for i in range(4)], priority=50, preemptible=False, age=30),
            job("victim", "d2-p1", [running("victim-0", "n0")], age=20),
            job("other", "d2-p1", [running(f"other-{i}", "n0") for i in range(6)], preemptible=False, age=30),
            job("rec", "d1-p1", [pending("rec-0")], age=5)]
    return scenario([node("n0", 11)], qs, jobs, ["reclaim"], reclaimerUtilizationMultiplier=multiplier)


def test_saturation_multiplier_decides_cross_department_reclaim():
    s = run(_saturation_case(1.5))
    assert status(s, "rec-0") == ("Pipelined", "n0") and job_status(s, "victim") == "Releasing"
    s = run(_saturation_case(1.6))
    assert status(s, "rec-0")[0] == "Pending" and job_status(s, "victim") == "Running"
    (ev,) = events_of(s, "rec", "NotReclaiming")
    assert "queue d1 would end more saturated than sibling d2" in ev["message"]
    assert "5 allocated with the job / 4 fair share = 1.25 for gpu" in ev["message"]


def test_validator_refusal_names_the_queue_and_its_numbers():
    # q0 sits exactly at deserved = fair share: the filter keeps it (for consolidation), the validator refuses
    qs = [queue("top", age=3), queue("q0", "top", gpu=(2, 0, -1), age=2), queue("q1", "top", gpu=(2, 0, -1), age=1)]
    jobs = [job("a", "q0", [running("a-0", "n0")], age=5), job("b", "q0", [running("b-0", "n0")], age=4),
            job("p", "q1", [pending("p-0")], age=1)]
    s = run(scenario([node("n0", 2)], qs, jobs, ["reclaim"]))
    assert job_status(s, "a") == "Running" and job_status(s, "b") == "Running"
    (ev,) = events_of(s, "p", "NotReclaiming")
    assert ev["message"] == ("reclaim failed: no acceptable victim set for its task: queue q0 is not above its "
                             "deserved quota or fair share for gpu (2 allocated, deserved 2, fair share 2), so it "
                             "keeps what it holds")


def test_same_shape_job_of_failed_queue_is_skipped():
    jobs = [job(f"r{i}", "q0", [running(f"r{i}-0", "n0")], age=10 - i, priority=100, preemptible=False)
            for i in range(4)]
    jobs += [job("p1", "q1", [pending("p1-0")], age=2), job("p2", "q1", [pending("p2-0")], age=1)]
    s = run(scenario([node("n0", 4)], TWO_QUEUES, jobs, ["reclaim"]))
    (ev,) = events_of(s, "p2", "NotReclaiming")
    assert ev["message"].startswith("skipped: job p1")


def test_stuck_releasing_job_is_no_victim():
    qs = [queue("top", age=3), queue("q0", "top", gpu=(1, 1, -1), age=2), queue("q1", "top", gpu=(0, 1, -1), age=1)]
    jobs = [job("stuck", "q1", [{"name": "stuck-0", "state": "StuckInReleasing", "node": "n0", "gpu": 1}], age=2),
            job("p", "q0", [pending("p-0")], age=1)]
    s = run(scenario([node("n0", 1)], qs, jobs, ["reclaim"]))
    assert status(s, "p-0")[0] == "Pending"
    assert status(s, "stuck-0") == ("StuckInReleasing", "n0")


# ----------------------------------------------------------------------------- property
@st.composite
def random_cluster(draw):
    n_nodes = draw(st.integers(1, 3))
    nodes = [node(f"n{i}", draw(st.integers(1, 4))) for i in range(n_nodes)]
    qs = [queue("top", age=10)]
    n_q = draw(st.integers(1, 3))
    for i in range(n_q):
        qs.append(queue(f"q{i}", "top", gpu=(draw(st.integers(0, 4)), draw(st.integers(0, 2)), -1), age=9 - i))
    jobs = []
    free = {n["name"]: n["gpus"] for n in nodes}
    for k in range(draw(st.integers(0, 6))):
        qn = f"q{draw(st.integers(0, n_q - 1))}"
        gpu = draw(st.sampled_from([1, 1, 2, 0.5]))
        size = draw(st.integers(1, 2))
        tasks = []
        for i in range(size):
            fits = [n for n, f in free.items() if f >= math.ceil(gpu)]
            if not fits:
                break
            nn = draw(st.sampled_from(sorted(fits)))
            free[nn] -= math.ceil(gpu)
            tasks.append(running(f"j{k}-{i}", nn, gpu=gpu))
        if tasks:
            jobs.append(job(f"j{k}", qn, tasks, priority=draw(st.sampled_from([50, 75, 100])), age=20 - k,
                            minAvailable=draw(st.integers(1, len(tasks)))))
    for k in range(draw(st.integers(1, 4))):
        qn = f"q{draw(st.integers(0, n_q - 1))}"
        size = draw(st.integers(1, 3))
        gpu = draw(st.sampled_from([1, 2, 0.5]))
        jobs.append(job(f"p{k}", qn, [pending(f"p{k}-{i}", gpu=gpu) for i in range(size)],
                        priority=draw(st.sampled_from([50, 100, 125])), age=5 - k,
                        minAvailable=draw(st.integers(1, size))))
    return scenario(nodes, qs, jobs, ["allocate", "consolidation", "reclaim", "preempt", "stalegangeviction"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_cluster())
def test_property_decisions_never_over_commit_a_node(sc):
    s = run(sc)
    assert_no_overcommit(s)
    # every victim event names a beneficiary job that really got resources, unless a later action
    # took them from it: a job pipelined in this cycle is itself a valid victim (spec c: victims have
    # Allocated/Pipelined/Binding/Bound/Running tasks), e.g. consolidation pipelines p0, preempt then
    # evicts p0 for a higher-priority job
    for i, e in enumerate(s.events):
        if e["reason"] in ("Reclaimed", "Preempted", "Consolidated") and "victimOf" in e:
            b = s.jobs.index[e["victimOf"]]
            later_victim = any(f["job"] == e["victimOf"] and "victimOf" in f and f["reason"] != "Consolidated"
                               for f in s.events[i + 1:])
            # the beneficiary is pipelined onto released room, or bound at once when its victims were
            # only placements of this cycle (undone, nothing to wait for: "0 victim task(s) evicted, 1
            # placement(s) of this cycle undone")
            got = (int(TaskState.PIPELINED), int(TaskState.BINDING))
            assert later_victim or any(int(s.task_state[t]) in got for t in s.job_task_range(b))


def test_refusal_texts_written_late_read_what_they_read_when_refused():
    """The reclaim validator hands its refusal text over as a function (written only for the last
    refusal of a failed solve): every one of them, written after the solve, must say what it said at
    the moment of the refusal (its inputs are fixed then: the attempt's start copy, the verdict, the
    prefix's request), and some of them are shown in events."""
    from scheduler_engine import clusters
    from scheduler_engine.actions import reclaim as reclaim_mod

    snap = clusters.generate(nodes=60, jobs=480, queues=24, seed=1, shape="mixed")
    s = CycleState(snap)
    for a in ("allocate", "consolidation"):
        get_action(a)(s)
    seen: list[tuple] = []
    make = reclaim_mod.Reclaim.validator

    def validator(self, j, tasks, leaf):
        inner = make(self, j, tasks, leaf)

        def recorded(sc):
            why = inner(sc)
            if why is not None and not isinstance(why, str):
                seen.append((why, why()))
            return why

        return recorded

    reclaim_mod.Reclaim.validator = validator
    try:
        get_action("reclaim")(s)
    finally:
        reclaim_mod.Reclaim.validator = make
    assert len(seen) > 20
    assert all(why() == text for why, text in seen)
    shown = {e["message"] for e in s.events if e["reason"] == "NotReclaiming"}
    assert any(text in m for _why, text in seen for m in shown)


def _cycle_with(snap, actions=("allocate", "consolidation", "reclaim", "preempt")):
    st = CycleState(snap)
    for a in actions:
        get_action(a)(st)
    return st.task_state.tolist(), st.task_node.tolist(), [repr(e) for e in st.events]


def _verdict_tuple(v):
    return (v.ok, v.reason, v.queue, v.resource, v.taken_from)


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", [(60, 400, 20, "mixed", 3), (80, 600, 30, "one-gpu", 2),
                                                          (120, 900, 40, "mixed", 7)])
def test_validator_rows_kept_per_attempt_give_the_verdicts_of_fresh_rows(monkeypatch, nodes, jobs, queues, shape,
                                                                        seed):
    """The proportion validator reads the queue rows as Python lists kept per reclaim attempt (the
    start copy's allocation, ``ShareRows``) and per cycle (tree and static rows, ``StaticRows``): at
    every validated scenario of whole cycles the verdict is the one with every row converted afresh,
    and the cycle decides the same. On mixed clusters, rows that do not follow the attempt's start
    copy (the first attempt's kept for all) give other verdicts."""
    from scheduler_engine import bench
    from scheduler_engine.actions import reclaim
    from scheduler_engine.plugins import proportion
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    kept = _cycle_with(snap)
    real = proportion.validate_reclaim
    calls, bad = [], []

    def checked(shares, **kw):
        out = real(shares, **kw)
        calls.append(kw["rows"] is not None)
        fresh = real(shares, **{k: v for k, v in kw.items() if k != "rows"})
        if _verdict_tuple(out) != _verdict_tuple(fresh):
            bad.append(kw["reclaimer_leaf"])
        return out

    monkeypatch.setattr(reclaim, "COMPILED_VALIDATOR", False)  # (the Python validator's rows)
    with monkeypatch.context() as m:
        m.setattr(reclaim, "validate_reclaim", checked)
        assert _cycle_with(snap) == kept
    assert calls and all(calls) and not bad
    if shape == "one-gpu":  # (there the verdicts do not turn on the victims' queue rows)
        return
    first = {}

    class Stale(proportion.ShareRows):
        __slots__ = ()

        def allocated(self, q):  # the first attempt's rows, whatever the attempt
            first.setdefault(q, super().allocated(q))
            return first[q]

    with monkeypatch.context() as m:
        m.setattr(reclaim, "validate_reclaim", checked)
        m.setattr(reclaim, "ShareRows", Stale)  # (the reclaim action's rows; the fresh ones are made apart)
        _cycle_with(snap)
    assert bad


def test_validator_rows_of_other_shares_are_not_read():
    """``validate_reclaim`` reads the given rows only if they were made for the very shares it
    validates against (else it makes its own): rows of another allocation do not change a verdict."""
    from scheduler_engine.plugins.proportion import QueueShares, ShareRows, validate_reclaim
    U = -1.0
    parent = np.array([-1, 0, 0])
    des = np.array([[U, U, U], [2.0, U, U], [2.0, U, U]])

    def shares(a1, a2):
        alloc = np.array([[a1 + a2, 0, 0], [a1, 0, 0], [a2, 0, 0]], float)
        return QueueShares(parent=parent, deserved=des, limit=np.full((3, 3), U), fair_share=des.copy(),
                           allocated=alloc, allocated_np=np.zeros((3, 3)), total=np.array([8.0, 0, 0]))

    a, b = shares(0.0, 4.0), shares(0.0, 2.0)
    kw = dict(reclaimer_leaf=1, req=np.array([1.0, 0, 0]), reclaimer_preemptible=True,
              victims={2: [np.array([1.0, 0, 0])]})
    assert validate_reclaim(a, **kw) and not validate_reclaim(b, **kw)
    rows_a = ShareRows(a)
    assert validate_reclaim(a, rows=rows_a, **kw)
    assert not validate_reclaim(b, rows=rows_a, **kw)


# ----------------------------------------------------------------------------- the compiled validator
def _python_verdict(state, victims, allocs, start, leaf, req, preemptible, multiplier):
    """The Python validator's verdict of a scenario given as the compiled one gets it (victim array, their
    previous rows, the state as the simulation left it)."""
    from scheduler_engine.plugins import proportion
    from scheduler_engine.solvers.simulation import Scenario, Simulation

    vl = [int(t) for t in victims]
    released, moved, kept = Simulation.outcome(types.SimpleNamespace(state=state), vl)
    sc = Scenario(0, [], vl, released, moved, kept, dict(zip(vl, allocs)), {})
    return proportion.validate_reclaim(start, reclaimer_leaf=leaf, req=req, reclaimer_preemptible=preemptible,
                                       victims=proportion.victim_vectors(state, sc), multiplier=multiplier)


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed,features", [
    (60, 400, 20, "mixed", 3, {}), (120, 900, 40, "mixed", 7, {}), (80, 600, 30, "one-gpu", 2, {}),
    (300, 2400, 60, "mixed", 1, {}), (120, 900, 40, "mixed", 5, {"sub_groups": 0.2, "dra_nodes": 0.2})])
def test_compiled_validator_gives_the_python_verdict_at_every_scenario(monkeypatch, nodes, jobs, queues, shape, seed,
                                                                     features):
    """The compiled reclaim validator (``ReclaimCheck``: ``victim_vectors`` + ``validate_reclaim`` in one kernel
    call) gives, at every validated scenario of whole cycles, the Python validator's verdict - accepted or
    not, the reason's text, the queue, the resource and the queue it was taken from (the pruning's input) -
    and the cycles decide the same with the Python validator."""
    from scheduler_engine import bench
    from scheduler_engine.actions import reclaim

    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    snap = bench.with_features(snap, seed=seed, **features)
    real = reclaim.ReclaimCheck.verdict
    seen, bad = [], []

    def checked(self, victims, allocs, start, leaf, req, preemptible):
        out = real(self, victims, allocs, start, leaf, req, preemptible)
        ref = _python_verdict(self.state, victims, allocs, start, leaf, req, preemptible, float(self.fl[3]))
        seen.append(out.reason.split(":")[0])
        if _verdict_tuple(out) != _verdict_tuple(ref):
            bad.append((_verdict_tuple(out), _verdict_tuple(ref)))
        return out

    with monkeypatch.context() as m:
        m.setattr(reclaim.ReclaimCheck, "verdict", checked)
        compiled = _cycle_with(snap)
    assert seen and not bad
    if shape == "mixed" and not features:
        assert "saturation" in seen and "ok" in seen
    monkeypatch.setattr(reclaim, "COMPILED_VALIDATOR", False)
    assert _cycle_with(snap) == compiled


def _random_validation(rng):
    """A random queue tree, victim jobs with elastic tasks, a simulated outcome and a reclaimer: what the
    two validators are given (unlimited and zero rows, non-preemptible reclaimers, re-placed victims)."""
    from scheduler_engine.plugins.proportion import QueueShares

    U = -1.0
    parent = [-1] * int(rng.integers(1, 4))
    for _ in range(int(rng.integers(2, 12))):
        parent.append(int(rng.integers(0, len(parent))))
    Q = len(parent)
    leaves = [q for q in range(Q) if q not in parent]

    def rows(zero_p):
        r = rng.choice([0.0, 1.0, 2.0, 3.5, 6.0, 10.0], size=(Q, 3))
        r[rng.random((Q, 3)) < 0.25] = U
        r[rng.random((Q, 3)) < zero_p] = 0.0
        return r

    des, fair, lim = rows(0.1), rows(0.15), rows(0.05)
    alloc = np.zeros((Q, 2, 3))
    alloc[:, 0] = rng.choice([0.0, 0.5, 1.0, 2.0, 4.0, 7.0], size=(Q, 3))
    alloc[:, 1] = alloc[:, 0] * rng.choice([0.0, 0.5, 1.0], size=(Q, 1))
    start = QueueShares(parent=np.array(parent), deserved=des, limit=lim, fair_share=fair, allocated=alloc[:, 0],
                        allocated_np=alloc[:, 1], total=np.array([64.0, 512.0, 1024.0]))
    J = int(rng.integers(1, 7))
    counts = rng.integers(1, 5, size=J)
    job_start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    T = int(counts.sum())
    task_job = np.repeat(np.arange(J), counts).astype(np.int64)
    job_min = np.array([int(rng.integers(0, c + 2)) for c in counts], dtype=np.int64)
    job_queue = rng.choice(leaves, size=J).astype(np.int64)
    states = [int(TaskState.RUNNING), int(TaskState.PIPELINED), int(TaskState.BINDING), int(TaskState.RELEASING),
              int(TaskState.PENDING)]
    task_state = rng.choice(states, size=T, p=[0.15, 0.1, 0.05, 0.6, 0.1]).astype(np.int8)
    task_alloc = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0], size=(T, 3))
    state = types.SimpleNamespace(Q=Q, job_start=job_start, task_state=task_state, task_job=task_job,
                                  _task_job_list=task_job.tolist(), job_min_available=job_min,
                                  job_queue_arr=job_queue, job_queue=lambda j: int(job_queue[j]))
    victims = rng.permutation(T)[:int(rng.integers(1, T + 1))].astype(np.int64)
    leaf = int(rng.choice(leaves))
    req = rng.choice([0.0, 1.0, 2.0, 0.5], size=3)
    return state, start, victims, task_alloc[victims], leaf, req, bool(rng.random() < 0.7), float(rng.choice([1.0, 1.5]))


def test_compiled_validator_gives_the_python_verdict_on_random_trees():
    """Random trees, victims, outcomes and reclaimers: the compiled validator's verdict is the Python one (all
    four verdicts met), with one ``ReclaimCheck`` per tree validating several scenarios in a row (its marks put
    back after each call) and its victim buffers grown."""
    from scheduler_engine.actions.reclaim import ReclaimCheck
    from scheduler_engine.plugins.proportion import StaticRows, queue_paths_matrix

    rng = np.random.default_rng(11)
    kinds = set()
    for _ in range(400):
        state, start, victims, allocs, leaf, req, pre, mult = _random_validation(rng)
        check = ReclaimCheck(state, queue_paths_matrix(np.asarray(start.parent)), StaticRows(start), mult)
        check._grow(1)
        for _ in range(3):
            out = check.verdict(victims, allocs, start, leaf, req, pre)
            ref = _python_verdict(state, victims, allocs, start, leaf, req, pre, mult)
            assert _verdict_tuple(out) == _verdict_tuple(ref)
            kinds.add(ref.reason.split(":")[0])
            victims = rng.permutation(victims)
            allocs = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0], size=(victims.shape[0], 3))
            leaf = int(rng.choice([q for q in range(state.Q) if q not in start.parent]))
        assert (check.jloc == -1).all() and (check.qloc == -1).all() and (check.rmark == -1).all()
        assert not check.invset.any()
    assert kinds == {"ok", "strategy", "saturation", "non-preemptible over quota"}


def test_rows_by_task_is_the_dict_of_the_rows_made_on_first_read():
    """A scenario's ``orig_alloc`` (``job_solver.RowsByTask``) reads as ``dict(zip(tasks, rows))``: the same
    keys in the same order, each task's own row, made only when first read."""
    from scheduler_engine.solvers.job_solver import RowsByTask

    rows = np.arange(12, dtype=float).reshape(4, 3)
    tasks = [7, 3, 9, 4]
    m = RowsByTask(tasks, rows)
    assert m._d is None
    assert list(m) == tasks and len(m) == 4 and 9 in m and 5 not in m
    assert all(np.array_equal(m[t], rows[i]) for i, t in enumerate(tasks))
    assert dict(m.items()).keys() == dict(zip(tasks, rows)).keys()
