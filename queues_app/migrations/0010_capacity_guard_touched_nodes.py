"""The PostgreSQL task capacity guard (migration 0004) checks only the nodes a statement leaves
tasks holding, found once into an array, and returns at once when there is none.

Why: the guard used ``node_id IN (SELECT DISTINCT ... FROM kai_new_rows)`` subqueries whose plan
depends on the table statistics.  With statistics taken on a small table (a fresh install, or
before a tenant's 10,000-task gang arrived) PostgreSQL scanned every task once per node: the
cancel of 10,000 pending tasks spent 11 s in the guard although those tasks hold no node at all.
A statement that only frees resources (tasks leaving nodes, Pending -> Failed) cannot
over-commit a node, so it is not checked; the rest looks tasks up by ``node_id = ANY(array)``
(the node_id index), whatever the statistics say.  Same checks, same errors otherwise.
"""
from django.db import migrations

HOLDING = "('Running', 'Releasing', 'StuckInReleasing', 'Binding')"

PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION kai_task_capacity_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    touched bigint[];
    bad RECORD;
BEGIN
    SELECT array_agg(DISTINCT r.node_id) INTO touched FROM kai_new_rows r
     WHERE r.node_id IS NOT NULL AND r.state IN {HOLDING};
    IF touched IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM queues_app_node n WHERE n.id = ANY(touched) ORDER BY n.id FOR UPDATE;
    -- Aggregate the touched nodes' tasks once (no join the planner could turn into a scan per
    -- node), then compare with each node's capacity by primary key.
    SELECT s.node_id, s.devices,
           (SELECT n.gpus FROM queues_app_node n WHERE n.id = s.node_id) AS gpus INTO bad
      FROM (SELECT t.node_id,
                   COALESCE(SUM(CASE WHEN t.gpu >= 1 THEN t.gpu ELSE 0 END), 0)
                   + COUNT(DISTINCT CASE WHEN (t.gpu > 0 AND t.gpu < 1) OR (t.gpu = 0 AND t.gpu_memory_mib > 0)
                                         THEN t.gpu_groups->>0 END) AS devices
              FROM queues_app_task t
             WHERE t.node_id = ANY(touched) AND t.state IN {HOLDING}
             GROUP BY t.node_id) s
     WHERE s.devices > (SELECT n.gpus FROM queues_app_node n WHERE n.id = s.node_id)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'node % over-committed: tasks hold % GPU devices of %',
              (SELECT n.name FROM queues_app_node n WHERE n.id = bad.node_id), bad.devices, bad.gpus
              USING ERRCODE = 'check_violation';
    END IF;
    SELECT s.node_id, s.grp, s.used INTO bad
      FROM (SELECT t.node_id, t.gpu_groups->>0 AS grp, SUM(t.gpu) AS used
              FROM queues_app_task t
             WHERE t.node_id = ANY(touched) AND t.state IN {HOLDING} AND t.gpu > 0 AND t.gpu < 1
               AND t.gpu_groups->>0 IS NOT NULL
             GROUP BY t.node_id, t.gpu_groups->>0) s
     WHERE s.used > 1.0001
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'shared GPU % on node % over-committed: fractions sum to %', bad.grp,
              (SELECT n.name FROM queues_app_node n WHERE n.id = bad.node_id), bad.used
              USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$;
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:  # raw: the body contains RAISE '%' markers
            cursor.execute(PG_FUNCTION)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        from importlib import import_module

        old = import_module("queues_app.migrations.0004_cycle_apply_window_capacity_guard")
        body = old.PG_FUNCTION.split("CREATE OR REPLACE FUNCTION kai_node_capacity_guard()")[0]
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(body)


class Migration(migrations.Migration):

    dependencies = [
        ("queues_app", "0009_cycle_quarantined_count"),
    ]

    operations = [migrations.RunPython(forward, backward)]
