"""Object ids in URL paths."""
from __future__ import annotations

from typing import Any

from django.http import Http404

#: The largest id a path may name (a PostgreSQL bigint).
MAX_PK = 2**63 - 1


def path_id(value: Any) -> int:
    """A path segment as a positive id, or 404.

    Only ASCII digits: ``str.isdigit`` and ``int`` also take other scripts' digits (``"٣"`` is 3),
    so ``/workloads/٣/`` would otherwise alias ``/workloads/3/``; also no sign, spaces, ``_``
    separators, or a number past a bigint (an overflow 500 on the database)."""
    text = str(value)
    if not (text.isascii() and text.isdigit()) or len(text) > 19 or not 0 < int(text) <= MAX_PK:
        raise Http404
    return int(text)
