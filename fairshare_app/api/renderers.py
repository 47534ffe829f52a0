"""Renderers for CSV usage exports and the sshare text formats.

DRF picks the renderer from ``?format=`` (or the Accept header), so ``?format=csv`` and
``?format=parsable`` work like any other format; error bodies (``{"message", "extra"}``) are
rendered as one readable line in the text formats.
"""
from __future__ import annotations

import csv
import io
from typing import Any

from rest_framework.renderers import BaseRenderer


def _error_text(data: Any) -> str | None:
    if isinstance(data, dict) and "message" in data and "rows" not in data:
        extra = "; ".join(f"{k}: {' '.join(map(str, v))}" for k, v in (data.get("extra") or {}).items())
        return f"error: {data['message']}" + (f" ({extra})" if extra else "") + "\n"
    return None


class UsageCSVRenderer(BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        err = _error_text(data)
        if err is not None:
            return err.encode()
        rows = data.get("rows", []) if isinstance(data, dict) else []
        columns = data.get("columns") or (list(rows[0]) if rows else [])
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
        return buf.getvalue().encode()


class _SshareRenderer(BaseRenderer):
    media_type = "text/plain"
    charset = "utf-8"
    output = "text"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        err = _error_text(data)
        if err is not None:
            return err.encode()
        text = data.get("text", "") if isinstance(data, dict) else ""
        return str(text).encode()


class SshareTextRenderer(_SshareRenderer):
    format = "text"
    output = "text"


class SshareAliasRenderer(_SshareRenderer):
    """``?format=sshare`` (the name used in docs/slurm-fairshare.md 4.6) = text."""

    format = "sshare"
    output = "text"


class SshareParsableRenderer(_SshareRenderer):
    format = "parsable"
    output = "parsable"


class SshareParsable2Renderer(_SshareRenderer):
    format = "parsable2"
    output = "parsable2"

