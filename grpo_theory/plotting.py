"""Figure helpers: every figure is drawn from a saved table and written as PNG and PDF."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plt", "save_figure"]


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
