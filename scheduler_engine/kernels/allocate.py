"""The allocate action's per-job attempt for the common case, in one call: tasks that take whole
GPUs or none (not shared, no DRA claims, no GPU memory request), all of one shape (one node index),
no subgroups, no topology.

:func:`attempt` does what ``Allocator._attempt`` + ``place_tasks`` + ``place_task`` + ``_put`` +
``CycleState.place`` do for such a job, with the same comparisons and float operations in the same
order: the queue check of the whole attempt (limits on the leaf's path, and the non-preemptible
quota: :func:`.scenario.over_capacity`, the comparisons ``CycleState.queue_over_capacity`` makes),
then per task (in task order) the per-task queue check of a gang, the shape index's query
(:func:`.node_index.query_whole`), the device choice (:func:`.devices.choose_whole`) and the
placement with its journal entry, devices included (:func:`.journal.place`, as
``CycleState._place_fast`` calls it). Binding when the task fits the node's free resources,
otherwise pipelined.

It stops at the first task it cannot place and returns how many it placed and why it stopped; the
caller explains the failure from that state as the Python attempt would (same messages, failure
caches) and rolls back.
The object half of the journal (``node_log``, gpuGroup lists) is the caller's: the kernel reports
each placed task's node.
"""
from __future__ import annotations

import numpy as np

from . import kernel
from .devices import choose_whole
from .journal import place
from .node_index import query_whole
from .scenario import over_capacity

# why an attempt stopped (``io[1]``)
DONE = 0  # every task placed
QUEUE = 1  # the whole attempt's request is over a queue's limit / non-preemptible quota
TASK_QUEUE = 2  # a gang's next task is over a queue's limit / quota
NO_NODE = 3  # no node fits the next task
NO_DEVICES = 4  # the index's node has no devices for it (not expected: the index counted them)


@kernel
def attempt(tasks, req, q, nonpre, lim, des,
            log, lo, hi, sched, sel, rc, rm, k, ndev, top, cap, col, spread, idle_ok, any_ok, key, hk, hn, hs,
            i0, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active, job_version,
            queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake,
            ji, jf, task_request, io):
    """Place ``tasks`` (in this order) of one job of leaf queue q; returns how many were placed
    (``tasks.shape[0]``: all; fewer: the attempt failed at the next one, nothing is undone).

    ``req``: the whole attempt's quota request (3,); ``lim`` / ``des``: (Q, 3) limits and deserved
    quotas with inf for unlimited. The node index (constants and arrays of :func:`query_whole`)
    reads its changed nodes from ``log[lo:hi]``; each placement's node is appended at ``log[hi]``
    (room for one per task). Journal entries are written from ``i0`` on (room for one per task);
    the state's arrays follow :func:`.journal.place`.

    Out (``io`` int64, at least 2 + m for m tasks): ``io[0]`` how many log entries the index has
    seen, ``io[1]`` why it stopped (:data:`DONE`, :data:`QUEUE`, ...), task i's node ``io[2 + i]``."""
    m = tasks.shape[0]
    io[0] = lo
    io[1] = DONE
    if over_capacity(path_mat, q, req[0], req[1], req[2], nonpre, lim, des, qab) >= 0:
        io[1] = QUEUE
        return 0
    gang = m > 1
    preemptible = not nonpre
    devs = np.empty(k, dtype=np.int64)
    for i in range(m):
        t = tasks[i]
        if gang and over_capacity(path_mat, q, task_request[t, 0], task_request[t, 1], task_request[t, 2], nonpre,
                                  lim, des, qab) >= 0:
            io[1] = TASK_QUEUE
            return i
        n = query_whole(log, lo, hi, sched, sel, rc, rm, k, ndev, top, cap, col, spread, node_both, dev_free,
                        dev_rel, idle_ok, any_ok, key, hk, hn, hs)
        lo = hi
        io[0] = lo
        if n < 0:
            io[1] = NO_NODE
            return i
        pipelined = not idle_ok[n]
        c = choose_whole(dev_free, dev_rel, n, ndev[n], k, pipelined, devs)
        if c < 0:
            io[1] = NO_DEVICES
            return i
        place(i0 + i, t, n, pipelined, preemptible, input_state, task_state, task_node, task_job, job_queue,
              path_mat, num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc,
              task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf, task_request, devs, c)
        io[2 + i] = n
        log[hi] = n
        hi += 1
    return m
