"""Quick settings of the small-LM drivers (issue 5), asserting what theory predicts."""

import numpy as np
import pandas as pd
import pytest

from simulations import lm_groupsize, lm_mse


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    lm_mse.run(root / lm_mse.NAME, quick=True, seed=0)
    lm_groupsize.run(root / lm_groupsize.NAME, quick=True, seed=0)
    return root


def test_lm_mse_quick_matches_theory(out):
    d = out / lm_mse.NAME
    df = lm_mse._load(d)
    assert set(df.policy) == {"base", "instruct", "icl"} and set(df.fmt) == {"answer", "trace"}
    ck = lm_mse.checks(df)
    # measured vanilla - oracle gap equals the predicted V^2 (M - (2 - V)||s*||^2) / (B^2 G)
    assert (ck.z_vanilla_minus_oracle <= lm_mse.Z_TOL).all(), ck
    # answer-only: vanilla and oracle MSEs equal their exact-form predictions; MSE ~ 1/G
    a = ck[ck.fmt == "answer"]
    assert ((a.z_estimators <= lm_mse.Z_TOL) | (a.rel_err_estimators <= lm_mse.REL_TOL)).all(), ck
    assert (ck.z_one_over_G <= lm_mse.Z_TOL).all(), ck
    # grpo / oracle moves toward 1 as G grows
    assert (abs(ck.ratio_last - 1) < abs(ck.ratio_first - 1)).all(), ck
    rep = lm_mse.report(d)
    # the theory checks pass; the accuracy order is a property of the trained policies and is
    # gated by the full setting only (the quick model is tiny)
    assert rep["passed"] and "Policy accuracies" in rep["markdown"]
    full = df.assign(setting="full")
    order = all(lm_mse.accuracy_order(lm_mse._load(d, accuracies=True)).values())
    full_table = d.parent / "as_full"
    full_table.mkdir(exist_ok=True)
    pd.concat([full, lm_mse._load(d, accuracies=True).assign(setting="full")]).to_csv(
        full_table / "table.csv", index=False)
    assert lm_mse.report(full_table)["passed"] == order
    lm_mse.plot(d)
    assert (d / "lm_mse.png").exists()


def test_lm_policy_accuracies(out):
    acc = lm_mse._load(out / lm_mse.NAME, accuracies=True)
    assert list(acc.policy) == ["base", "instruct", "icl", "instruct+shots"]
    assert list(acc.shots) == [False, False, True, True]
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


def test_lm_mse_check_can_fail(out):
    """A wrong prediction (twice the true gap) is caught by the same check."""
    df = lm_mse._load(out / lm_mse.NAME)
    bad = df.copy()
    m = bad.estimator.isin(["vanilla", "oracle"]) & (bad.fmt == "answer")
    bad.loc[m, "predicted"] = 2 * bad.loc[m, "predicted"]
    bad.loc[m, "z"] = (bad.loc[m, "mse"] - bad.loc[m, "predicted"]) / bad.loc[m, "se"]
    assert not lm_mse.checks(bad)[lambda c: c.fmt == "answer"].passed.any()


def test_lm_mse_resumes_without_recomputing(out):
    d = out / lm_mse.NAME
    before = pd.read_csv(d / "table.csv")
    lm_mse.run(d, quick=True, seed=0)  # every cell is done: nothing recomputed
    after = pd.read_csv(d / "table.csv")
    pd.testing.assert_frame_equal(before, after)


def test_lm_groupsize_quick(out):
    d = out / lm_groupsize.NAME
    df = lm_groupsize._load(d)
    cfg = lm_groupsize.SETTINGS["quick"]
    for sweep, hards, n_runs in (
            ("main", [cfg["warmup"].task.hard_fraction], len(cfg["group_sizes"]) * cfg["seeds"]),
            ("knob", cfg["knob"]["hard_fractions"],
             len(cfg["knob"]["group_sizes"]) * cfg["knob"]["seeds"])):
        for h in hards:
            pred = lm_groupsize._prediction(df, sweep, h)
            assert pred.c1 > 0 and pred.c3 > 0
            assert pred.G_continuous == pytest.approx(1 + np.sqrt(pred.c3 / pred.c1))
            assert 0 <= pred.frac_V_below_5pct <= 1 and pred.V_q10 <= pred.V_median <= pred.V_q90
            tr = df[(df.kind == "train") & (df.sweep == sweep) & np.isclose(df.hard_fraction, h)]
            assert len(tr) == n_runs * (len(cfg["checkpoints"]) + 1)
            assert tr.accuracy.between(0, 1).all()
            # every run starts from the same policy and questions: exact accuracy at step 0
            assert np.allclose(tr[tr.step == 0].accuracy, pred.J)
    pr = df[(df.kind == "train") & (df.sweep == "practical")]
    k = cfg["practical"]
    assert len(pr) == len(k["group_sizes"]) * k["seeds"] * (len(cfg["checkpoints"]) + 1)
    assert set(pr.estimator) == {"grpo_std"} and set(pr.epochs) == {2}
    assert np.allclose(pr[pr.step == 0].accuracy, lm_groupsize._prediction(df, "main").J)
    assert pr.accuracy.between(0, 1).all()
    # harder questions: the same starting policy has a lower pass rate
    assert (lm_groupsize._prediction(df, "knob", 0.5).J
            < lm_groupsize._prediction(df, "main").J)
    rep = lm_groupsize.report(d)
    assert rep["passed"] and "bootstrap" in rep["markdown"]
    assert "Difficulty knob" in rep["markdown"] and "Practical variant" in rep["markdown"]
    lm_groupsize.plot(d)


def test_bootstrap_best_g():
    acc = pd.DataFrame([[0.1, 0.11, 0.12], [0.5, 0.52, 0.49], [0.3, 0.31, 0.29]],
                       index=[4, 16, 64])
    bs = lm_groupsize.bootstrap_best_g(acc)
    assert bs["best"] == 16 and bs["lo"] == bs["hi"] == 16 and bs["p_best"] == 1.0
    tie = pd.DataFrame([[0.5, 0.1], [0.3, 0.3]], index=[4, 8])
    bs = lm_groupsize.bootstrap_best_g(tie, n_boot=4000)
    assert bs["lo"] == 4 and bs["hi"] == 8 and 0.5 < bs["p_best"] < 0.95
