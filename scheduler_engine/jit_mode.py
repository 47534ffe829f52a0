"""Compile the kernels, or run them interpreted, for one ``python -m scheduler_engine cycle|check`` run.

Why: the kernels are compiled once per machine and cache directory (``python -m
scheduler_engine.kernels.warm``: ~40 s of CPU, more on a slower or busy machine), then loaded in well
under a second. A one-off what-if run on a fresh machine would pay that compile for a cycle that
takes a few seconds. The kernels keep one source that also runs as plain Python
(``NUMBA_DISABLE_JIT=1``, checked in CI to decide exactly the same), and on small inputs plain Python
is far cheaper than compiling first: the 243 golden scenarios ``check`` in ~4 s interpreted, a
500-node / 4,000-job file ``cycle``s in ~10 s interpreted, against ~40 s of compiling before either.

So a process entry (``__main__``, not ``cli.main`` called from Python) asks :func:`choose` before
anything imports the kernels: with ``--jit auto`` (the default; or ``KAI_ENGINE_JIT``) it runs
interpreted when the cache holds none of the big kernels for this source and this CPU **and** the
scenario files are small (:data:`MAX_BYTES` in all); it then re-executes itself with
``NUMBA_DISABLE_JIT=1`` (numba reads that when it is imported) and says so on stderr. The
interpreted runs add up their CPU seconds in a ledger beside numba's cache files; once they have cost
about a compile (:data:`COMPILE_SECONDS`), the next run compiles, so running small files again and
again never costs much more than compiling at once would have (the ski-rental rule). ``--jit on``
always compiles (or loads), ``--jit off`` always interprets. The decisions are the same either way;
only the time differs. ``bench`` and ``simulate`` are not affected (many cycles: compiling pays).
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import io
import json
import os
import time
from pathlib import Path
from typing import Sequence

ENV = "KAI_ENGINE_JIT"
#: set in the re-executed process: the reason it runs interpreted (printed once on stderr)
NOTE_ENV = "KAI_ENGINE_JIT_NOTE"
#: set in the re-executed process: the ledger its CPU seconds are added to when it exits
LEDGER_ENV = "KAI_ENGINE_JIT_LEDGER"
MODES = ("auto", "on", "off")
#: the commands whose one-off run may be interpreted
COMMANDS = ("cycle", "check")
#: interpreted only when the scenario files total at most this many bytes. Measured interpreted
#: (CPU): a 500-node / 4,000-job generated file, 3.4 MB as JSON, ~10 s; 1,000 nodes / 5,600 jobs, 5.4 MB,
#: ~21 s; the compile it replaces ~37 s plus a few seconds of compiled cycle (all scale with the machine)
MAX_BYTES = 6_000_000
#: CPU seconds of a cold compile (``kernels.warm``, this project's development machine): once the
#: interpreted runs on this cache have cost that much in all, the next run compiles instead (a user
#: running small files again and again pays at most about twice what compiling at once would have cost)
COMPILE_SECONDS = 40.0
#: the file, in numba's cache directory of :data:`KEY_KERNELS`' first kernel, that adds up those seconds
LEDGER = "kai-interpreted-seconds.json"
#: the kernels whose compile is most of a cold start (``kernels.warm``'s largest): without a cached
#: version of any of them the cache is "cold"
KEY_KERNELS = ("scenario.run_scenario", "search.run_search", "victim_run.run_victims", "allocate.attempt")


def cache_is_cold() -> bool | None:
    """True when numba's cache holds no compiled version, for this source and this CPU, of one of
    :data:`KEY_KERNELS`; False when it holds all of them; None when that cannot be told (numba
    missing or disabled, or its cache layout not the one read here: then nothing changes)."""
    try:
        import numba
        from numba.core.registry import cpu_target
    except ImportError:
        return None
    if numba.config.DISABLE_JIT:
        return None
    from .kernels import warm

    try:
        magic = cpu_target.target_context.codegen().magic_tuple()
        ks = warm.kernels()
        for name in KEY_KERNELS:
            index = ks[name]._cache._cache_file._load_index()  # {} when missing or stale (source changed)
            if not any(isinstance(key, tuple) and len(key) > 1 and key[1] == magic for key in index):
                return True
    except (AttributeError, KeyError, TypeError, ValueError, OSError, EOFError):
        return None
    return False


def ledger_path() -> Path | None:
    """Where the interpreted runs on this cache directory add up their CPU seconds (beside numba's
    own files of :data:`KEY_KERNELS`' first kernel), or None when that cannot be told."""
    try:
        from .kernels import warm

        return Path(warm.kernels()[KEY_KERNELS[0]]._cache._cache_path) / LEDGER
    except (ImportError, AttributeError, KeyError, TypeError):
        return None


def interpreted_seconds(path: Path | None) -> float:
    """CPU seconds the interpreted runs have spent on this cache directory so far (0 when unknown)."""
    try:
        return float(json.loads(path.read_text())["seconds"]) if path is not None else 0.0
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def add_interpreted_seconds(path: Path, seconds: float) -> None:
    """Add one interpreted run's CPU seconds to the ledger (best effort: an unwritable cache directory
    only means the runs stay interpreted; numba could not cache a compile there either)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"seconds": interpreted_seconds(path) + float(seconds)}))
    except OSError:
        pass


def input_bytes(command: str, paths: Sequence[str]) -> int | None:
    """Total size of the scenario files a ``cycle`` / ``check`` run would read (the command's own
    file list, directories searched as ``check`` searches them), or None when the command would refuse
    its paths (a directory for ``cycle``, a missing file, stdin: the command itself reports those)."""
    from .cli import _InputError, _scenario_files

    try:
        files = _scenario_files(paths, recurse=command == "check")
    except _InputError:
        return None
    return sum(f.stat().st_size for f in files)


def requested_mode(args: argparse.Namespace, environ) -> str:
    """``--jit``, else ``KAI_ENGINE_JIT``, else ``auto`` (an unknown value in the environment counts
    as ``auto``; the option's values are checked by argparse)."""
    mode = getattr(args, "jit", None) or environ.get(ENV, "auto")
    return mode if mode in MODES else "auto"


def choose(argv: Sequence[str], environ=os.environ) -> str | None:
    """Why this process should re-run interpreted (the note to print), or None to go on as it is.

    None also when the command line does not parse (the command reports that itself), when it is
    not ``cycle`` / ``check``, when the JIT is already off, or when the cache state is unknown."""
    if environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
        return None
    if not any(a in COMMANDS for a in argv):  # (bench / simulate: not parsed here)
        return None
    from .cli import build_parser

    try:  # (quietly: a usage error is the command's own to print)
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            args, _ = build_parser().parse_known_args(list(argv))
    except SystemExit:
        return None
    if getattr(args, "command", None) not in COMMANDS:
        return None
    mode = requested_mode(args, environ)
    if mode == "on":
        return None
    if mode == "off":
        return "--jit off: the kernels run interpreted (same decisions)"
    size = input_bytes(args.command, args.files if args.command == "cycle" else args.paths)
    if size is None or size > MAX_BYTES:
        return None
    if cache_is_cold() is not True:
        return None
    if interpreted_seconds(ledger_path()) >= COMPILE_SECONDS:
        return None  # (interpreted runs have cost a compile already: this one compiles, later ones load)
    amount = f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.0f} kB"
    return (f"the kernel cache is cold and the input is small ({amount}): running the kernels "
            f"interpreted (same decisions) instead of compiling them first; `python -m "
            f"scheduler_engine.kernels.warm` compiles them once (~40 s), or pass --jit on")


def reexec_interpreted(argv: Sequence[str], note: str, executable: str) -> None:
    """Replace this process by ``python -m scheduler_engine ARGV`` with the JIT disabled (numba reads
    ``NUMBA_DISABLE_JIT`` when it is imported, so a fresh interpreter is the one way to switch)."""
    env = dict(os.environ)
    env["NUMBA_DISABLE_JIT"] = "1"
    env[NOTE_ENV] = note
    ledger = ledger_path()
    if ledger is not None:
        env[LEDGER_ENV] = str(ledger)
    os.execve(executable, [executable, "-m", "scheduler_engine", *argv], env)


def record_interpreted_run(environ=os.environ) -> None:
    """In the re-executed process: add its CPU seconds to the ledger when it exits."""
    path = environ.pop(LEDGER_ENV, None)
    if path:
        atexit.register(lambda: add_interpreted_seconds(Path(path), time.process_time()))
