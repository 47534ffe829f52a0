"""Test tooling shared by the tests and the development tools of a source checkout: the Kubernetes API
emulator (``kube_emulator``, also behind ``manage.py kube_demo``) and the engine's plain-Python
reference allocate (``engine_reference``, also behind ``bench --compare-reference``).  Never shipped:
neither the wheel nor the container image contains ``tests``."""
