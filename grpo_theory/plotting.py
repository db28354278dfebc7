"""Figure helpers: every figure is drawn from a saved table and written as PNG and PDF.

The studies draw off screen (matplotlib's Agg backend), unless the user chose a backend
(``MPLBACKEND``) or runs in a Jupyter kernel, whose inline backend is kept so that ``plt.show()``
displays in a notebook.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import matplotlib

if not os.environ.get("MPLBACKEND") and "ipykernel" not in sys.modules:
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402


def save_figure(fig, path_stem) -> list[Path]:
    """Save ``fig`` as ``<stem>.png`` and ``<stem>.pdf``; close it; return the paths."""
    stem = Path(path_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for ext in ("png", "pdf"):
        p = stem.with_suffix(f".{ext}")
        fig.savefig(p, dpi=130, bbox_inches="tight")
        out.append(p)
    plt.close(fig)
    return out


def integer_ticks(axis, values) -> list[int]:
    """Label ``axis`` (``ax.xaxis`` or ``ax.yaxis``) at exactly the integers ``values`` (group
    sizes on a log axis: 2, 8, 32 rather than 10^0.5), with no minor ticks.

    Args:
        axis: a matplotlib Axis.
        values: the tick positions (rounded to int, deduplicated, sorted).
    Returns:
        The ticks used.
    """
    ticks = sorted({int(round(float(v))) for v in values})
    axis.set_minor_locator(NullLocator())
    axis.set_ticks(ticks, [str(t) for t in ticks])
    return ticks
