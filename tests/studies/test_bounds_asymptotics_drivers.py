"""finite-sample-bounds and asymptotic-distribution: each driver, run on a small setting into a
tmp dir, must PASS; and each driver's checks must fail when the theory it tests is replaced by a
wrong one."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from grpo_theory.experiments.runner import Tables, run_experiment
from grpo_theory.studies import asymptotic_distribution as asym
from grpo_theory.studies import finite_sample_bounds as fsb
from grpo_theory.studies.finite_sample_bounds import rates

# fewer seeds and steps than "quick" (compilation dominates either way); still PASS, and enough
# of both for the rate (n = 32..512) and the plateau (n >= 128) checks to decide
FSB_SMALL = dataclasses.replace(fsb.SETTINGS["quick"], n_seeds=400, n_steps=512)
ASYM_SMALL = dataclasses.replace(asym.SETTINGS["quick"], n_seeds=400, n_steps=256)


def _by_key(section):
    return {c.name.split(":")[0]: c for c in section.checks}


@pytest.fixture(scope="module")
def bounds_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bounds")
    return out, run_experiment(fsb.EXPERIMENT, out, FSB_SMALL, seed=0, progress=False,
                               verbose=False)


@pytest.fixture(scope="module")
def asym_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("asym")
    return out, run_experiment(asym.EXPERIMENT, out, ASYM_SMALL, seed=0, progress=False,
                               verbose=False)


def test_finite_sample_bounds_small_setting_passes(bounds_run):
    out, res = bounds_run
    df = pd.read_csv(out / fsb.NAME / "table.csv")
    assert {"seed", "version", "config", "cell_hash"} <= set(df.columns)
    assert set(df.schedule) == {"constant", "inverse"}
    assert set(df.estimator) == set(fsb.ESTIMATORS)
    core = df[df.estimator.isin(["oracle", "grpo"])]
    assert (core.diverged_seeds == 0).all() and np.isfinite(core.M).all()
    assert (core.ci_high <= core.bound * (1 + 1e-9)).all()
    assert res.verdict == "PASS", res.section.markdown + res.section.checks_markdown()
    assert len(res.section.checks) >= 5  # never-diverge + one per core run at least
    assert (out / fsb.NAME / "gap_vs_bounds.png").exists()
    # resumable: a rerun computes nothing and reproduces the table
    again = run_experiment(fsb.EXPERIMENT, out, FSB_SMALL, seed=0, figures=False,
                           progress=False, verbose=False)
    assert again.n_computed == 0 and again.verdict == "PASS"
    pd.testing.assert_frame_equal(pd.read_csv(out / fsb.NAME / "table.csv"), df)


def test_finite_sample_bounds_check_can_fail(bounds_run):
    _, res = bounds_run
    df = res.tables["table"]
    assert all(c.passed for c in fsb.checks(df))
    too_small = df.assign(bound=df.bound * 0.05)  # a bound 20x tighter is violated
    assert fsb.report(Tables({"table": too_small}), FSB_SMALL).verdict == "FAIL"
    diverged = df.copy()
    diverged.loc[diverged.estimator == "oracle", "diverged_seeds"] = 1
    sec = fsb.report(Tables({"table": diverged}), FSB_SMALL)
    assert sec.verdict == "FAIL" and sec.checks[0].passed is False
    # a missing bound is never a PASS
    missing = df.copy()
    missing.loc[missing.estimator == "grpo", "bound"] = np.nan
    assert fsb.report(Tables({"table": missing}), FSB_SMALL).verdict == "INCOMPLETE"


def _rate_checks(df):
    return {c.name.split(":")[0] + ":" + c.name.split(":")[1].split()[0]: c
            for c in rates.rate_checks(df)}


def test_finite_sample_bounds_rate_and_plateau_checks_refuse_their_rivals(bounds_run):
    _, res = bounds_run
    df = res.tables["table"]
    got = _rate_checks(df)
    assert {"inverse/oracle:slope", "inverse/grpo:slope", "constant/oracle:plateau",
            "constant/grpo:plateau"} <= set(got)
    assert all(c.passed and c.kind == "statistical" for c in got.values())
    # each states its rival's distance (slope -1/2; Lemma 6's limit), beyond its bound here
    assert all(c.has_power for c in got.values()), [(k, c.rival_se) for k, c in got.items()]
    # the rival rate 1/sqrt(n): seeds whose gaps decay as n^(-1/2) give a failing slope
    rng = np.random.default_rng(0)
    steps = np.array([0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512])
    for rate, ok in ((-0.5, False), (0.0, False), (-1.0, True)):
        gaps = (np.maximum(steps, 1) ** rate) * rng.exponential(1.0, (400, steps.size))
        slope = rates.batch_slope(gaps, steps)
        inv = df.schedule == "inverse"
        rival = df.assign(slope=np.where(inv, slope[0], df.slope),
                          slope_low=np.where(inv, slope[1], df.slope_low),
                          slope_high=np.where(inv, slope[2], df.slope_high))
        assert all(c.passed is ok for k, c in _rate_checks(rival).items() if "slope" in k), rate
    # the rival plateau: Lemma 6's constant-step limit L beta^2 M / (4 mu beta - 2 L mu beta^2)
    const = df.schedule == "constant"
    lemma6 = df.L * df.beta**2 * df.M / (4 * df.mu * df.beta - 2 * df.L * df.mu * df.beta**2)
    assert (lemma6[const] > 1.25 * df.stationary_gap[const]).all()
    rival = df.assign(stationary_gap=np.where(const, lemma6, df.stationary_gap))
    assert all(c.passed is False for k, c in _rate_checks(rival).items() if "plateau" in k)
    # and a gap that keeps falling (the beta/i run's last value as the plateau)
    inv = df[(df.schedule == "inverse") & (df.estimator == "oracle")]
    falling = df.assign(plateau=np.where(const, inv.sort_values("n").mean_gap.iloc[-1],
                                         df.plateau))
    assert all(c.passed is False for k, c in _rate_checks(falling).items() if "plateau" in k)
    # a missing number is never a PASS
    assert all(c.passed is None for c in rates.rate_checks(df.assign(stationary_gap=np.nan))
               if "plateau" in c.name)


def test_stationary_gap_solves_the_discrete_lyapunov_equation():
    from grpo_theory import problems
    from grpo_theory.optim import theory as opt
    p = problems.default_gaussian_bandit()
    a, gam, beta = (np.asarray(p.curvature_matrix()),
                    np.asarray(opt.limiting_covariance(p, "grpo", 4, 2)), 0.25)
    # a separately coded route: iterate the covariance recursion to its fixed point
    sig = np.zeros_like(a)
    m = np.eye(2) - beta * a
    for _ in range(2000):
        sig = m @ sig @ m.T + beta**2 * gam
    assert rates.stationary_gap(p, "grpo", 4, 2, beta) == pytest.approx(
        0.5 * np.trace(a @ sig), rel=1e-10)


def test_asymptotic_distribution_small_setting_passes(asym_run):
    out, res = asym_run
    assert res.verdict == "PASS", res.section.markdown + res.section.checks_markdown()
    stats, _ = asym.analyse(res.tables["samples"], res.tables["predictions"])
    last = stats.loc[stats.groupby("run").n.idxmax()]
    assert len(last) == len(asym.RUNS)
    assert (last.z.abs() <= asym.Z_TOL).all() and (last.ks_p >= asym.KS_ACCEPT).all()
    assert (last.z_printed.abs() > asym.Z_TOL).all()
    # the statistical checks' rival (the printed mixture) lies beyond their bounds
    stat = [c for c in res.section.checks if c.kind == "statistical"]
    assert len(stat) == 3 and all(c.has_power for c in stat), [c.rival_se for c in stat]
    scalar = last[last.run == "scalar_oracle"].iloc[0]
    assert scalar.pred_mean == pytest.approx(1.125) and scalar.pred_printed == pytest.approx(0.5)
    assert (out / asym.NAME / "qq_plot.png").exists()
    assert (out / asym.NAME / "mean_and_group_scaling.png").exists()
    samples = pd.read_csv(out / asym.NAME / "samples.csv")
    assert len(samples) == len(asym.RUNS) * ASYM_SMALL.n_seeds * 3


def test_asymptotic_check_can_fail(asym_run):
    _, res = asym_run
    sims, pred, sweep = (res.tables[k] for k in ("samples", "predictions", "group_sweep"))
    slopes = asym.slopes(sweep)
    stats, _ = asym.analyse(sims, pred)
    assert all(c.passed for c in asym.checks(stats, slopes))
    # take the paper's printed weights (no beta^2) as the prediction: the check must fail
    printed = pred.assign(weight=pred.weight_printed, weight_printed=pred.weight)
    sec = asym.report(Tables({"samples": sims, "predictions": printed, "group_sweep": sweep}),
                      ASYM_SMALL)
    by = _by_key(sec)
    assert sec.verdict == "FAIL"
    assert by["corrected mean"].passed is False and by["corrected KS"].passed is False
    assert by["printed rejected"].passed is False
    # a G^-1 law instead of G^-2 must fail the slope check
    fake = sweep.copy()
    m = fake.estimator == "grpo"
    oracle = sweep[sweep.estimator == "oracle"].set_index(["G", "k"]).weight
    fake.loc[m, "weight"] = [oracle[(g, k)] + 0.1 / g for g, k in zip(fake[m].G, fake[m].k)]
    by = {c.name.split(":")[0]: c for c in asym.checks(stats, asym.slopes(fake))}
    assert by["slope"].passed is False and by["corrected mean"].passed is True
    # a run left out is not a PASS
    short = asym.checks(stats[stats.run != "grpo_G8"], slopes)
    assert {c.name.split(":")[0]: c for c in short}["every run"].passed is False
