"""``simulate``: time advances, usage decays, arrivals and durations, the documented oscillation."""
from __future__ import annotations

import copy
import csv
import io
from pathlib import Path

import numpy as np
import pytest
import yaml

from scheduler_engine import cli
from scheduler_engine.loader import load_dict, load_scenario
from scheduler_engine.simulate import (
    simulate_snapshot,
    simulation_params,
    switch_points,
    write_csv,
)

SIM_DIR = Path("/work/shared/scenarios/simulation")
if not SIM_DIR.is_dir():  # the repository's own copy location, when the shared tree is absent
    SIM_DIR = Path(__file__).resolve().parents[2] / "shared" / "scenarios" / "simulation"

_UNL = {"quota": -1, "overQuotaWeight": 1, "limit": -1}


def queue(name, parent=None, gpu_quota=0, weight=1):
    return {"name": name, "parent": parent, "priority": 100,
            "resources": {"gpu": {"quota": gpu_quota, "overQuotaWeight": weight, "limit": -1},
                          "cpu": dict(_UNL), "memory": dict(_UNL)},
            "reclaimMinRuntime": "0s", "preemptMinRuntime": "0s"}


def two_queue(gpus=16, k=1.0, window=32, half_life=16, cycles=160, job_gpu=None):
    job_gpu = gpus if job_gpu is None else job_gpu
    return {
        "name": "two queues",
        "config": {"kValue": k, "now": "2026-01-01T00:00:00Z"},
        "nodes": [{"name": "node0", "gpus": gpus, "cpu": "64", "memory": "512Gi"}],
        "queues": [queue("dept"), queue("a", "dept"), queue("b", "dept")],
        "jobs": [],
        "simulation": {"cycles": cycles, "cycleSeconds": 1, "windowSize": window, "windowType": "sliding",
                       "halfLifePeriod": half_life,
                       "arrivals": [{"queue": "a", "count": 50, "atCycle": 0, "gpu": job_gpu},
                                    {"queue": "b", "count": 50, "atCycle": 0, "gpu": job_gpu}]},
    }


def run(data, **kw):
    snap = load_dict(data)
    return simulate_snapshot(snap, **kw)


def test_two_queues_alternate_holding_the_whole_cluster():
    res = run(two_queue())
    a, b = res.queue_names.index("a"), res.queue_names.index("b")
    ga, gb = res.allocated[:, a, 0], res.allocated[:, b, 0]
    # never shared: one queue holds all 16 GPUs or nobody does (the eviction gap)
    assert not np.any((ga > 0) & (gb > 0))
    assert set(np.unique(ga)) <= {0.0, 16.0} and set(np.unique(gb)) <= {0.0, 16.0}
    turns = switch_points(res.holder())
    holders = [q for _, q in turns]
    assert len(turns) >= 4
    assert all(x != y for x, y in zip(holders, holders[1:]))  # strictly alternating
    # after the short first turn, turns last roughly one window (32 cycles) each
    lengths = np.diff([c for c, _ in turns])[1:]
    assert np.all(lengths >= 10) and np.all(lengths <= 3 * 32)
    # the fair-share curves cross: each queue's share goes from high to low within a turn
    fa = res.fair_share[:, a, 0]
    assert fa.max() >= 12 and fa.min() <= 4
    # a parent row is the sum of its children
    d = res.queue_names.index("dept")
    np.testing.assert_allclose(res.allocated[:, d], res.allocated[:, a] + res.allocated[:, b])
    assert np.all(res.running_jobs[:, d] == res.running_jobs[:, a] + res.running_jobs[:, b])


def test_without_time_based_fairshare_the_first_queue_keeps_the_cluster():
    res = run(two_queue(k=0.0, cycles=60))
    assert len(switch_points(res.holder())) == 1
    assert res.evictions.sum() == 0


def test_usage_is_the_decayed_window_fraction():
    # queue a holds 4 of 8 GPUs from cycle 0 on: its usage is 0.5 (numerator and denominator
    # decay alike), b's is 0; the first cycle sees the scenario's own (absent) usage
    data = two_queue(gpus=8, job_gpu=4, cycles=12, window=5, half_life=2)
    data["simulation"]["arrivals"] = [{"queue": "a", "count": 1, "gpu": 4}]
    res = run(data)
    a = res.queue_names.index("a")
    assert res.usage[0, a, 0] == 0.0
    np.testing.assert_allclose(res.usage[1:, a, 0], 0.5)
    assert res.pending_jobs[:, a].sum() == 0 and np.all(res.running_jobs[:, a] == 1)


def test_usage_decays_with_half_life_after_a_job_ends():
    # one 8-GPU job on an 8-GPU cluster for 3 cycles (duration 3 s, 1 s cycles), then nothing
    data = two_queue(gpus=8, cycles=8, window=100, half_life=1)
    data["simulation"]["arrivals"] = [{"queue": "a", "count": 1, "gpu": 8, "duration": 3}]
    res = run(data)
    a = res.queue_names.index("a")
    assert list(res.allocated[:, a, 0]) == [8, 8, 8, 0, 0, 0, 0, 0]
    assert res.finished_jobs == 1
    # at cycle 5: samples 0..4 = 8, 8, 8, 0, 0 with weights 2^-(5-t): num = 8 (2^-5 + 2^-4 + 2^-3)
    w = 2.0 ** -(5 - np.arange(5))
    expected = (8 * w[:3]).sum() / (8 * w).sum()
    assert res.usage[5, a, 0] == pytest.approx(expected)


def test_durations_free_the_cluster_for_the_next_job():
    data = two_queue(gpus=8, cycles=10)
    data["simulation"]["cycleSeconds"] = 60
    data["simulation"]["arrivals"] = [{"queue": "a", "count": 3, "gpu": 8, "duration": "2m"}]
    res = run(data)
    a = res.queue_names.index("a")
    # each job runs two cycles (120 s of 60 s cycles), then the next binds in the same cycle
    assert list(res.running_jobs[:7, a]) == [1, 1, 1, 1, 1, 1, 0]
    assert list(res.pending_jobs[:7, a]) == [2, 2, 1, 1, 0, 0, 0]
    assert res.finished_jobs == 3 and int(res.binds.sum()) == 3


def test_arrivals_wait_for_their_cycle():
    data = two_queue(gpus=8, cycles=8)
    data["simulation"]["arrivals"] = [{"queue": "b", "count": 2, "atCycle": 5, "gpu": 1}]
    res = run(data)
    b = res.queue_names.index("b")
    assert list(res.running_jobs[:, b]) == [0] * 5 + [2] * 3
    assert res.allocated[4, b, 0] == 0 and res.allocated[5, b, 0] == 2


def test_recreated_evictions_come_back_pending():
    data = two_queue(window=8, half_life=0, cycles=40)
    deleted = run(data)
    recreated = simulate_snapshot(load_dict(data), _params(data, "recreate"))
    assert deleted.evictions.sum() > 0 and recreated.evictions.sum() > 0
    total = lambda r: r.pending_jobs[-1, 1:].sum() + r.running_jobs[-1, 1:].sum()  # noqa: E731
    assert total(recreated) == 100  # nobody leaves
    assert total(deleted) == 100 - deleted.evicted_jobs
    assert deleted.evicted_jobs == deleted.evictions.sum()


def _params(data, evicted):
    p = simulation_params(load_dict(data))
    p.evicted = evicted
    return p


def test_csv_columns_and_cpu_when_requested(tmp_path):
    data = two_queue(gpus=8, cycles=3)
    data["simulation"]["arrivals"] = [{"queue": "a", "count": 1, "gpu": 2, "cpu": "1500m", "memory": "1Gi"}]
    res = run(data)
    buf = io.StringIO()
    write_csv(res, buf)
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert list(rows[0]) == ["cycle", "queue", "allocated_gpu", "fair_share_gpu", "usage_gpu", "pending_jobs",
                             "running_jobs", "allocated_cpu", "fair_share_cpu", "usage_cpu", "allocated_memory",
                             "fair_share_memory", "usage_memory"]
    assert len(rows) == 3 * 3
    row = next(r for r in rows if r["cycle"] == "1" and r["queue"] == "a")
    assert row["allocated_gpu"] == "2" and row["allocated_cpu"] == "1.5" and row["allocated_memory"] == str(2**30)
    gpu_only = run(two_queue(cycles=2))
    buf = io.StringIO()
    write_csv(gpu_only, buf)
    assert buf.getvalue().splitlines()[0] == "cycle,queue,allocated_gpu,fair_share_gpu,usage_gpu,pending_jobs,running_jobs"


def test_cli_writes_csv_and_one_plot_per_resource(tmp_path):
    data = two_queue(gpus=8, cycles=4)
    data["simulation"]["arrivals"] = [{"queue": "a", "count": 1, "gpu": 2, "cpu": 1}]
    sc = tmp_path / "sim.yaml"
    sc.write_text(yaml.safe_dump(data))
    out, err = io.StringIO(), io.StringIO()
    rc = cli.main(["simulate", str(sc), "--output", str(tmp_path / "h.csv"), "--plot", str(tmp_path / "h.png")],
                  out=out, err=err)
    assert rc == 0, err.getvalue()
    assert (tmp_path / "h.csv").read_text().count("\n") == 1 + 4 * 3
    for name in ("h.png", "h-cpu.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_errors(tmp_path, capsys):
    no_sim = two_queue()
    del no_sim["simulation"]
    p = tmp_path / "nosim.yaml"
    p.write_text(yaml.safe_dump(no_sim))
    assert cli.main(["simulate", str(p), "--output", str(tmp_path / "x.csv")]) == 2
    assert "no simulation block" in capsys.readouterr().err
    bad = two_queue()
    bad["simulation"]["windowSize"] = -3
    p.write_text(yaml.safe_dump(bad))
    assert cli.main(["simulate", str(p), "--output", str(tmp_path / "x.csv")]) == 2
    assert "simulation.windowSize" in capsys.readouterr().err
    p.write_text(yaml.safe_dump(two_queue()))
    assert cli.main(["simulate", str(p), "--output", str(tmp_path / "x.csv"), "--cycles", "0"]) == 2
    assert cli.main(["simulate", str(p)]) == 2  # --output is required
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.skipif(not SIM_DIR.is_dir(), reason="shared scenarios not available")
@pytest.mark.parametrize("path", sorted(SIM_DIR.glob("*.yaml")) if SIM_DIR.is_dir() else [],
                         ids=lambda p: p.name[:3])
def test_every_shared_simulation_runs(path):
    """Every example loads and runs (shortened: the full runs are in the README's numbers)."""
    snap = load_scenario(path)
    params = simulation_params(snap)
    res = simulate_snapshot(snap, params, cycles=min(params.cycles, 12))
    assert res.cycles == min(params.cycles, 12)
    leaves = res.is_leaf
    # never more allocated than the cluster has
    total = float(np.asarray(snap.nodes.gpus).sum())
    assert np.all(res.allocated[:, leaves, 0].sum(axis=1) <= total + 1e-9)


@pytest.mark.skipif(not (SIM_DIR / "004-env-test-short-simulation.yaml").exists(), reason="shared file missing")
def test_short_env_simulation_alternates_every_few_cycles():
    snap = load_scenario(SIM_DIR / "004-env-test-short-simulation.yaml")
    res = simulate_snapshot(snap)
    turns = switch_points(res.holder())
    assert len(turns) >= 10
    holders = [q for _, q in turns]
    assert all(x != y for x, y in zip(holders, holders[1:]))


def test_e2e_like_reclaim_by_history():
    """queue-b's single pod is scheduled soon after it arrives although its weight is 1/10000."""
    snap = load_scenario(SIM_DIR / "007-e2e-time-aware-reclaim.yaml") if (SIM_DIR / "007-e2e-time-aware-reclaim.yaml").exists() else None
    if snap is None:
        pytest.skip("shared file missing")
    res = simulate_snapshot(snap, cycles=90)
    b = res.queue_names.index("queue-b")
    first = int(np.flatnonzero(res.allocated[:, b, 0] > 0)[0])
    assert 60 <= first <= 62
    assert np.all(res.allocated[first:, b, 0] == 1)


def test_input_snapshot_is_not_mutated():
    data = two_queue(cycles=5)
    data["jobs"] = [{"name": "pre", "queue": "a", "tasks": [{"gpu": 16, "state": "Running", "node": "node0"}]}]
    snap = load_dict(copy.deepcopy(data))
    before = snap.tasks.state.copy()
    simulate_snapshot(snap)
    assert np.array_equal(snap.tasks.state, before)
