"""Loading a driver's saved table, also after an interrupted run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def load_table(out_dir, **read_kw) -> pd.DataFrame:
    """``table.csv`` if the run finished; otherwise the cells written so far (newest setting).

    ``run`` saves ``table.csv`` only at the end, so a report drawn after an interrupted sweep
    falls back to the atomically written cells in ``cells-<setting>/``.
    """
    out_dir = Path(out_dir)
    path = out_dir / "table.csv"
    if path.exists():
        return pd.read_csv(path, **read_kw)
    dirs = sorted(out_dir.glob("cells*"), key=lambda p: p.stat().st_mtime)
    files = sorted(dirs[-1].glob("*.csv")) if dirs else []
    if not files:
        raise FileNotFoundError(f"no table.csv and no finished cells under {out_dir}")
    df = pd.concat([pd.read_csv(f, **read_kw) for f in files], ignore_index=True)
    df.attrs["partial"] = True
    return df


PARTIAL_NOTE = ("**Partial run**: the sweep was interrupted (no table.csv yet); the numbers below "
                "come from the cells finished so far and the verdict is FAIL until it completes "
                "(rerun the same command to resume).")


def finish(df: pd.DataFrame, result: dict) -> dict:
    """Mark a report drawn from a partial table: note at the top, not passed."""
    if df.attrs.get("partial"):
        result = dict(result, passed=False,
                      markdown=PARTIAL_NOTE + "\n\n" + result["markdown"])
    return result
