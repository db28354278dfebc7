"""Claims 4 and 5: each driver's quick setting, run into a tmp dir, must PASS; and each
driver's check must fail when the theory it tests is replaced by a wrong one."""

import pandas as pd
import pytest

from simulations import asymptotic_distribution as asym
from simulations import finite_sample_bounds as fsb


@pytest.fixture(scope="module")
def bounds_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("bounds") / fsb.NAME
    fsb.run(out, quick=True, seed=0)
    return out


@pytest.fixture(scope="module")
def asym_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("asym") / asym.NAME
    asym.run(out, quick=True, seed=0)
    return out


def test_finite_sample_bounds_quick_passes(bounds_dir):
    df = pd.read_csv(bounds_dir / "table.csv")
    assert set(df.schedule) == {"constant", "inverse"}
    core = df[df.estimator.isin(["oracle", "grpo"])]
    assert (core.diverged_seeds == 0).all()
    assert (core.ci_high <= core.bound * (1 + 1e-9)).all()
    rep = fsb.report(bounds_dir)
    assert rep["passed"], rep["markdown"]
    fsb.plot(bounds_dir)
    assert (bounds_dir / "gap_vs_bounds.png").exists()
    # resumable: a rerun finds every cell done and reproduces the table
    fsb.run(bounds_dir, quick=True, seed=0)
    pd.testing.assert_frame_equal(pd.read_csv(bounds_dir / "table.csv"), df)


def test_finite_sample_bounds_check_can_fail(bounds_dir):
    df = pd.read_csv(bounds_dir / "table.csv")
    assert fsb.check(df)
    too_small = df.assign(bound=df.bound * 0.05)  # a bound 20x tighter is violated
    assert not fsb.check(too_small)
    diverged = df.copy()
    diverged.loc[diverged.estimator == "oracle", "diverged_seeds"] = 1
    assert not fsb.check(diverged)


def test_asymptotic_distribution_quick_passes(asym_dir):
    rep = asym.report(asym_dir)
    assert rep["passed"], rep["markdown"]
    stats = pd.read_csv(asym_dir / "table.csv")
    last = stats.loc[stats.groupby("run").n.idxmax()]
    assert (last.z.abs() <= asym.Z_TOL).all() and (last.ks_p >= asym.KS_ACCEPT).all()
    assert (last.z_printed.abs() > asym.Z_TOL).all()
    scalar = last[last.run == "scalar_oracle"].iloc[0]
    assert scalar.pred_mean == pytest.approx(1.125) and scalar.pred_printed == pytest.approx(0.5)
    asym.plot(asym_dir)
    assert (asym_dir / "qq_plot.png").exists()


def test_asymptotic_check_can_fail(asym_dir):
    sims = pd.read_csv(asym_dir / "samples.csv")
    pred = pd.read_csv(asym_dir / "predictions.csv")
    sweep = pd.read_csv(asym_dir / "group_sweep.csv")
    slopes = asym.slopes(sweep)
    stats, _ = asym.analyse(sims, pred)
    assert asym.check(stats, slopes)["passed"]
    # take the paper's printed weights (no beta^2) as the prediction: the check must fail
    printed = pred.assign(weight=pred.weight_printed, weight_printed=pred.weight)
    wrong, _ = asym.analyse(sims, printed)
    res = asym.check(wrong, slopes)
    assert not res["passed"] and not res["corrected_mean"] and not res["corrected_ks"]
    # a G^-1 law instead of G^-2 must fail the slope check
    fake = sweep.copy()
    m = fake.estimator == "grpo"
    oracle = sweep[sweep.estimator == "oracle"].set_index(["G", "k"]).weight
    fake.loc[m, "weight"] = [oracle[(g, k)] + 0.1 / g for g, k in zip(fake[m].G, fake[m].k)]
    assert not asym.check(stats, asym.slopes(fake))["slope"]
