"""sshare: the worked example of Slurm's classic fair-share documentation (and its Fair Tree
ranking), on the pure math and end to end through accounting, the command and the API."""
from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from fairshare_app import sshare
from fairshare_app.services.accounting import usage_account
from fairshare_app.services.settings import fairshare_settings_update
from queues_app.services.tenants import tenant_create
from tests.fairshare_app.factories import T0, gpu_node, leaf_queue, minutes, running

CLASSIC_UE = {"B": 0.3875, "C": 0.3, "E": 0.25, "F": 0.145833}
CLASSIC_FS = {"u1": 0.408479, "u2": 0.022097, "u3": 0.125, "u4": 0.5, "u5": 0.749154}
FAIR_TREE_LF = {"A": 0.622222, "D": 1.68, "B": 1.6875, "C": 0.45, "E": 0.416667, "u2": 0.5}
FAIR_TREE_FS = {"u5": 1.0, "u4": 0.8, "u1": 0.6, "u3": 0.4, "u2": 0.2}


def docs_tree(*, other_usage: float) -> sshare.Tree:
    """Accounts A=40 {B=30, C=10}, D=60 {E=25, F=35}; u1 in B, u2 u3 in C, u4 in E, u5 in F;
    usage u1 .2, u2 .25, u4 .25 (of a cluster total of .7 + ``other_usage``)."""
    assocs = [sshare.Assoc("root", None, "root", shares=None, extra={"own_usage": other_usage})]
    for key, parent, shares in (("A", "root", 40), ("B", "A", 30), ("C", "A", 10), ("D", "root", 60),
                                ("E", "D", 25), ("F", "D", 35)):
        assocs.append(sshare.Assoc(key, parent, key, shares=shares))
    for user, account, usage in (("u1", "B", .2), ("u2", "C", .25), ("u3", "C", 0), ("u4", "E", .25), ("u5", "F", 0)):
        assocs.append(sshare.Assoc(f"{account}/{user}", account, account, user=user, shares=1, raw_usage=usage * 1e6))
    return sshare.Tree(assocs)


class SshareMathTests:
    def test_classic_worked_example(self):
        tree = docs_tree(other_usage=0.3e6)  # the docs' usages are fractions of the whole cluster
        sshare.compute_classic(tree)
        for acct, ue in CLASSIC_UE.items():
            assert tree.nodes[acct].effective_usage == pytest.approx(ue, abs=1e-6)
        users = {a.user: a for a in tree.nodes.values() if a.is_user}
        for user, fs in CLASSIC_FS.items():
            assert users[user].fairshare == pytest.approx(fs, abs=1e-6)
        assert tree.nodes["C/u2"].norm_shares == pytest.approx(0.05)

    def test_fair_tree_worked_example(self):
        tree = docs_tree(other_usage=0.0)
        sshare.compute_fair_tree(tree)
        for key, lf in FAIR_TREE_LF.items():
            node = tree.nodes[key] if key in tree.nodes else tree.nodes[f"C/{key}"]
            assert node.level_fs == pytest.approx(lf, abs=1e-6)
        assert tree.nodes["F"].level_fs == float("inf") and tree.nodes["C/u3"].level_fs == float("inf")
        users = {a.user: a.fairshare for a in tree.nodes.values() if a.is_user}
        assert users == pytest.approx(FAIR_TREE_FS)

    def test_fair_tree_ties_share_a_rank(self):
        assocs = [sshare.Assoc("root", None, "root", shares=None), sshare.Assoc("X", "root", "X", shares=1)]
        assocs += [sshare.Assoc(f"X/{u}", "X", "X", user=u, shares=1, raw_usage=10) for u in ("a", "b")]
        assocs += [sshare.Assoc("X/c", "X", "X", user="c", shares=1, raw_usage=30)]
        tree = sshare.Tree(assocs)
        sshare.compute_fair_tree(tree)
        fs = {a.user: a.fairshare for a in tree.nodes.values() if a.is_user}
        assert fs["a"] == fs["b"] == 1.0 and fs["c"] == pytest.approx(1 / 3)

    def test_text_parsable_and_json_outputs(self):
        tree = docs_tree(other_usage=0.0)
        sshare.compute_fair_tree(tree)
        rows = sshare.select_rows(tree)
        cols = sshare.default_columns(long=True, algorithm=sshare.FAIR_TREE)
        text = sshare.render(rows, columns=cols, algorithm=sshare.FAIR_TREE, output="text").splitlines()
        assert text[0].split() == list(cols)
        assert set(text[1].replace(" ", "")) == {"-"}
        assert text[3].startswith(" A ") and text[4].startswith("  B ")  # one space per level
        p = sshare.render(rows, columns=cols, algorithm=sshare.FAIR_TREE, output="parsable").splitlines()
        assert p[0] == "|".join(cols) + "|" and all(line.endswith("|") for line in p)
        p2 = sshare.render(rows, columns=cols, algorithm=sshare.FAIR_TREE, output="parsable2").splitlines()
        u5 = next(line for line in p2 if "|u5|" in line).split("|")
        assert u5[0] == "F" and u5[cols.index("FairShare")] == "1.000000" and u5[cols.index("LevelFS")] == "inf"
        doc = json.loads(sshare.render(rows, columns=cols, algorithm=sshare.FAIR_TREE, output="json"))
        by_name = {s["name"]: s for s in doc["shares"]["shares"]}
        assert by_name["u4"]["fairshare"]["factor"]["number"] == pytest.approx(0.8)
        assert by_name["F"]["fairshare"]["level"]["infinite"] is True

    def test_filters(self):
        tree = docs_tree(other_usage=0.0)
        sshare.compute_fair_tree(tree)
        assert [a.key for a in sshare.select_rows(tree, accounts=["C"])] == ["C", "C/u2", "C/u3"]
        assert [a.key for a in sshare.select_rows(tree, users=["u4"])] == ["root", "D", "E", "E/u4"]
        assert [a.user for a in sshare.select_rows(tree, users_only=True)] == ["u1", "u2", "u3", "u4", "u5"]

    def test_bad_trees_are_rejected(self):
        with pytest.raises(ValueError, match="root"):
            sshare.Tree([sshare.Assoc("a", None, "a"), sshare.Assoc("b", None, "b")])
        with pytest.raises(ValueError, match="unknown parent"):
            sshare.Tree([sshare.Assoc("root", None, "root"), sshare.Assoc("a", "nope", "a")])


@pytest.fixture
def docs_cluster(user_factory):
    """The docs' tree as queues (RawShares = GPU over-quota weight) with users running jobs for one
    interval: u1 4 GPUs, u2 5, u4 5 and, on a zero-share account, 6 more (the rest of the cluster's
    usage in the docs' example), no decay."""
    gpu_node("node0", gpus=20)
    a = leaf_queue("A", weight=40)
    d = leaf_queue("D", weight=60)
    q = {"A": a, "D": d, "other": leaf_queue("other", weight=0)}
    for name, parent, w in (("B", a, 30), ("C", a, 10), ("E", d, 25), ("F", d, 35)):
        q[name] = leaf_queue(name, parent, weight=w)
    users = {u: user_factory(u) for u in ("u1", "u2", "u3", "u4", "u5", "o1")}
    start = T0 - minutes(1)
    for user, queue, gpus in (("u1", "B", 4), ("u2", "C", 5), ("u4", "E", 5), ("o1", "other", 6)):
        running(q[queue], name=f"job-{user}", gpus=gpus, started_at=start, owner=users[user])
    usage_account(now=T0)
    # associations = members of the tenants granted each leaf queue (u3 and u5 have no usage)
    for leaf, members in (("B", ["u1"]), ("C", ["u2", "u3"]), ("E", ["u4"]), ("F", ["u5"]), ("other", ["o1"])):
        tenant_create(name=f"team-{leaf.lower()}", members=[users[m] for m in members], queues=[q[leaf]])
    return q, users


def _parse(out: str) -> dict[str, dict[str, str]]:
    lines = out.strip().splitlines()
    head = lines[0].split("|")
    rows = [dict(zip(head, line.split("|"))) for line in lines[1:]]
    return {(r["User"] or r["Account"]): r for r in rows}


@pytest.mark.django_db
class SshareCommandTests:
    def test_classic_worked_example_end_to_end(self, docs_cluster):
        fairshare_settings_update(data={"half_life": timedelta(0)})
        out = StringIO()
        call_command("sshare", "--algorithm", "classic", "-P", "-l", stdout=out)
        rows = _parse(out.getvalue())
        for user in CLASSIC_FS:
            assert float(rows[user]["FairShare"]) == pytest.approx(CLASSIC_FS[user], abs=1e-6)
        for acct in ("B", "C", "E", "F"):
            assert float(rows[acct]["EffectvUsage"]) == pytest.approx(CLASSIC_UE[acct], abs=1e-6)
        assert rows["A"]["RawShares"] == "40" and float(rows["A"]["NormShares"]) == pytest.approx(0.4)
        assert int(rows["root"]["RawUsage"]) == 20 * 60  # GPU-seconds with the default billing weights

    def test_fair_tree_end_to_end_text(self, docs_cluster):
        out = StringIO()
        call_command("sshare", "-l", stdout=out)
        text = out.getvalue()
        assert text.splitlines()[0].split() == list(sshare.LONG_COLUMNS_FAIR_TREE)
        out = StringIO()
        call_command("sshare", "-P", "-U", stdout=out)
        fs = {u: float(r["FairShare"]) for u, r in _parse(out.getvalue()).items()}
        # D outranks A outranks the zero-share account (LevelFS 0)
        expected = {"u5": 6 / 6, "u4": 5 / 6, "u1": 4 / 6, "u3": 3 / 6, "u2": 2 / 6, "o1": 1 / 6}
        assert fs == pytest.approx(expected, abs=1e-6)  # printed with 6 decimals

    def test_json_and_bad_format(self, docs_cluster):
        out = StringIO()
        call_command("sshare", "--json", "--kai", stdout=out)
        doc = json.loads(out.getvalue())
        assert doc["algorithm"] == "fair_tree" and doc["meta"]["half_life_seconds"] == 0
        assert any(s["name"] == "u1" for s in doc["shares"]["shares"])
        with pytest.raises(CommandError, match="unknown column"):
            call_command("sshare", "-o", "Account,Bogus", stdout=StringIO())
