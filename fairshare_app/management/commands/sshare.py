"""``manage.py sshare``: Slurm-compatible fair-share report of the queue tree.

Flags follow sshare(1): ``-l/--long``, ``-a/--all`` (accepted; the operator sees everything),
``-A/--accounts``, ``-u/--users``, ``-U/--Users`` (users only), ``-o/--format`` (columns),
``-p/--parsable`` (``|`` with a trailing one), ``-P/--parsable2``, ``--json``; plus
``--algorithm fair_tree|classic`` and ``--kai`` (KAI columns after the Slurm ones).
"""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from fairshare_app import selectors, sshare
from queues_app.errors import ApplicationError


def _names(value: str | None) -> list[str]:
    return [x.strip() for x in (value or "").split(",") if x.strip()]


class Command(BaseCommand):
    help = "Slurm-style fair-share report (Account, User, RawShares, NormShares, RawUsage, EffectvUsage, FairShare)."

    def add_arguments(self, parser):
        parser.add_argument("-l", "--long", action="store_true", help="Add NormUsage (and LevelFS for Fair Tree).")
        parser.add_argument("-a", "--all", action="store_true", help="All users (the default for operators).")
        parser.add_argument("-A", "--accounts", help="Comma-separated accounts (queues).")
        parser.add_argument("-u", "--users", help="Comma-separated users.")
        parser.add_argument("-U", "--Users", dest="users_only", action="store_true", help="User rows only.")
        parser.add_argument("-o", "--format", dest="columns", help=f"Columns: {','.join(sshare.ALL_COLUMNS)}.")
        out = parser.add_mutually_exclusive_group()
        out.add_argument("-p", "--parsable", action="store_true", help="'|'-delimited with a trailing '|'.")
        out.add_argument("-P", "--parsable2", action="store_true", help="'|'-delimited, no trailing '|'.")
        out.add_argument("--json", action="store_true", help="JSON (Slurm data_parser field names).")
        parser.add_argument("--algorithm", choices=sshare.ALGORITHMS, help="Default: the fair-share settings.")
        parser.add_argument("--kai", action="store_true", help="Add GPUDeserved, GPUFairShare, GPUAllocated.")

    def handle(self, *args, **opts):
        columns = _names(opts["columns"])
        bad = [c for c in columns if c not in sshare.ALL_COLUMNS]
        if bad:
            raise CommandError(f"--format: unknown column(s) {', '.join(bad)}; use {', '.join(sshare.ALL_COLUMNS)}")
        try:
            rows, meta = selectors.sshare_rows(tenant=None, algorithm=opts["algorithm"],
                                               accounts=_names(opts["accounts"]), users=_names(opts["users"]),
                                               users_only=opts["users_only"])
        except ApplicationError as exc:
            raise CommandError(str(exc)) from exc
        algorithm = meta["algorithm"]
        columns = columns or list(sshare.default_columns(long=opts["long"], algorithm=algorithm, kai=opts["kai"]))
        output = "json" if opts["json"] else "parsable" if opts["parsable"] else "parsable2" if opts["parsable2"] \
            else "text"
        self.stdout.write(sshare.render(rows, columns=columns, algorithm=algorithm, output=output, meta=meta),
                          ending="")
