"""lm-mse and lm-groupsize on the runner, on small settings, asserting what theory predicts.

Both drivers run once per test session into one output folder, so they share one checkpoint
cache (``<out>/.cache/lm``, the quick warm-up) and every test reads the same tables. The
suite's ``--dist loadscope`` keeps this module on one pytest-xdist worker; under another
distribution the workers share that folder through a file lock: the first computes, the others
read the finished cells.
"""

import dataclasses
import fcntl
import os

import numpy as np
import pandas as pd
import pytest

from grpo_theory.experiments.runner import run_experiment
from grpo_theory.experiments.store import cell_hash
from grpo_theory.lm.warmup import cached_policies
from grpo_theory.studies import lm_groupsize, lm_mse

#: One policy per format (the checks hold cell by cell), two group sizes, fewer questions and
#: replicates. The cost is mostly XLA compilation, one per array shape, so the sizes are chosen
#: to share shapes: 24 x 16 = 384 sampled responses per replicate, per reference sample
#: (n_ref = 16), per accuracy pass (96 x 4) and per G* estimate (24 x 16); 24 questions in both
#: drivers' exact passes; the knob sweep repeats the main sweep's shapes.
MSE_SMALL = dataclasses.replace(lm_mse.SETTINGS["quick"],
                                pairs=(("instruct", "answer"), ("icl", "trace")),
                                n_questions=24, group_sizes=(4, 16), n_reps=6, n_ref=16,
                                acc_questions=96)
#: every sweep of the quick setting, with fewer group sizes, steps and questions
GS_SMALL = dataclasses.replace(
    lm_groupsize.SETTINGS["quick"], group_sizes=(4, 32), seeds=2, steps=6, checkpoints=(3, 6),
    n_eval=24,
    gstar_samples=16, knob=lm_groupsize.Sweep(hard_fractions=(0.5,), budgets=(128,),
                                              group_sizes=(4, 32), seeds=1),
    practical=lm_groupsize.Sweep(budgets=(128,), group_sizes=(4,), seeds=1))


def _runs(root, figures=True):
    return {mod.NAME: run_experiment(mod.EXPERIMENT, root, s, seed=0, figures=figures,
                                     progress=False, verbose=False)
            for mod, s in ((lm_mse, MSE_SMALL), (lm_groupsize, GS_SMALL))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``(root, {name: RunResult})`` of both drivers, computed once per session."""
    if os.environ.get("PYTEST_XDIST_WORKER"):  # one folder for all workers of this session
        root = tmp_path_factory.getbasetemp().parent / "lm-drivers"
        root.mkdir(exist_ok=True)
    else:
        root = tmp_path_factory.mktemp("lm-drivers")
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return root, _runs(root)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def test_lm_mse_matches_theory(runs):
    root, res = runs
    r = res[lm_mse.NAME]
    df, s = r.tables["table"], MSE_SMALL
    assert set(zip(df.policy, df.fmt)) == set(s.pairs) and set(df.fmt) == set(lm_mse.FORMATS)
    for col in ("seed", "config", "cell_hash", "cell_seconds"):
        assert col in df.columns
    ck = lm_mse.checks(df)
    # measured vanilla - oracle gap equals the predicted V^2 (M - (2 - V)||s*||^2) / (B^2 G)
    assert (ck.z_vanilla_minus_oracle <= lm_mse.Z_TOL).all(), ck
    # answer-only: vanilla and oracle MSEs equal their exact-form predictions; MSE ~ 1/G
    a = ck[ck.fmt == "answer"]
    assert len(a) and ((a.z_estimators <= lm_mse.Z_TOL)
                       | (a.rel_err_estimators <= lm_mse.REL_TOL)).all(), ck
    assert (ck.z_one_over_G <= lm_mse.Z_TOL).all(), ck
    # grpo / oracle moves toward 1 as G grows
    assert (abs(ck.ratio_last - 1) < abs(ck.ratio_first - 1)).all(), ck
    # the theory checks pass; the accuracy order is a property of the trained policies and is
    # gated by the full setting only (the quick model is tiny)
    assert r.verdict == "PASS", r.section.checks_markdown()
    assert "Policy accuracies" in r.section.markdown and "| FAIL |" not in r.section.markdown
    order = all(lm_mse.accuracy_order(r.tables["accuracy"]).values())
    gated = lm_mse.report(r.tables, dataclasses.replace(s, gate_accuracy_order=True))
    assert gated.verdict == ("PASS" if order else "FAIL")
    assert (root / lm_mse.NAME / "lm_mse.png").exists()


def test_lm_policy_accuracies(runs):
    acc = runs[1][lm_mse.NAME].tables["accuracy"]
    assert list(acc.policy) == ["base", "instruct", "icl", "instruct+shots"]
    assert list(acc.shots) == [False, False, True, True]
    assert (acc.n_questions == MSE_SMALL.acc_questions).all()
    for c in ("J_answer", "acc_answer", "acc_trace"):
        assert acc[c].between(0, 1).all()
    # exact J and the sampled answer-only accuracy estimate the same number
    n = acc.n_questions * acc.n_samples
    se = np.sqrt(acc.J_answer * (1 - acc.J_answer) / n) + 1e-3
    assert ((acc.acc_answer - acc.J_answer).abs() <= 5 * se).all(), acc


def test_accuracy_order_rule():
    def table(b, i, k):
        return pd.DataFrame(dict(policy=["base", "instruct", "icl"], J_answer=[b, i, k],
                                 acc_trace=[b, i, k]))

    assert lm_mse.accuracy_order(table(0.2, 0.3, 0.4)) == {"answer": True, "trace": True}
    assert not any(lm_mse.accuracy_order(table(0.2, 0.4, 0.3)).values())  # icl below instruct
    assert not any(lm_mse.accuracy_order(table(0.01, 0.3, 0.4)).values())  # base degenerate
    assert not any(lm_mse.accuracy_order(table(0.2, 0.3, 0.99)).values())  # icl degenerate


def test_lm_mse_check_can_fail(runs):
    """A wrong prediction (twice the true value) is caught by the same checks and the report."""
    tables = runs[1][lm_mse.NAME].tables
    bad = tables["table"].copy()
    m = bad.estimator.isin(["vanilla", "oracle"]) & (bad.fmt == "answer")
    bad.loc[m, "predicted"] = 2 * bad.loc[m, "predicted"]
    bad.loc[m, "z"] = (bad.loc[m, "mse"] - bad.loc[m, "predicted"]) / bad.loc[m, "se"]
    assert not lm_mse.checks(bad)[lambda c: c.fmt == "answer"].passed.any()
    sec = lm_mse.report(dict(tables, table=bad), MSE_SMALL)
    assert sec.verdict == "FAIL" and "| FAIL |" in sec.markdown
    # a missing number is never a PASS
    gap = tables["table"].copy()
    gap.loc[gap.estimator == "oracle", "se"] = np.nan
    assert lm_mse.report(dict(tables, table=gap), MSE_SMALL).verdict == "INCOMPLETE"


def test_lm_drivers_resume_without_recomputing(runs):
    """A rerun reads every cell (none recomputed) and leaves the cell files byte-identical;
    both drivers trained one warm-up into one cache, loaded once per process."""
    root, res = runs
    files = sorted(root.rglob("cells/**/*.csv"))
    before = {p: p.read_bytes() for p in files}
    again = _runs(root, figures=False)
    for name, r in again.items():
        assert r.n_computed == 0 and r.n_reused == res[name].n_cells
        for kind, df in r.tables.items():
            pd.testing.assert_frame_equal(df, res[name].tables[kind])
    assert {p: p.read_bytes() for p in sorted(root.rglob("cells/**/*.csv"))} == before
    w = MSE_SMALL.warmup
    assert w == GS_SMALL.warmup
    # the studies' cells run in float64: one entry, keyed by the precision too
    assert [p.name for p in (root / ".cache" / "lm").iterdir()] == [w.tag() + "_float64"]
    assert cached_policies(root / ".cache" / "lm", w) is cached_policies(root / ".cache" / "lm", w)


def test_cell_configs_hold_the_warmup():
    """A cell of another warm-up configuration has another identity (never reused), and every
    cell's key comes from its id: the configs hold no seeds."""
    other = dataclasses.replace(MSE_SMALL.warmup, base_steps=MSE_SMALL.warmup.base_steps + 1)
    for mod, s in ((lm_mse, MSE_SMALL), (lm_groupsize, GS_SMALL)):
        cs = mod.cells(s)
        cs2 = mod.cells(dataclasses.replace(s, warmup=other))
        assert [c.id for c in cs] == [c.id for c in cs2]
        for c, c2 in zip(cs, cs2):
            assert c.config["warmup"] == s.warmup and "seed" not in c.config
            assert (cell_hash(mod.NAME, "quick", c.id, c.config, 0)
                    != cell_hash(mod.NAME, "quick", c2.id, c2.config, 0))


def test_lm_groupsize(runs):
    root, res = runs
    r = res[lm_groupsize.NAME]
    tr, preds = r.tables["train"], r.tables["prediction"]
    s = GS_SMALL
    n_ckpt = len(s.checkpoints) + 1
    for sweep, hards, n_runs in (
            ("main", [s.warmup.task.hard_fraction], len(s.group_sizes) * s.seeds),
            ("knob", s.knob.hard_fractions, len(s.knob.group_sizes) * s.knob.seeds)):
        for h in hards:
            pred = lm_groupsize.prediction(preds, sweep, h)
            assert pred.c1 > 0 and pred.c3 > 0
            assert pred.G_continuous == pytest.approx(1 + np.sqrt(pred.c3 / pred.c1))
            assert 0 <= pred.frac_V_below_5pct <= 1 and pred.V_q10 <= pred.V_median <= pred.V_q90
            t = tr[(tr.sweep == sweep) & np.isclose(tr.hard_fraction, h)]
            assert len(t) == n_runs * n_ckpt
            assert t.accuracy.between(0, 1).all()
            # every run starts from the same policy and questions: exact accuracy at step 0
            assert np.allclose(t[t.step == 0].accuracy, pred.J)
    pr = tr[tr.sweep == "practical"]
    assert len(pr) == len(s.practical.group_sizes) * s.practical.seeds * n_ckpt
    assert set(pr.estimator) == {"grpo_std"} and set(pr.epochs) == {2}
    assert np.allclose(pr[pr.step == 0].accuracy, lm_groupsize.prediction(preds).J)
    assert pr.accuracy.between(0, 1).all()
    # replicates of one (N, G) are different runs (keys from the cell id, not from G or seed)
    main = tr[(tr.sweep == "main") & (tr.step == s.steps)]
    assert main.groupby("G").accuracy.nunique().eq(s.seeds).all(), main
    # harder questions: the same starting policy has a lower pass rate
    assert (lm_groupsize.prediction(preds, "knob", 0.5).J < lm_groupsize.prediction(preds).J)
    # the learning gate needs the quick setting's seeds (two seeds give no power): here its row
    # is present and statistical; every other check passes (the gate's logic: its own test)
    gate = [c for c in r.section.checks if c.name.startswith("training learns")]
    assert len(gate) == 1 and gate[0].kind == "statistical" and np.isfinite(gate[0].rival_se)
    others = [c for c in r.section.checks if c not in gate]
    assert others and all(c.passed for c in others), r.section.checks_markdown()
    md = r.section.markdown
    assert "bootstrap" in md and "Difficulty knob" in md and "Practical variant" in md
    assert (root / lm_groupsize.NAME / "lm_groupsize.png").exists()
    # a missing prediction is never a PASS
    gap = dict(r.tables, prediction=preds.assign(c1=np.nan))
    sec = lm_groupsize.report(gap, s)
    assert sec.verdict != "PASS"
    assert [c.passed for c in sec.checks if c.name.startswith("c1 > 0")] == [None]


def _gate_table(gain, seeds=8, sd=0.001, start=0.07, rng=None):
    """A main-sweep ``train`` table: every run starts at ``start`` and ends at ``start + gain[G]``
    plus noise of ``sd`` across seeds."""
    rng = rng or np.random.default_rng(0)
    rows = [dict(sweep="main", N=128, G=g, run_seed=r, step=st,
                 accuracy=start if st == 0 else start + gain[g] + sd * rng.normal())
            for g in gain for r in range(seeds) for st in (0, 10)]
    return pd.DataFrame(rows)


def test_the_learning_gate_fails_on_a_loop_that_does_not_learn():
    """Rival: training that leaves the accuracy where it started (gain 0 at one G)."""
    from grpo_theory.studies.lm_groupsize import analysis as GA
    learn = GA.learning_gate(_gate_table({4: 0.006, 16: 0.007, 64: 0.005}))
    assert GA._learning_check(learn).passed and learn["t_min"] > GA.GATE_T
    flat = GA.learning_gate(_gate_table({4: 0.006, 16: 0.007, 64: 0.0}))
    assert not GA._learning_check(flat).passed and abs(flat["t"][64]) < GA.GATE_T
    # the ordering measurement: the least and largest predicted MSE of the grid, Welch's t
    pred = pd.Series(dict(c1=0.5, c2=10.0, c3=56.0))
    g = GA.training_gate(_gate_table({4: 0.006, 16: 0.009, 64: 0.003}), pred)
    assert (g["g_low"], g["g_high"]) == (16, 64) and g["diff"] > 0 and g["t"] > GA.GATE_T
    assert g["mde"] == pytest.approx(GA.minimum_detectable_effect(g["se"], g["df"]))


def test_bootstrap_best_g():
    acc = pd.DataFrame([[0.1, 0.11, 0.12], [0.5, 0.52, 0.49], [0.3, 0.31, 0.29]],
                       index=[4, 16, 64])
    bs = lm_groupsize.bootstrap_best_g(acc)
    assert bs["best"] == 16 and bs["lo"] == bs["hi"] == 16 and bs["p_best"] == 1.0
    tie = pd.DataFrame([[0.5, 0.1], [0.3, 0.3]], index=[4, 8])
    bs = lm_groupsize.bootstrap_best_g(tie, n_boot=4000)
    assert bs["lo"] == 4 and bs["hi"] == 8 and 0.5 < bs["p_best"] < 0.95


def test_lm_mse_grpo_gap_gate_can_fail(runs):
    """(iv') sees a grpo excess over the oracle that does not vanish with G (the rival of
    c3 / (B G (G - 1))): a constant excess of 6 se at every G fails the check and the verdict."""
    tables = runs[1][lm_mse.NAME].tables
    good = lm_mse.checks(tables["table"])
    assert good[good.fmt == "answer"].go_ok.all()
    bad = tables["table"].copy()
    m = (bad.estimator == "grpo-oracle") & (bad.fmt == "answer")
    excess = 6 * np.hypot(bad.loc[m, "se"], bad.loc[m, "predicted_se"]).max()
    bad.loc[m, "mse"] += excess
    bad.loc[m, "z"] = (bad.loc[m, "mse"] - bad.loc[m, "predicted"]) / np.hypot(
        bad.loc[m, "se"], bad.loc[m, "predicted_se"])
    ck = lm_mse.checks(bad)
    assert not ck[ck.fmt == "answer"].go_ok.any()
    sec = lm_mse.report(dict(tables, table=bad), MSE_SMALL)
    row = [c for c in sec.checks if c.name.startswith("(iv')")]
    assert len(row) == 1 and row[0].passed is False and sec.verdict == "FAIL"
    assert "Power of (i)" in sec.markdown


def test_baselines_train_the_transformer_with_paired_seeds(runs):
    """The ``baselines`` study's transformer cell (in the drivers' warm-up cache), small: two
    estimators, two seeds, two steps. Leave-one-out's own difference is 0, the runs start at
    one accuracy, the weighted baseline moves the policy otherwise than leave-one-out (its
    squared score norms reach the loop), and the report renders the table."""
    import jax
    from grpo_theory._cache import cache_context
    from grpo_theory.lm import QUICK_WARMUP
    from grpo_theory.studies import baselines
    from grpo_theory.studies.baselines import lm_training as L

    root, _ = runs
    config = dict(lm_train=True, warmup=QUICK_WARMUP, G=4, N=16, steps=2, seeds=2, lr=1e-2,
                  n_eval=24, n_pool=200, estimators=["grpo", "norm_weighted"])
    with cache_context(root / ".cache"):
        rows = pd.DataFrame(baselines.cell(config, jax.random.PRNGKey(0)))
    assert list(rows.estimator) == ["grpo", "norm_weighted"]
    loo, nw = rows.iloc[0], rows.iloc[1]
    assert loo.diff_loo == 0 and loo.start == nw.start
    assert nw.final != loo.final
    assert set(rows.columns) >= set(L.SCHEMA)
    text = "\n".join(L.lm_training_lines(rows))
    assert "small transformer" in text and "`norm_weighted`" in text
