"""Compiled array kernels of the engine's hot loops (numba; the same source runs with
``NUMBA_DISABLE_JIT=1``). Kernels take and return numpy arrays; the Python layer keeps KAI's
control flow and the explanations."""
