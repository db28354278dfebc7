"""The baselines study page's pooled-law tables are the committed full run's numbers.

``docs/studies/baselines.md`` quotes ``results-full/baselines/pooled.csv`` (written by
``grpo-theory baselines --full --out results-full``). Rival excluded: a typed or stale number,
which makes one cell differ.
"""

from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]


def _table(text: str, header: str) -> list:
    lines = text[text.index(header):].splitlines()[2:]
    rows = []
    for ln in lines:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip("|").split("|")])
    return rows


def test_pooled_tables_equal_the_full_run():
    text = (ROOT / "docs" / "studies" / "baselines.md").read_text()
    pl = pd.read_csv(ROOT / "results-full" / "baselines" / "pooled.csv")
    sizes = sorted(set(pl.G))
    ratio = _table(text, "| delta | " + " | ".join(f"G = {g}" for g in sizes) + " |")
    js = pl[pl.estimator == "jspo"].set_index(["delta", "G"]).ratio_loo
    assert len(ratio) == pl.delta.nunique()
    for row in ratio:
        d = float(row[0])
        assert row[1:] == [f"{js[(d, g)]:.3f}" for g in sizes], d
    best = _table(text, "| delta | leave-one-out G* (law) |")
    assert len(best) == pl.delta.nunique()
    for row in best:
        d = float(row[0])
        sub = pl[pl.delta == d]
        low = sub.loc[sub.groupby("estimator").exact_mse.idxmin()].set_index("estimator")
        assert row[1] == f"{sub.g_star_loo.iloc[0]:.2f}"
        assert [int(row[2]), int(row[3])] == [low.G["grpo"], low.G["jspo"]]
        assert row[4] == f"{low.exact_mse['jspo'] / low.exact_mse['grpo']:.3f}"
    assert np.isfinite(pl.exact_mse).all()  # the table the page quotes is complete
