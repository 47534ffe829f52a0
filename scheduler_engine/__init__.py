"""The scheduling engine: a cluster snapshot in (numpy arrays), one cycle's decisions out.

Laid out like KAI's ``pkg/scheduler``: ``loader`` / ``snapshot`` (scenario -> Snapshot), ``state``
(the cycle's mutable state), ``ordering``, ``fairshare``, ``actions/``, ``solvers/``, ``plugins/``,
``kernels/`` (numba), ``cycle`` / ``result`` (one cycle, its decisions), ``cli`` / ``bench``.

May import: the standard library, numpy, numba, PyYAML.  Never Django, Celery or any control-plane
package (``tests/kaiplatform/test_import_graph.py`` checks it).
"""
