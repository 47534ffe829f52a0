"""``python -m scheduler_engine``: see :mod:`scheduler_engine.cli`."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
