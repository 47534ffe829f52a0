"""The prefix search's bound for reclaim's candidates named by their leaves, without their job array.

The bound (:class:`scheduler_engine.solvers.accumulation.PrefixSearch`): per node, the GPUs of every
active, placed task of the candidate jobs, added in task order (:func:`.victim_run.candidate_gpu`).
Reclaim's candidates are the member jobs (preemptible, with an active task) of a set of victim
leaves (:class:`scheduler_engine.solvers.victim_order.RunCandidates`); at 10,000 nodes ~12,600 of
~90,000 jobs, so :func:`.victim_run.candidate_gpu` takes its pass over every task with a per-job mark
made from the job array, which had to be gathered from the leaves' runs first. Here the mark is
read from the leaf mask and the membership row directly: the same pass, the same terms in the same
order, so the sums are the same floats.
"""
from __future__ import annotations

import numpy as np

from . import leaf_kernel


@leaf_kernel
def member_gpu(keep: np.ndarray, member: np.ndarray, job_queue: np.ndarray, task_job: np.ndarray,
               task_state: np.ndarray, active: np.ndarray, task_node: np.ndarray, task_gpu: np.ndarray,
               out: np.ndarray) -> None:
    """Add to ``out`` (per node) the GPUs of every active, placed task whose job is a member
    (``member``) of a kept leaf (``keep[job_queue[job]]``), in task order: what
    :func:`.victim_run.candidate_gpu` adds for the job array of those members."""
    for t in range(task_state.shape[0]):
        if active[task_state[t]]:
            j = task_job[t]
            if member[j] and keep[job_queue[j]]:
                n = task_node[t]
                if n >= 0:
                    out[n] = out[n] + task_gpu[t]
