"""Victim search of the evicting actions (KAI ``actions/common/solvers``).

* :mod:`.job_solver`: :class:`~.job_solver.VictimSolver`, the solve loop over prefixes of the
  beneficiary's tasks and the simulation of one scenario.
* :mod:`.accumulation`: victims accumulated in victim order, scenarios emitted, pruning.
* :mod:`.victim_order`: the order candidate victims are offered in.
* :mod:`.idle_gpus`: the GPU-count filter a scenario must pass before it is simulated.
* :mod:`.simulation`: evicting a victim set and re-placing everybody in queue order.
"""
