"""Server-side SVG charts for the admin page (matplotlib's object API: no pyplot global state,
safe in a threaded web server)."""
from __future__ import annotations

import io
from datetime import datetime
from typing import Sequence

from matplotlib.figure import Figure


def line_chart_svg(title: str, ylabel: str, series: dict[str, tuple[Sequence[datetime], Sequence[float | None]]],
                   *, width: float = 9.0, height: float = 3.0) -> str:
    """One SVG line chart, one line per named series (None values are gaps)."""
    fig = Figure(figsize=(width, height), dpi=96)
    ax = fig.add_subplot(1, 1, 1)
    for name, (xs, ys) in sorted(series.items()):
        ax.plot(list(xs), [float("nan") if y is None else y for y in ys], label=name, linewidth=1.4)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize=8, loc="upper left", ncols=min(4, len(series)))
    else:
        ax.text(0.5, 0.5, "no data in this range", ha="center", va="center", transform=ax.transAxes)
    fig.autofmt_xdate()
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.find("<svg"):]
