"""Scheduling rules the actions and solvers consult, kept where KAI keeps them (``pkg/scheduler/plugins``).

* :mod:`.proportion`: queue shares, the reclaim gate, victim filter and reclaim validator (KAI
  ``plugins/proportion``), plus the reclaim action's state-bound inputs and explanations.
* :mod:`.nodeplacement`: the node order of a placement (KAI ``nodeplacement`` binpack / spread,
  ``nodeavailability``, ``gpusharingorder``, ``resourcetype``) and its incremental per-shape index.
* :mod:`.minruntime`: preempt / reclaim min-runtime resolution and the elastic min-runtime validator.
* :mod:`.elastic`: elastic jobs and which of a victim's tasks go first (KAI ``GetTasksToEvict``).
* :mod:`.topology`: topology domains of a placement, for real and simulated placements.
"""
