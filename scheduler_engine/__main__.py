"""``python -m scheduler_engine``: see :mod:`scheduler_engine.cli`."""
import os
import sys

from . import jit_mode
from .cli import main


def _run() -> int:
    """Run the CLI (first, for ``cycle`` / ``check``, whether to re-run interpreted: :mod:`.jit_mode`);
    a reader that goes away early (``... | head``) ends it quietly.

    Python ignores SIGPIPE, so writing to a closed pipe raises BrokenPipeError; the rest of the output
    has no reader, so the process points stdout at /dev/null (the interpreter's final flush would
    otherwise fail again) and exits 1 without a traceback.
    """
    note = os.environ.pop(jit_mode.NOTE_ENV, None)
    if note:
        print(f"note: {note}", file=sys.stderr)
        jit_mode.record_interpreted_run()
    else:
        reason = jit_mode.choose(sys.argv[1:])
        if reason:
            jit_mode.reexec_interpreted(sys.argv[1:], reason, sys.executable)
    try:
        return main()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(_run())
