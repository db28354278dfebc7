"""The scaling law across the reward-gap family (Theorem 7): exact argmin = prediction, span,
table and figure structure, and a tampered table fails the check."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

import grpo_theory as gt
from grpo_theory.experiments.runner import run_experiment
from grpo_theory.problems import scaling_family_bandit
from simulations import scaling_family as sf

SMALL = dataclasses.replace(sf.SETTINGS["quick"], deltas=(0.5, 0.1), grid=(2, 8), budgets=(16,),
                            mc_reps=500, train_N=16, train_steps=20, n_seeds=8, n_boot=300,
                            train_deltas=(0.1,))


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("family")
    return out, run_experiment(sf.EXPERIMENT, out, SMALL, seed=0, figures=True, progress=False)


def test_quick_family_exact_argmin_equals_prediction():
    # exact fixed-budget N*MSE = G * exact_mse(G, B=1): its integer argmin is the exact-form G*
    for d in sf.SETTINGS["quick"].deltas:
        row = sf.cell(dict(part="constants", delta=d, grid=sf.SETTINGS["quick"].grid), None)
        assert row["int_argmin"] == row["G_exact"]
        assert row["G_grid"] == row["G_exact"]  # quick members sit on the grid (2, 8, 32)
        assert abs(row["G_continuous"] - 1 - np.sqrt(row["c3"] / row["c1"])) < 1e-12


def test_full_family_spans_2_to_128():
    gs = [gt.optimal_group_size(scaling_family_bandit(d)).exact
          for d in sf.SETTINGS["full"].deltas]
    assert min(gs) == 2 and max(gs) >= 128
    assert gs == sorted(gs)  # G* grows as the reward gap shrinks


def test_family_bad_delta():
    for bad in (0.0, -0.1, 0.6, float("nan")):
        with pytest.raises(ValueError, match="delta"):
            scaling_family_bandit(bad)


def test_small_run_structure_and_pass(small_run):
    out, res = small_run
    assert res.verdict == "PASS"
    d = out / "scaling-family"
    mse = pd.read_csv(d / "mse.csv")
    assert len(mse) == 2 * 2 and set(mse.G) == {2, 8}
    assert np.allclose(mse.groupby(["delta", "N"]).boot_freq.sum(), 1.0)
    tr = pd.read_csv(d / "train.csv")
    assert len(tr) == 2 * SMALL.n_seeds and set(tr.delta) == {0.1}
    assert (d / "predicted_vs_best_G.png").exists()
    pts = sf.summaries(res.tables, n_boot=SMALL.n_boot)["points"]
    assert set(pts.source) == {"exact", "mc", "train_per_step"}
    assert "Spearman" in res.section.markdown


def test_tampered_table_fails(small_run):
    _, res = small_run
    t = {k: v.copy() for k, v in res.tables.items()}
    m = t["mse"]
    # make G = 8 look best for the delta = 0.5 member (prediction 2) in the exact column
    sel = (m.delta == 0.5) & (m.G == 8)
    m.loc[sel, "exact"] = m.exact.min() / 10
    checks = {c.name: c.passed for c in sf.checks(sf.summaries(t, n_boot=SMALL.n_boot))}
    assert checks[next(k for k in checks if k.startswith("exact argmin over the grid"))] is False
    # and a Monte Carlo bootstrap that never picks the prediction fails the CI check
    m2 = res.tables["mse"].copy()
    m2.loc[(m2.delta == 0.5), "boot_freq"] = np.where(m2[m2.delta == 0.5].G == 8, 1.0, 0.0)
    t2 = dict(res.tables, mse=m2)
    checks = {c.name: c.passed for c in sf.checks(sf.summaries(t2, n_boot=SMALL.n_boot))}
    assert checks[next(k for k in checks if k.startswith("Monte Carlo"))] is False


def test_lm_rows_enter_points(small_run):
    _, res = small_run
    t = dict(res.tables, lm=pd.DataFrame([dict(source="lm-x", label="s1", G_pred=4.0, best_G=4,
                                               ci_low=2, ci_high=8)]))
    pts = sf.summaries(t, n_boot=SMALL.n_boot)["points"]
    lm = pts[pts.source.str.startswith("lm")]
    assert len(lm) == 1 and bool(lm.in_ci.iloc[0])


def test_spearman_and_ci_helpers():
    assert sf.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert sf.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert np.isnan(sf.spearman([1, 2], [1, 2]))
    assert sf.ci_from_freq([2, 4, 8], [0.0, 1.0, 0.0]) == (4, 4)
    assert sf.ci_from_freq([2, 4, 8], [0.5, 0.0, 0.5]) == (2, 8)
