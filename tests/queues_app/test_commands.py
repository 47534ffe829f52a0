"""Management commands: load_demo (idempotent), export_scenario / import_scenario, and the
export -> ``python -m scheduler_engine cycle`` replay round trip."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from queues_app.cycle.scenario import import_scenario
from queues_app.models import Node, Queue, QuotaChange, Task, Tenant, Workload
from scheduler_engine.loader import load_dict, load_scenario

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = Path("/work/shared/scenarios")


def _engine_cycle(*files: Path) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "scheduler_engine", "cycle", "--json", *map(str, files)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    for o in out:
        o.pop("file", None)
    return out


class LoadDemoTests:
    def test_it_loads_the_demo_once(self, settings):
        call_command("load_demo", stdout=StringIO())
        counts = (Node.objects.count(), Queue.objects.count(), Tenant.objects.count(), Workload.objects.count(),
                  Task.objects.count(), QuotaChange.objects.count())
        assert counts[:4] == (20, 6, 3, 11)
        racks = [n.labels["kai.scheduler/rack"] for n in Node.objects.all()]
        assert racks.count("rack-1") == racks.count("rack-2") == 8
        pool = \
            [n for n in Node.objects.all() if n.devices]
        assert len(pool) == 4 and all(n.gpus == 0 and n.dra_gpus == 4 for n in pool)
        assert Workload.objects.get(name="disagg-serve").sub_groups.count() == 4
        assert all(t.dra_gpus == 4 for t in Task.objects.filter(workload__name="imex-train"))
        assert Task.objects.filter(state="Running").exists() and Task.objects.filter(state="Pending").exists()
        out = StringIO()
        call_command("load_demo", stdout=out)
        assert (Node.objects.count(), Queue.objects.count(), Tenant.objects.count(), Workload.objects.count(),
                Task.objects.count(), QuotaChange.objects.count()) == counts
        assert "API token" in out.getvalue()

    def test_it_creates_admin_only_on_the_embedded_default(self, settings, client):
        from django.contrib.auth import get_user_model

        settings.EMBEDDED_DATABASE = False
        call_command("load_demo", stdout=StringIO())
        assert not get_user_model().objects.filter(username="admin").exists()
        settings.EMBEDDED_DATABASE = True
        call_command("load_demo", stdout=StringIO())
        assert client.login(username="admin", password="admin")
        assert client.login(username="alice", password="demo-password")


class ExportScenarioTests:
    def test_the_demo_export_is_a_scenario_the_engine_runs(self, tmp_path):
        call_command("load_demo", stdout=StringIO())
        target = tmp_path / "live.yaml"
        call_command("export_scenario", str(target), "--now", "2026-05-01T00:00:00Z", stderr=StringIO())
        snap = load_scenario(target)
        assert len(snap.nodes) == 20 and len(snap.jobs) == 11
        [result] = _engine_cycle(target)
        assert result["jobs"]["resnet-train"]["status"] == "Running"
        assert result["jobs"]["imex-train"]["status"] in ("Binding", "Pipelined")
        assert {t["node"][:5] for t in result["jobs"]["imex-train"]["tasks"]} == {"gb200"}
        assert result["jobs"]["disagg-serve"]["subGroups"]["decode"]["satisfied"]
        assert any(j["status"] in ("Binding", "Pipelined") for j in result["jobs"].values())

    def test_it_rejects_bad_options(self, tmp_path):
        with pytest.raises(CommandError):
            call_command("export_scenario", str(tmp_path / "x.yaml"), "--now", "yesterday")
        with pytest.raises(CommandError):
            call_command("export_scenario", str(tmp_path / "x.yaml"), "--config", "[1]")

    def test_import_then_export_as_json(self, tmp_path):
        path = next(SCENARIOS.glob("reclaim_preempt/*.yaml"))
        call_command("import_scenario", str(path), stdout=StringIO())
        with pytest.raises(CommandError):
            call_command("import_scenario", str(path), stdout=StringIO())  # not empty any more
        target = tmp_path / "out.json"
        call_command("export_scenario", str(target), stderr=StringIO())
        assert json.loads(target.read_text())["nodes"]


# A sample from every golden directory: decisions on the exported file equal those on the original.
REPLAY = sorted(p for d in ("allocate", "fairshare", "reclaim_preempt") for p in sorted(
    (SCENARIOS / d).glob("*.yaml"))[::12])


@pytest.mark.skipif(not REPLAY, reason="golden scenarios not available")
def test_exported_state_replays_to_the_same_decisions(tmp_path):
    from django.db import transaction

    originals, exports = [], []
    for i, path in enumerate(REPLAY):
        data = yaml.safe_load(path.read_text())
        data.pop("expect", None)
        snap = load_dict(copy.deepcopy(data), source=str(path))
        if snap.config.now is None:
            continue  # ages would be measured from different clocks
        orig = tmp_path / f"orig-{i}.yaml"
        orig.write_text(yaml.safe_dump(data))
        exp = tmp_path / f"export-{i}.yaml"
        with transaction.atomic():
            import_scenario(snap)
            call_command("export_scenario", str(exp), "--config", json.dumps(data.get("config") or {}),
                         "--usage", json.dumps(data.get("usage") or {}), stderr=StringIO())
            transaction.set_rollback(True)
        originals.append(orig)
        exports.append(exp)
    assert len(originals) >= 10
    for a, b, path in zip(_engine_cycle(*originals), _engine_cycle(*exports), originals):
        a_events = sorted(json.dumps(e, sort_keys=True) for e in a.pop("events"))
        b_events = sorted(json.dumps(e, sort_keys=True) for e in b.pop("events"))
        assert a == b, path
        assert a_events == b_events, path
