"""``bench``: the generated cluster is what the issue describes, and the report has every phase."""
from __future__ import annotations

import json

import numpy as np
import pytest

from scheduler_engine import bench, cli
from scheduler_engine.bench import generate, queue_tree_sizes, run_bench
from scheduler_engine.snapshot import GPU, TaskState
from scheduler_engine.state import CycleState


@pytest.fixture(autouse=True)
def _quick_calibration(request, monkeypatch):
    """The calibration workload takes about a second per report: a fixed stand-in here, except
    where the workload itself is tested."""
    if request.node.name != "test_calibration_workload_is_real_work":
        from scheduler_engine import bench

        monkeypatch.setattr(bench, "calibration_seconds", lambda: {"wall": 0.5, "cpu": 0.4})


def test_generated_cluster_shape():
    snap = generate(nodes=64, jobs=400, queues=40, seed=3)
    assert set(np.asarray(snap.nodes.gpus).tolist()) == {8}
    assert len(set(np.asarray(snap.nodes.gpu_memory).tolist())) > 1  # mixed GPU models
    # a 3-level tree: departments -> projects -> leaves, jobs only in leaves
    parent = np.asarray(snap.queues.parent)
    depth = np.zeros(len(parent), dtype=int)
    for q in range(len(parent)):
        depth[q] = len(snap.queues.path_to_root(q))
    assert set(depth.tolist()) == {1, 2, 3}
    leaf = snap.queues.is_leaf
    assert leaf[np.asarray(snap.jobs.queue)].all() and (depth[leaf] == 3).all()
    # 70 % full, every node within capacity (checked by the engine's own accounting)
    state = CycleState(snap)
    used = 1 - state.node_idle_gpus().sum() / state.node_devices.sum()
    assert 0.65 <= used <= 0.75
    assert (state.node_idle >= -1e-6).all()
    # gangs, single-task, fractional and GPU-memory pending jobs
    st = np.asarray(snap.tasks.state)
    pend = st == int(TaskState.PENDING)
    req = np.asarray(snap.tasks.request)
    assert ((req[pend, GPU] > 0) & (req[pend, GPU] < 1)).any()
    assert (np.asarray(snap.tasks.gpu_memory)[pend] > 0).any()
    counts = np.asarray(snap.jobs.task_count)
    assert (counts > 1).any() and (counts == 1).any()
    assert (np.asarray(snap.jobs.min_available)[counts > 1] == counts[counts > 1]).all()


def test_generation_is_deterministic_per_seed():
    a, b = generate(nodes=20, jobs=50, queues=10, seed=5), generate(nodes=20, jobs=50, queues=10, seed=5)
    c = generate(nodes=20, jobs=50, queues=10, seed=6)
    assert np.array_equal(a.tasks.request, b.tasks.request) and a.jobs.names == b.jobs.names
    assert not np.array_equal(a.tasks.state, c.tasks.state) or not np.array_equal(a.tasks.request, c.tasks.request)


def test_one_gpu_shape():
    snap = generate(nodes=10, jobs=30, queues=10, shape="one-gpu")
    pend = np.asarray(snap.tasks.state) == int(TaskState.PENDING)
    assert pend.sum() == 30 and (np.asarray(snap.tasks.request)[pend, GPU] == 1).all()


def test_queue_tree_sizes():
    assert queue_tree_sizes(1000) == (10, 90, 900)
    for q in (3, 4, 7, 100, 12345):
        top, mid, leaves = queue_tree_sizes(q)
        assert top >= 1 and mid >= 1 and leaves >= 1 and top + mid + leaves == q
    with pytest.raises(ValueError):
        queue_tree_sizes(2)


def test_report_has_every_phase_and_decisions():
    rep = run_bench(nodes=30, jobs=150, queues=12, seed=2, compare=True)
    t = rep["timings"]
    for phase in ("fair_share", "open", "allocate", "consolidation", "reclaim", "preempt", "stalegangeviction",
                  "result", "total", "ordering"):
        assert phase in t and t[phase] >= 0
    assert t["ordering"] <= t["total"]
    assert rep["decisions"]["binding"] > 0 and rep["peak_rss_bytes"] > 0
    assert rep["reference"]["same_decisions"] and rep["reference"]["speedup"] > 0
    assert rep["cluster"]["pending_jobs"] == 150


def test_cli_text_and_json(capsys):
    assert cli.main(["bench", "--nodes", "12", "--jobs", "40", "--queues", "9", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["params"]["nodes"] == 12 and rep["cluster"]["nodes"] == 12
    assert cli.main(["bench", "--nodes", "12", "--jobs", "40", "--queues", "9", "--actions", "allocate"]) == 0
    text = capsys.readouterr().out
    assert "allocate" in text and "reclaim" not in text and "peak memory" in text


def test_kernels_are_loaded_before_the_timed_cycles_unless_no_warm(capsys):
    """The command line loads (or compiles) the kernels first and reports that apart from the cycle;
    ``--no-warm`` times the first cycle with it; the decisions do not depend on it."""
    from scheduler_engine.kernels import JIT_ENABLED

    argv = ["bench", "--nodes", "12", "--jobs", "40", "--queues", "9", "--json", "--no-calibration"]
    assert cli.main(argv) == 0
    warm = json.loads(capsys.readouterr().out)
    assert cli.main([*argv, "--no-warm"]) == 0
    cold = json.loads(capsys.readouterr().out)
    assert "kernels" not in cold and warm["decisions"]["digest"] == cold["decisions"]["digest"]
    if JIT_ENABLED:
        k = warm["kernels"]
        assert k["compiled"] + k["loaded"] > 10 and k["wall"] > 0 and k["cpu"] > 0
        assert cli.main([a for a in argv if a != "--json"]) == 0
        assert "kernels ready before the timed cycles" in capsys.readouterr().out
    else:  # nothing to compile
        assert "kernels" not in warm


@pytest.mark.parametrize("args,msg", [
    (["--nodes", "0", "--jobs", "1"], "--nodes"),
    (["--nodes", "2", "--jobs", "-1"], "--jobs"),
    (["--nodes", "2", "--jobs", "1", "--queues", "2"], "--queues"),
    (["--nodes", "2", "--jobs", "1", "--actions", "allocate,bogus"], "--actions"),
    (["--nodes", "2", "--jobs", "1", "--subgroups", "1.5"], "--subgroups"),
    (["--nodes", "2", "--jobs", "1", "--dra-nodes", "-0.1"], "--dra-nodes"),
])
def test_cli_rejects_bad_sizes(args, msg, capsys):
    assert cli.main(["bench", *args]) == 2
    assert msg in capsys.readouterr().err


def test_per_phase_decisions_add_up_and_memory_is_reported():
    rep = run_bench(nodes=30, jobs=150, queues=12, seed=2, actions=("allocate", "stalegangeviction"))
    d = rep["decisions"]
    per = d["per_phase"]
    assert list(per) == ["allocate", "stalegangeviction"]
    for k in ("binding", "pipelined", "evicted", "events"):
        assert sum(p[k] for p in per.values()) == d[k]
    assert per["allocate"]["binding"] == d["binding"] > 0
    mem = d["peak_rss_bytes_after"]
    assert set(mem) == {"open", "allocate", "stalegangeviction", "result"}
    assert 0 < mem["open"] <= mem["allocate"] <= mem["result"] <= rep["peak_rss_bytes"]


def test_reference_runs_on_a_cluster_of_at_most_reference_nodes():
    from scheduler_engine.bench import reference_size

    assert reference_size(10000, 56000, 1000, 1000) == (1000, 5600, 100)
    assert reference_size(800, 4000, 100, 1000) == (800, 4000, 100)
    assert reference_size(10000, 10, 10, 1000) == (1000, 1, 3)
    rep = run_bench(nodes=24, jobs=120, queues=9, seed=2, compare=True, reference_nodes=12,
                    actions=("allocate",))
    r = rep["reference"]
    assert r["cluster"] == {"nodes": 12, "jobs": 60, "queues": 4} and r["same_decisions"] and r["placed_tasks"] > 0


def test_target_summary_and_exit_status(capsys):
    from scheduler_engine.bench import target_summary

    rep = {"timings": {"total": 1.5}, "peak_rss_bytes": 3 * 2**30}
    g = target_summary(rep)
    assert g["seconds_ok"] and not g["memory_ok"] and not g["met"]
    assert target_summary({"timings": {"total": 0.1}, "peak_rss_bytes": 2**20})["met"]
    base = ["bench", "--nodes", "12", "--jobs", "40", "--queues", "9", "--actions", "allocate", "--target"]
    assert cli.main(base) == 0
    assert "target: full cycle" in capsys.readouterr().out
    assert cli.main([*base, "--target-seconds", "1e-9", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["target"]["seconds_ok"] is False and out["target"]["memory_ok"] is True


def test_calibration_is_timed_in_the_same_run_and_targets_can_be_ratios(capsys):
    """The shared machine's speed varies: the report carries the calibration workload and the cycle's
    ratio to it, and ``--target-ratio R`` checks the cycle against R times that workload."""
    rep = run_bench(nodes=12, jobs=40, queues=9, actions=("allocate",))
    assert rep["calibration"] == {"wall": 0.5, "cpu": 0.4}
    assert rep["ratio"]["wall"] == rep["timings"]["total"] / 0.5
    assert rep["ratio"]["cpu"] == rep["timings"]["total_cpu"] / 0.4 > 0
    assert "calibration" not in run_bench(nodes=12, jobs=40, queues=9, actions=("allocate",), calibrate=False)
    base = ["bench", "--nodes", "12", "--jobs", "40", "--queues", "9", "--actions", "allocate", "--target"]
    assert cli.main([*base, "--target-ratio", "1000"]) == 0
    text = capsys.readouterr().out
    assert "full cycle / calibration" in text and "= 1000 x calibration" in text
    assert cli.main([*base, "--target-ratio", "1e-12", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["target"]["target_seconds"] == 1e-12 * 0.5 and out["target"]["seconds_ok"] is False
    assert cli.main([*base, "--target-ratio", "2", "--no-calibration"]) == 2
    assert cli.main([*base, "--target-ratio", "-1"]) == 2


def test_calibration_workload_is_real_work():
    from scheduler_engine.bench import calibration_seconds

    cal = calibration_seconds()
    assert 0.05 < cal["cpu"] < 60 and cal["wall"] >= cal["cpu"] * 0.5


def test_decision_digest_is_stable_and_tells_decisions_apart(capsys):
    """The digest is how a speed-up is checked to decide the same: equal for the same cluster on
    every run, different once one decision differs."""
    from scheduler_engine.actions import get_action
    from scheduler_engine.bench import decision_digest

    a = run_bench(nodes=30, jobs=200, queues=12, seed=3)["decisions"]["digest"]
    b = run_bench(nodes=30, jobs=200, queues=12, seed=3, repeat=2)["decisions"]["digest"]
    c = run_bench(nodes=30, jobs=200, queues=12, seed=4)["decisions"]["digest"]
    assert a == b and a != c and len(a) == 16

    snap = generate(nodes=20, jobs=80, queues=9, seed=5)
    state = CycleState(snap)
    get_action("allocate")(state)
    before = decision_digest(state)
    state.events[-1] = dict(state.events[-1], message=state.events[-1]["message"] + ".")
    assert decision_digest(state) != before  # an event text is part of what was decided

    assert cli.main(["bench", "--nodes", "12", "--jobs", "40", "--queues", "9"]) == 0
    assert "digest " in capsys.readouterr().out


def test_features_off_leave_the_cluster_as_generated():
    from scheduler_engine.bench import with_features

    snap = generate(nodes=20, jobs=100, queues=10, seed=3)
    assert with_features(snap, sub_groups=0.0, dra_nodes=0.0, seed=3) is snap


def test_subgroup_share_and_dra_pool_decide_within_capacity():
    """The generated subgroup trees and DRA pool are valid scenario input, and a full cycle on them
    never gives one device to two tasks that both keep it (a Pipelined task only takes devices
    that are free or released by a victim)."""
    from scheduler_engine.bench import with_features
    from scheduler_engine.cycle import run_cycle_with_state

    base = generate(nodes=64, jobs=400, queues=20, seed=5)
    snap = with_features(base, sub_groups=0.2, dra_nodes=0.25, seed=5)
    assert int((snap.jobs.sg_count > 0).sum()) > 20
    assert int((snap.nodes.devices.sum(axis=1) > 0).sum()) == 16
    assert int(snap.nodes.gpus[snap.nodes.devices[:, 0] > 0].sum()) == 0
    run = int(TaskState.RUNNING)
    on_pool = (snap.tasks.state == run) & np.isin(snap.tasks.node, np.flatnonzero(snap.nodes.devices[:, 0] > 0))
    assert on_pool.any() and (snap.tasks.request[on_pool, GPU] == 0).all()
    state, res = run_cycle_with_state(snap)
    holders: dict[tuple, list[str]] = {}
    for t, held in enumerate(state.task_dra):
        if held and state.task_node[t] >= 0:
            for c, devs in held.items():
                for dv in devs:
                    holders.setdefault((int(state.task_node[t]), c, dv), []).append(int(state.task_state[t]))
    keep = (int(TaskState.RUNNING), int(TaskState.BINDING), int(TaskState.STUCK_RELEASING))
    for key, states in holders.items():
        assert sum(1 for x in states if x in keep) <= 1, key
        assert sum(1 for x in states if x in keep or x == int(TaskState.PIPELINED)) <= 1 or \
            int(TaskState.RELEASING) in states, key
    assert (state.dra_free >= -1e-9).all() and (state.dra_rel >= -1e-9).all()
    from scheduler_engine import subgroups

    trees = np.flatnonzero(snap.jobs.sg_count > 0).tolist()
    started = [j for j in trees if state.job_num_active(j) > 0]
    assert started  # some trees were placed ...
    for j in started:  # ... and none is left partly placed below its root's requirement
        assert subgroups.root_satisfied(state, j), snap.jobs.names[j]


def _digest_per_event(state) -> str:
    """The digest as first written: a ``json.dumps`` and a hash update per event."""
    import hashlib
    import json
    h = hashlib.sha256()
    h.update(np.asarray(state.task_state, dtype=np.int64).tobytes())
    h.update(np.asarray(state.task_node, dtype=np.int64).tobytes())
    for ev in state.events:
        ev = {k: v for k, v in ev.items() if k in bench._DIGEST_EVENT_KEYS}
        h.update(json.dumps(ev, sort_keys=True, default=str).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def test_event_texts_of_the_digest_are_json_dumps():
    """The digest writes each event's JSON itself (``bench._event_json``): the very text of
    ``json.dumps(sort_keys=True, default=str)`` for names and texts with quotes, backslashes, control
    and non-ASCII characters, missing and extra keys, and values that are not strings (ints, numpy
    ints, None, bools, floats: the encoder's path); on whole cycles the digest is the per-event one."""
    import json
    from scheduler_engine.actions import get_action
    from scheduler_engine.state import CycleState
    enc = json.JSONEncoder(sort_keys=True, default=str)
    texts = ["plain", 'q"uote', "back\\slash", "tab\tnew\nline", "ünï €", "\x00\x1f", "", "emoji \U0001F600"]
    evs = [{"job": a, "reason": b, "message": c} for a in texts for b in texts[:3] for c in texts]
    evs += [{"job": "j", "reason": "r", "message": "m", "task": "t", "victimOf": "v", "category": "x"},
            {"message": "m", "victimOf": "v"}, {}, {"category": "only"},
            {"job": "j", "reason": "r", "message": "m", "task": 3},
            {"job": "j", "reason": "r", "message": "m", "task": np.int64(3)},
            {"job": None, "reason": True, "message": 1.5, "victimOf": float("nan")}]
    for ev in evs:
        want = json.dumps({k: v for k, v in ev.items() if k in bench._DIGEST_EVENT_KEYS}, sort_keys=True, default=str)
        assert bench._event_json(ev, enc) == want, ev
    for shape in ("mixed", "one-gpu"):
        st = CycleState(bench.generate(nodes=30, jobs=250, queues=8, seed=2, shape=shape))
        for a in ("allocate", "consolidation", "reclaim", "preempt"):
            get_action(a)(st)
        assert len(st.events) > 50
        assert bench.decision_digest(st) == _digest_per_event(st)
        st.events.append({"job": "x", "reason": "y", "message": 'a "quoted" text', "task": np.int64(1)})
        assert bench.decision_digest(st) == _digest_per_event(st)
