"""The ``baselines`` study on a small sweep: it runs through the experiment runner, PASSes,
reproduces the toy's numbers from its tables, and its checks FAIL when fed the rivals."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from grpo_theory.experiments.runner import run_experiment


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    from grpo_theory.studies import baselines as m

    small = dataclasses.replace(m.SETTINGS["quick"], problems=(None, (0.5, 0.0)),
                                group_sizes=(4,), n_reps=8000, kept_sizes=(2, 4, 8),
                                train_steps=5, train_seeds=4,
                                # one estimator a route: batch counts, classes, a state
                                estimators=("grpo", "jspo", "norm_weighted", "spo"),
                                pooled_deltas=(0.05,), pooled_budget=16,
                                pooled_sizes=(2, 4, 8), pooled_reps=4000, spo_seeds=8,
                                history_problems=(None, (0.5, 1.0)), history_reps=8000,
                                path_histories=4, path_every=5,
                                lm_sizes=())  # the transformer's cell: in test_lm_drivers.py
    out = tmp_path_factory.mktemp("baselines")
    res = run_experiment(m.EXPERIMENT, out, small, seed=0, figures=True, progress=False,
                         verbose=False)
    assert list((out / m.NAME).glob("*.png"))
    return m, res


def test_quick_sweep_passes_and_reproduces_the_toy(study):
    m, res = study
    assert res.verdict == "PASS", [(c.name, c.detail) for c in m.checks(m.summary(res.tables))]
    df = res.tables["table"]
    row = df[(df.problem == "toy") & (df.design == "each") & (df.estimator == "jspo")].iloc[0]
    assert round(row.ratio_loo, 3) == 0.593 and row.relative_bias < 1e-12
    half = df[(df.problem == "m0.5_s0") & (df.design == "each") & (df.estimator == "jspo")]
    assert round(half.ratio_loo.iloc[0], 3) == 0.231
    kp = res.tables["kept"]
    nw = kp[(kp.estimator == "norm_weighted") & (kp.p == 0.1)].sort_values("G")
    assert [round(v, 2) for v in nw.kept] == [0.11, 0.29, 0.54]
    for col in ("seed", "version", "config"):
        assert col in df.columns
    tr = res.tables["training"]
    assert set(tr.estimator) == {"grpo", "jspo", "norm_weighted", "spo"}
    assert np.isfinite(tr.final).all()
    assert (tr[tr.estimator == "grpo"].diff_loo == 0).all()


def _fails(m, tables, name):
    ch = {c.name: c for c in m.checks(m.summary(tables))}
    return [c for n, c in ch.items() if name in n][0].passed is False


def test_checks_fail_on_the_rivals(study):
    m, res = study
    t = res.tables
    # "unbiased" fed the self-inclusive weighted baseline's bias
    df = t["table"].copy()
    nw = df[df.estimator == "norm_weighted"].relative_bias.values
    df.loc[df.estimator == "jspo", "relative_bias"] = nw
    assert _fails(m, dict(t, table=df), "are unbiased")
    # JSPO no better than leave-one-out
    df = t["table"].copy()
    df.loc[df.estimator == "jspo", "ratio_loo"] = 1.0
    assert _fails(m, dict(t, table=df), "JSPO's MSE below")
    # Monte Carlo that matches the rival (leave-one-out's MSE) rather than the estimator's
    df = t["table"].copy()
    ind = df.design == "independent"
    loo = df[ind & (df.estimator == "grpo")].set_index(["problem", "G"]).exact_mse
    key = list(zip(df.problem, df.G))
    df.loc[ind, "mc"] = [loo[k] for k, i in zip(key, ind) if i]
    df.loc[ind, "z"] = (df.mc - df.exact_mse) / df.mc_se
    df.loc[ind, "rival_z"] = [(loo[k] - v) / se for k, v, se, i in
                              zip(key, df.mc, df.mc_se, ind) if i]
    assert _fails(m, dict(t, table=df), "Monte Carlo within")
    # the pooled law: Monte Carlo that matches leave-one-out's law instead of JSPO's
    pl = t["pooled"].copy()
    has = pl.mc.notna()
    for i in pl.index[has]:
        r = pl.loc[i]
        loo_mse = t["pooled"][(t["pooled"].estimator == "grpo") & (t["pooled"].G == r.G)
                              & (t["pooled"].delta == r.delta)].exact_mse.iloc[0]
        pl.loc[i, "z"] = (loo_mse - r.exact_mse) / r.mc_se
        pl.loc[i, "rival_z"] = 0.0
    assert _fails(m, dict(t, pooled=pl), "the pooled law")
    # a pooled route off from the counts route
    pr = t["pooled_route"].copy()
    pr.loc[0, "rel_err"] = 1e-6
    assert _fails(m, dict(t, pooled_route=pr), "pooled route = counts route")
    # G* not moved (JSPO's best G made leave-one-out's)
    pl = t["pooled"].copy()
    pl.loc[pl.estimator == "jspo", "exact_mse"] = pl[pl.estimator == "grpo"].exact_mse.values
    assert _fails(m, dict(t, pooled=pl), "pooling moves G*")
    # SPO's closed form off from batch_moments at the tracker's state
    sp = t["spo_path"].copy()
    sp.loc[sp.index[-1], "route_err"] = 1e-6
    assert _fails(m, dict(t, spo_path=sp), "SPO given its tracker")
    sp = t["spo_path"].copy()
    sp["rival_err"] = 0.0  # the tracker makes no difference: the rival passes, so must the check fail
    assert _fails(m, dict(t, spo_path=sp), "SPO given its tracker")
    # a count route off from brute force
    br = t["brute"].copy()
    br.loc[0, "rel_err"] = 1e-6
    assert _fails(m, dict(t, brute=br), "brute-force")
    # a missing number makes the check INCOMPLETE, not PASS
    df = t["table"].copy()
    df.loc[df.estimator == "jspo", "ratio_loo"] = np.nan
    ch = [c for c in m.checks(m.summary(dict(t, table=df))) if "JSPO's MSE" in c.name][0]
    assert ch.passed is None
    assert isinstance(t["table"], pd.DataFrame)


def test_history_table_and_its_checks_fail_on_the_rivals(study):
    """EBPO, DBB, KAE and BASIS: the exact checks fail when fed the state ignored, Monte Carlo
    matching leave-one-out's MSE, or a rival's bias; the toy's numbers from the table."""
    m, res = study
    t = res.tables
    hs, hb = t["history"], t["history_brute"]
    assert set(hs.estimator) == set(m.HISTORY + m.HISTORY_RIVALS)
    assert hs[hs.problem == "m0.5_s1"].mc.isna().all()  # Monte Carlo on the first member only
    toy = hs[hs.problem == "toy"].set_index("estimator")
    assert toy.ratio_loo["basis"] < toy.ratio_loo["dbb"] < toy.ratio_loo["kae"] < 1
    assert (toy.state_err[["ebpo", "dbb", "kae"]] > 1e-3).all()
    # a count route off from brute force; the state making no difference
    for col, val in (("rel_err", 1e-6), ("rival_rel_err", 0.0)):
        br = hb.copy()
        br.loc[0, col] = val
        assert _fails(m, dict(t, history_brute=br), "at a sampled state")
    # Monte Carlo that matches leave-one-out's MSE instead of the estimator's
    h = hs.copy()
    has = h.mc.notna()
    loo = h.exact_mse / h.ratio_loo
    h.loc[has, "z"] = (loo - h.exact_mse)[has] / h.mc_se[has]
    h.loc[has, "rival_z"] = 0.0
    assert _fails(m, dict(t, history=h), "history baselines: Monte Carlo")
    # "unbiased" fed the self-inclusive rival's bias, and the rival fed zero bias
    h = hs.copy()
    h.loc[h.estimator == "basis", "relative_bias"] = h[
        h.estimator == "basis_self_inclusive"].relative_bias.values
    assert _fails(m, dict(t, history=h), "BASIS are unbiased")
    h = hs.copy()
    h.loc[h.estimator == "ebpo_self_inclusive", "relative_bias"] = 0.0
    assert _fails(m, dict(t, history=h), "BASIS are unbiased")


def test_history_path_is_unbiased_given_the_state_and_its_check_fails_on_the_rivals(study):
    """Along the drifting path: EBPO, DBB and KAE unbiased given each sampled state at every
    step; the check fails when an estimator's bias is the rival's or the rival's is zero."""
    from grpo_theory.studies.baselines.history_path import PATH_RIVAL, path_checks

    m, res = study
    tp = res.tables["history_path"]
    assert set(tp.estimator) == {"ebpo", "dbb", "kae", PATH_RIVAL}
    assert sorted(tp.step.unique()) == [0, 5] and (tp.histories == 4).all()
    (ok,) = path_checks(tp)
    assert ok.passed and ok.kind == "exact"
    assert (tp[tp.estimator != PATH_RIVAL].max_relative_bias <= 1e-12).all()
    assert (tp[tp.estimator == PATH_RIVAL].min_relative_bias > 1e-4).all()
    assert np.isfinite(tp.ratio).all() and (tp.ratio_lo <= tp.ratio + 1e-12).all()
    biased = tp.copy()  # DBB given the rival's bias
    riv = tp[tp.estimator == PATH_RIVAL].set_index("step").max_relative_bias
    sel = biased.estimator == "dbb"
    biased.loc[sel, "max_relative_bias"] = riv.loc[biased[sel].step].to_numpy()
    assert path_checks(biased)[0].passed is False
    flat = tp.copy()  # a rival that is unbiased too: the check cannot tell, so it fails
    flat.loc[flat.estimator == PATH_RIVAL, "min_relative_bias"] = 0.0
    assert path_checks(flat)[0].passed is False
    assert path_checks(None)[0].passed is None  # missing rows: INCOMPLETE, never PASS


def test_basis_under_pooling_and_its_check_fails_on_the_rival(study):
    """BASIS at a fixed budget: its best G is 1 (one response a prompt) on the member, Monte
    Carlo at it agrees with the pooled route; fed Monte Carlo at the rival's MSE (no baseline
    at the same B and G), the check fails; without rows it is INCOMPLETE."""
    from grpo_theory.studies.baselines.pooled_basis import best_sizes, pooled_basis_checks

    m, res = study
    pb = res.tables["pooled_basis"]
    assert set(pb.estimator) == {"basis", "grpo", "vanilla"} and 1 in set(pb.G)
    assert (best_sizes(pb)["best G, BASIS"] == 1).all()
    (ok,) = pooled_basis_checks(pb)
    assert ok.passed and ok.kind == "statistical"
    bad = pb.copy()
    at = bad.mc.notna()
    van = bad[bad.estimator == "vanilla"].set_index(["delta", "G"]).exact_mse
    bad.loc[at, "mc"] = [van[(d, g)] for d, g in zip(bad[at].delta, bad[at].G)]
    bad.loc[at, "z"] = (bad.loc[at, "mc"] - bad.loc[at, "exact_mse"]) / bad.loc[at, "mc_se"]
    bad.loc[at, "rival_z"] = 0.0
    assert pooled_basis_checks(bad)[0].passed is False
    assert pooled_basis_checks(None)[0].passed is None
