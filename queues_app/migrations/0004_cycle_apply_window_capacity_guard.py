"""Scheduling cycle (issue #4): apply-window timestamps, the fencing row, and database guards.

* ``SchedulingCycle.apply_started_at / apply_finished_at``: taken inside the apply transaction
  after the fencing lock, so the invariant checker can prove apply phases never overlap (I8).
* The singleton ``SchedulerState`` row (id=1) exists from the start, so the first cycles of
  several workers never race to create it.
* Triggers that refuse any write leaving a node over-committed in whole GPU devices (whole-GPU
  tasks plus the shared devices in use must fit the node's devices) or a shared device above
  one whole device (reliability.md 2.0, I1/I2 "defence in depth").  They guard every writer,
  not only the cycle: a buggy engine, an import, or raw SQL.  PostgreSQL checks once per
  statement (transition tables) after locking the touched node rows, so two concurrent
  transactions cannot both pass; SQLite checks per row (its writers are serialized anyway).
"""
from django.db import migrations, models

HOLDING = "('Running', 'Releasing', 'StuckInReleasing', 'Binding')"

PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION kai_task_capacity_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad RECORD;
BEGIN
    PERFORM 1 FROM queues_app_node n
     WHERE n.id IN (SELECT DISTINCT r.node_id FROM kai_new_rows r
                     WHERE r.node_id IS NOT NULL AND r.state IN {HOLDING})
     ORDER BY n.id FOR UPDATE;
    SELECT n.name, n.gpus, s.devices INTO bad
      FROM queues_app_node n
      JOIN (SELECT t.node_id,
                   COALESCE(SUM(CASE WHEN t.gpu >= 1 THEN t.gpu ELSE 0 END), 0)
                   + COUNT(DISTINCT CASE WHEN (t.gpu > 0 AND t.gpu < 1) OR (t.gpu = 0 AND t.gpu_memory_mib > 0)
                                         THEN t.gpu_groups->>0 END) AS devices
              FROM queues_app_task t
             WHERE t.state IN {HOLDING}
               AND t.node_id IN (SELECT DISTINCT r.node_id FROM kai_new_rows r WHERE r.node_id IS NOT NULL)
             GROUP BY t.node_id) s ON s.node_id = n.id
     WHERE s.devices > n.gpus
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'node % over-committed: tasks hold % GPU devices of %', bad.name, bad.devices, bad.gpus
              USING ERRCODE = 'check_violation';
    END IF;
    SELECT n.name, t.gpu_groups->>0 AS grp, SUM(t.gpu) AS used INTO bad
      FROM queues_app_task t JOIN queues_app_node n ON n.id = t.node_id
     WHERE t.state IN {HOLDING} AND t.gpu > 0 AND t.gpu < 1 AND t.gpu_groups->>0 IS NOT NULL
       AND t.node_id IN (SELECT DISTINCT r.node_id FROM kai_new_rows r WHERE r.node_id IS NOT NULL)
     GROUP BY n.name, t.gpu_groups->>0
    HAVING SUM(t.gpu) > 1.0001
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'shared GPU % on node % over-committed: fractions sum to %', bad.grp, bad.name, bad.used
              USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$;
CREATE OR REPLACE FUNCTION kai_node_capacity_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad RECORD;
BEGIN
    SELECT n.name, n.gpus, s.devices INTO bad
      FROM kai_new_rows n
      JOIN (SELECT t.node_id,
                   COALESCE(SUM(CASE WHEN t.gpu >= 1 THEN t.gpu ELSE 0 END), 0)
                   + COUNT(DISTINCT CASE WHEN (t.gpu > 0 AND t.gpu < 1) OR (t.gpu = 0 AND t.gpu_memory_mib > 0)
                                         THEN t.gpu_groups->>0 END) AS devices
              FROM queues_app_task t
             WHERE t.state IN {HOLDING} AND t.node_id IN (SELECT id FROM kai_new_rows)
             GROUP BY t.node_id) s ON s.node_id = n.id
     WHERE s.devices > n.gpus
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'node % cannot shrink to % GPUs: tasks hold % devices', bad.name, bad.gpus, bad.devices
              USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER kai_task_capacity_ins AFTER INSERT ON queues_app_task
    REFERENCING NEW TABLE AS kai_new_rows FOR EACH STATEMENT EXECUTE FUNCTION kai_task_capacity_guard();
CREATE TRIGGER kai_task_capacity_upd AFTER UPDATE ON queues_app_task
    REFERENCING NEW TABLE AS kai_new_rows FOR EACH STATEMENT EXECUTE FUNCTION kai_task_capacity_guard();
CREATE TRIGGER kai_node_capacity_upd AFTER UPDATE ON queues_app_node
    REFERENCING NEW TABLE AS kai_new_rows FOR EACH STATEMENT EXECUTE FUNCTION kai_node_capacity_guard();
"""
PG_DROP = """
DROP TRIGGER IF EXISTS kai_task_capacity_ins ON queues_app_task;
DROP TRIGGER IF EXISTS kai_task_capacity_upd ON queues_app_task;
DROP TRIGGER IF EXISTS kai_node_capacity_upd ON queues_app_node;
DROP FUNCTION IF EXISTS kai_task_capacity_guard();
DROP FUNCTION IF EXISTS kai_node_capacity_guard();
"""

_SQLITE_DEVICES = f"""(SELECT COALESCE(SUM(CASE WHEN t.gpu >= 1 THEN t.gpu ELSE 0 END), 0)
        + COUNT(DISTINCT CASE WHEN (t.gpu > 0 AND t.gpu < 1) OR (t.gpu = 0 AND t.gpu_memory_mib > 0)
                              THEN json_extract(t.gpu_groups, '$[0]') END)
     FROM queues_app_task t WHERE t.node_id = NEW.node_id AND t.state IN {HOLDING})"""
_SQLITE_BODY = f"""
WHEN NEW.node_id IS NOT NULL AND NEW.state IN {HOLDING}
BEGIN
    SELECT RAISE(ABORT, 'node over-committed: tasks hold more GPU devices than the node has')
     WHERE {_SQLITE_DEVICES} > (SELECT n.gpus FROM queues_app_node n WHERE n.id = NEW.node_id) + 0.0001;
    SELECT RAISE(ABORT, 'shared GPU over-committed: fractions on one device sum above 1')
     WHERE NEW.gpu > 0 AND NEW.gpu < 1 AND json_extract(NEW.gpu_groups, '$[0]') IS NOT NULL
       AND (SELECT SUM(t.gpu) FROM queues_app_task t
             WHERE t.node_id = NEW.node_id AND t.state IN {HOLDING} AND t.gpu > 0 AND t.gpu < 1
               AND json_extract(t.gpu_groups, '$[0]') = json_extract(NEW.gpu_groups, '$[0]')) > 1.0001;
END;"""
SQLITE_CREATE = [
    f"CREATE TRIGGER kai_task_capacity_ins AFTER INSERT ON queues_app_task {_SQLITE_BODY}",
    f"CREATE TRIGGER kai_task_capacity_upd AFTER UPDATE OF state, node_id, gpu, gpu_groups ON queues_app_task "
    f"{_SQLITE_BODY}",
    f"""CREATE TRIGGER kai_node_capacity_upd AFTER UPDATE OF gpus ON queues_app_node
BEGIN
    SELECT RAISE(ABORT, 'node cannot shrink below the GPU devices its tasks hold')
     WHERE {_SQLITE_DEVICES.replace('NEW.node_id', 'NEW.id')} > NEW.gpus + 0.0001;
END;""",
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS kai_task_capacity_ins",
    "DROP TRIGGER IF EXISTS kai_task_capacity_upd",
    "DROP TRIGGER IF EXISTS kai_node_capacity_upd",
]


def create_guards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        # Through a raw cursor without parameters: the function body contains RAISE '%' markers.
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(PG_FUNCTION)
    elif vendor == "sqlite":
        for sql in SQLITE_CREATE:
            schema_editor.execute(sql)


def drop_guards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(PG_DROP)
    elif vendor == "sqlite":
        for sql in SQLITE_DROP:
            schema_editor.execute(sql)


def create_state_row(apps, schema_editor):
    SchedulerState = apps.get_model("queues_app", "SchedulerState")
    SchedulerState.objects.using(schema_editor.connection.alias).get_or_create(id=1)


class Migration(migrations.Migration):

    dependencies = [
        ("queues_app", "0003_idempotencykey"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedulingcycle",
            name="apply_started_at",
            field=models.DateTimeField(blank=True, help_text="Inside the apply transaction, after the fencing lock (I8).",
                                       null=True),
        ),
        migrations.AddField(
            model_name="schedulingcycle",
            name="apply_finished_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(create_state_row, migrations.RunPython.noop),
        migrations.RunPython(create_guards, drop_guards),
    ]
