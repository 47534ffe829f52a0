"""``python -m scheduler_engine``: run scenarios from the command line.

Commands::

    cycle FILE... [--json] [--timings]   one cycle per file; text summary, or JSON Lines with a "file" key
    check FILE|DIR... [-v]               run and compare with `expect`; one line per mismatch, then a summary
    simulate ...                         scheduler_engine.simulate.main(argv) (loaded on demand)
    bench ...                            scheduler_engine.bench.main(argv) (loaded on demand)

Exit status: 0 ok; 1 a mismatch (``check``) or an engine error (an exception inside an action);
2 invalid input (bad scenario, missing
file, usage error, unavailable command).  Every file is loaded and validated *before* anything
runs, so an invalid scenario prints its problems on stderr and nothing at all on stdout: scripts
piping ``cycle --json`` never see partial output for a bad batch.
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import traceback
from pathlib import Path
from typing import Sequence, TextIO

from .budget import summary_text
from .loader import ScenarioError, load_scenario
from .snapshot import Snapshot

log = logging.getLogger("scheduler_engine")

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_INVALID = 2

SCENARIO_SUFFIXES = (".yaml", ".yml", ".json")
_LAZY_COMMANDS = {
    "simulate": ("scheduler_engine.simulate", "run many cycles with arrivals, usage and decay; write a CSV history"),
    "bench": ("scheduler_engine.bench", "time the engine on a generated cluster"),
}


class _InputError(Exception):
    """Bad command-line input (message for stderr, exit status 2)."""


def _scenario_files(paths: Sequence[str], *, recurse: bool) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            if not recurse:
                raise _InputError(f"{raw}: is a directory (cycle takes scenario files)")
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in SCENARIO_SUFFIXES)
            if not found:
                raise _InputError(f"{raw}: no scenario files (.yaml, .yml, .json) in this directory")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise _InputError(f"{raw}: no such file or directory")
    return files


def _load_all(files: list[Path], err: TextIO) -> list[Snapshot] | None:
    """Load every file; on any invalid one print all problems on ``err`` and return None."""
    snaps: list[Snapshot] = []
    bad = 0
    for f in files:
        try:
            snaps.append(load_scenario(f))
        except ScenarioError as exc:
            bad += 1
            n = len(exc.problems)
            print(f"error: {f}: invalid scenario ({n} problem{'s' if n != 1 else ''}):", file=err)
            for line in str(exc).splitlines():
                print(f"  {line}", file=err)
    if bad:
        print(f"error: {bad} invalid scenario file{'s' if bad != 1 else ''}; nothing was run", file=err)
        return None
    return snaps


# ------------------------------------------------------------------------------------------ cycle


def _fmt_num(x: float | int) -> str:
    if isinstance(x, float) and not x.is_integer():
        return f"{x:.6g}"
    return str(int(x))


def _fmt_res(d: dict) -> str:
    return f"gpu={_fmt_num(d['gpu'])} cpu={_fmt_num(d['cpu'])} memory={_fmt_num(d['memory'])}"


def _print_text(path: Path, result, out: TextIO, *, timings: bool) -> None:
    print(f"== {path}: {result.name}", file=out)
    counts = result.status_counts()
    print("tasks: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"), file=out)
    if result.jobs:
        width = max(len(j) for j in result.jobs)
        print("jobs:", file=out)
        for name, job in result.jobs.items():
            nodes = sorted({t["node"] for t in job["tasks"] if t["node"] is not None})
            where = ",".join(nodes) if nodes else "-"
            print(f"  {name:<{width}}  {job['status']:<16} {where}", file=out)
    if result.queues:
        width = max(len(q) for q in result.queues)
        print("queues:", file=out)
        for name, q in result.queues.items():
            print(f"  {name:<{width}}  fairShare {_fmt_res(q['fairShare'])}  allocated {_fmt_res(q['allocated'])}",
                  file=out)
    if result.nodes:
        width = max(len(n) for n in result.nodes)
        print("nodes:", file=out)
        for name, n in result.nodes.items():
            print(f"  {name:<{width}}  idleGpus {_fmt_num(n['idleGpus'])}  releasingGpus {_fmt_num(n['releasingGpus'])}",
                  file=out)
    if result.events:
        print("events:", file=out)
        for e in result.events:
            print(f"  {e.get('job', '-')}: {e.get('reason', '')}: {e.get('message', '')}", file=out)
    if result.budget:
        print(f"budget: {summary_text(result.budget)}", file=out)
    if timings:
        print("timings: " + ", ".join(f"{k} {v * 1000:.2f}ms" for k, v in result.timings.items()), file=out)


def _budget_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text!r}")
    return value


def cmd_cycle(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .cycle import run_cycle

    files = _scenario_files(args.files, recurse=False)
    snaps = _load_all(files, err)
    if snaps is None:
        return EXIT_INVALID
    for path, snap in zip(files, snaps):
        try:
            result = run_cycle(snap, time_budget=args.time_budget)
        except Exception as exc:  # an engine bug: say which file, keep the traceback for --log-level DEBUG
            log.debug("engine error on %s", path, exc_info=True)
            print(f"error: {path}: engine error: {type(exc).__name__}: {exc}", file=err)
            return EXIT_MISMATCH
        if args.json:
            obj = {"file": str(path), **result.to_json(timings=args.timings)}
            out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        else:
            _print_text(path, result, out, timings=args.timings)
    return EXIT_OK


# ------------------------------------------------------------------------------------------ check


def cmd_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .check import check_snapshot

    files = _scenario_files(args.paths, recurse=True)
    snaps = _load_all(files, err)
    if snaps is None:
        return EXIT_INVALID
    passed = failed = skipped = 0
    for path, snap in zip(files, snaps):
        if snap.expect is None:
            skipped += 1
            if args.verbose:
                print(f"skip {path} (no expect block)", file=out)
            continue
        try:
            outcome = check_snapshot(snap)
            mismatches = outcome.mismatches
        except Exception as exc:  # an engine bug must not hide the other files' results
            mismatches = [f"engine error: {type(exc).__name__}: {exc}"]
            log.debug("engine error on %s", path, exc_info=True)
            if args.verbose:
                traceback.print_exc(file=err)
        if mismatches:
            failed += 1
            print(f"FAIL {path}", file=out)
            for m in mismatches:
                print(f"  {m}", file=out)
        else:
            passed += 1
            if args.verbose:
                print(f"ok   {path}", file=out)
    summary = f"check: {passed} passed, {failed} failed"
    if skipped:
        summary += f", {skipped} skipped (no expect)"
    print(summary, file=out)
    return EXIT_MISMATCH if failed else EXIT_OK


# ------------------------------------------------------------------------------------------ lazy


def run_lazy(command: str, argv: list[str], err: TextIO) -> int:
    """Hand the remaining arguments to ``scheduler_engine.<command>.main(argv)``."""
    module_name, _ = _LAZY_COMMANDS[command]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        print(f"error: the '{command}' command is not available: module {module_name} is not installed", file=err)
        return EXIT_INVALID
    main = getattr(module, "main", None)
    if not callable(main):
        print(f"error: the '{command}' command is not available: {module_name} has no main(argv)", file=err)
        return EXIT_INVALID
    rc = main(argv)
    return int(rc or 0)


# ------------------------------------------------------------------------------------------ main


def parse_command_line(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
                       out: TextIO | None, err: TextIO | None) -> tuple[argparse.Namespace | int, TextIO, TextIO]:
    """The common prologue of the commands' ``main(argv, out=, err=)``: the streams (default stdout /
    stderr) and the parsed arguments, or argparse's exit code (0 for --help, 2 for a usage error) in
    place of its ``SystemExit``, so that a command called from Python (tests, ``run_lazy``) returns
    its code instead of ending the process."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    try:
        return parser.parse_args(list(sys.argv[1:] if argv is None else argv)), out, err
    except SystemExit as exc:
        return int(exc.code or 0), out, err




def _add_jit_option(p: argparse.ArgumentParser) -> None:
    """``--jit``, read by the process entry before anything imports the kernels (:mod:`.jit_mode`)."""
    p.add_argument("--jit", choices=("auto", "on", "off"), default=None,
                   help="compile the kernels (on), run them interpreted (off; same decisions), or auto "
                        "(default, or KAI_ENGINE_JIT): interpreted when the kernel cache is cold and the "
                        "files are small (a one-off run on a fresh machine skips the ~40 s compile)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler_engine",
        description="Run KAI-style scheduling cycles on scenario files (see shared/scenario-format.md).",
    )
    parser.add_argument("--log-level", default="WARNING", help="stderr log level (default WARNING)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("cycle", help="run one cycle per scenario file and print the decisions")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--json", action="store_true", help="JSON Lines on stdout, one object per file")
    p.add_argument("--timings", action="store_true", help="include per-phase timings")
    p.add_argument("--time-budget", type=_budget_seconds, default=None, metavar="SECONDS",
                   help="stop the evicting actions once the cycle has run this long (what the control plane's "
                        "cycle does; default: no limit, decisions independent of the clock)")
    _add_jit_option(p)
    p = sub.add_parser("check", help="run scenarios and compare with their `expect`; exit 1 on mismatch")
    p.add_argument("paths", nargs="+", metavar="FILE|DIR", help="files, or directories searched recursively")
    _add_jit_option(p)
    p.add_argument("-v", "--verbose", action="store_true", help="also list passing and skipped files")
    for name, (_, help_text) in _LAZY_COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    # simulate / bench parse their own arguments
    for i, a in enumerate(argv):
        if not a.startswith("-"):
            if a in _LAZY_COMMANDS:
                logging.basicConfig(stream=err, level=logging.WARNING)
                return run_lazy(a, argv[i + 1:], err)
            break
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: 0 for --help, 2 for usage errors
        return int(exc.code or 0)
    level = getattr(logging, str(args.log_level).upper(), None)
    if not isinstance(level, int):
        print(f"error: --log-level: unknown level {args.log_level!r}", file=err)
        return EXIT_INVALID
    logging.basicConfig(stream=err, level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "cycle":
            return cmd_cycle(args, out, err)
        return cmd_check(args, out, err)
    except _InputError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_INVALID
