"""Random sequences of tree writes through the services (reliability.md 2.9): create,
re-parent, delete, quota edits, workload submissions.  After every step the invariants hold:
the tree is a forest (no cycles, no orphans), ``path``/``depth`` agree with ``parent``,
workloads sit only on leaves, quotas are valid, and every effective quota edit left exactly
one audit row.  Rejected operations must raise ApplicationError and change nothing."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import transaction
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, multiple, rule

from queues_app.errors import ApplicationError
from queues_app.models import Queue, QueueResource, QuotaChange, Workload
from queues_app.services import queue_create, queue_delete, queue_set_quota, queue_update, workload_submit

NAMES = [f"q{i}" for i in range(8)]
QUOTA_VALUES = st.one_of(st.integers(-3, 50), st.sampled_from([-1, 0.5, 10**25]),
                         st.floats(allow_nan=True, allow_infinity=True))


class TreeMachine(RuleBasedStateMachine):
    queues = Bundle("queues")

    def __init__(self) -> None:
        super().__init__()
        self._atomic = transaction.atomic()
        self._atomic.__enter__()
        self.audit_rows = QuotaChange.objects.count()
        self.n = 0

    def teardown(self) -> None:
        transaction.set_rollback(True)
        self._atomic.__exit__(None, None, None)

    def _queue(self, name: str) -> Queue | None:
        return Queue.objects.filter(name=name).first()

    def _snapshot(self):
        return (sorted(Queue.objects.values_list("name", "parent__name", "path", "version")),
                sorted(QueueResource.objects.values_list("queue__name", "resource", "quota", "limit",
                                                         "over_quota_weight")),
                Workload.objects.count(), QuotaChange.objects.count())

    def _attempt(self, fn) -> bool:
        before = self._snapshot()
        try:
            with transaction.atomic():
                fn()
            return True
        except ApplicationError as exc:
            assert exc.extra, "errors must name a field"
            assert self._snapshot() == before, "a rejected write changed something"
            return False

    @rule(target=queues, name=st.sampled_from(NAMES), gpu=st.integers(-2, 16))
    def create_top(self, name, gpu):
        if self._attempt(lambda: queue_create(name=name, quotas={"gpu": {"quota": gpu}})):
            self.audit_rows += 9
            return name
        return multiple()

    @rule(target=queues, name=st.sampled_from(NAMES), parent=queues, gpu=st.integers(-2, 16))
    def create_child(self, name, parent, gpu):
        parent_q = self._queue(parent)
        if parent_q is None:
            return multiple()
        if self._attempt(lambda: queue_create(name=name, parent=parent_q, quotas={"gpu": {"quota": gpu}})):
            self.audit_rows += 9
            return name
        return multiple()

    @rule(name=queues, parent=st.one_of(st.none(), queues))
    def reparent(self, name, parent):
        q = self._queue(name)
        new_parent = self._queue(parent) if parent else None
        if q is None or (parent and new_parent is None):
            return
        self._attempt(lambda: queue_update(queue=q, data={"parent": new_parent}))

    @rule(name=queues)
    def delete(self, name):
        q = self._queue(name)
        if q is None:
            return
        rows = QueueResource.objects.filter(queue=q).count() * 3
        if self._attempt(lambda: queue_delete(queue=q)):
            self.audit_rows += rows

    @rule(name=queues, resource=st.sampled_from(["gpu", "cpu", "memory"]),
          field=st.sampled_from(["quota", "limit", "over_quota_weight"]), value=QUOTA_VALUES)
    def set_quota(self, name, resource, field, value):
        q = self._queue(name)
        if q is None:
            return
        old = getattr(QueueResource.objects.get(queue=q, resource=resource), field)
        if self._attempt(lambda: queue_set_quota(queue=q, resource=resource, **{field: value})):
            new = getattr(QueueResource.objects.get(queue=q, resource=resource), field)
            self.audit_rows += int(new != old)

    @rule(name=queues)
    def submit(self, name):
        q = self._queue(name)
        if q is None:
            return
        self.n += 1
        self._attempt(lambda: workload_submit(queue=q, name=f"w{self.n}", task={"gpu": 1}))

    @invariant()
    def tree_is_a_consistent_forest(self):
        rows = {q.pk: q for q in Queue.objects.all()}
        for q in rows.values():
            seen, cur, chain = set(), q, []
            while cur is not None:
                assert cur.pk not in seen, "cycle"
                seen.add(cur.pk)
                chain.append(cur.pk)
                cur = rows[cur.parent_id] if cur.parent_id is not None else None
            expected = "".join(f"{i:0{Queue.PATH_SEGMENT_WIDTH}d}." for i in reversed(chain))
            assert q.path == expected and q.depth == len(chain)

    @invariant()
    def workloads_only_on_leaves(self):
        inner = set(Queue.objects.filter(parent__isnull=False).values_list("parent_id", flat=True))
        assert not Workload.objects.filter(queue_id__in=inner).exists()

    @invariant()
    def quotas_are_valid_and_audited(self):
        for r in QueueResource.objects.all():
            for value in (r.quota, r.limit, r.over_quota_weight):
                assert value.is_finite() and (value >= 0 or value == Decimal(-1))
        assert QueueResource.objects.count() == 3 * Queue.objects.count()
        assert QuotaChange.objects.count() == self.audit_rows


TreeMachine.TestCase.settings = settings(max_examples=20, stateful_step_count=25, deadline=None,
                                         suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])


@pytest.mark.django_db
def test_random_tree_write_sequences_keep_the_invariants():
    TreeMachine.TestCase("runTest").runTest()
