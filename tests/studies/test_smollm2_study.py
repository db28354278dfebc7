"""The SmolLM2 study's code path (simulations/_smollm2_study.py) end to end on a tiny GGUF file.

The tiny SmolLM2-like Llama file of ``support.gguf_checkpoint`` (random weights, byte-level
tokenizer, ChatML template) stands in for the real model, which the tests never need (``make smollm2`` fetches
it for ``make smollm2-study`` only). A random model almost never writes the right integer, so the
run uses a reward with a known spread (the parity of the response's length); the tables must
carry the configuration in every row, hold finite numbers, agree with the constants they are
computed from, and the zero-variance share must follow ``C(k,G)/C(n,G)`` on known rewards.
"""

import json
import math

import jax
import numpy as np
import pandas as pd
import pytest

from support.gguf_checkpoint import config, write_gguf
from support.hf_checkpoint import hf_weights

from grpo_theory import lm
from grpo_theory.experiments.lm_support.rank import zero_share_unbiased
from grpo_theory.studies.smollm2 import study as S

TAG = ["model", "task", "n_prompts", "n_ref", "n_study", "n_samples", "response_len", "chunk", "seed",
       "version"]


def parity(text, answer):
    """A reward with a spread on a random model: 1 iff the response has an even length."""
    return float(len(text) % 2 == 0)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = tmp_path_factory.mktemp("smollm2")
    cfg = config("llama", True, theta=1e5)
    model = write_gguf(path / "tiny.gguf", cfg, hf_weights(dict(cfg), False, seed=4), "smollm")
    policy = lm.from_pretrained(model)
    sc = S.StudyConfig(model=str(model), tasks=("add1", "mul1"), n_prompts=5, n_ref=6,
                       n_study=4, n_samples=6, response_len=3, chunk=3, seed=1)
    out = path / "out"
    return policy, sc, out, S.run_study(policy, sc, out, progress=False, reward=parity)


def test_tables_files_and_configuration_columns(run):
    policy, sc, out, res = run
    for name in ("passrates", "passrates_summary", "constants", "mse", "zero_variance",
                 "budgets", "prompts", "responses"):
        df = pd.read_csv(out / f"{name}.csv")
        assert set(TAG) <= set(df.columns), name
        assert (df.version == S.grpo_theory.__version__).all() and (df.seed == 1).all()
        assert (df.model == "tiny.gguf").all()
    for f in ("smollm2.png", "smollm2.pdf", "REPORT.md", "meta.json", "rollouts.npz"):
        assert (out / f).is_file(), f
    meta = json.loads((out / "meta.json").read_text())
    assert meta["config"]["n_samples"] == 6 and meta["dim"] == policy.dim
    pr = res["passrates"]
    assert len(pr) == 10 and set(pr.task) == {"add1", "mul1"}
    # the recorded rewards string gives the recorded pass rate
    for s, p in zip(pr.rewards.astype(str), pr.pass_rate):
        assert np.isclose(np.mean([int(c) for c in s.zfill(6)]), p)
    summ = res["passrates_summary"]
    assert summ.chosen.sum() == 1
    assert summ.loc[summ.chosen, "task"].iloc[0] == S.choose_task(summ)
    assert len(res["responses"]) == 4 * 6
    assert "Chosen: **" in (out / "REPORT.md").read_text()


def test_numbers_finite_and_consistent_with_the_constants(run):
    _, _, _, res = run
    est = res["estimate"]
    const = res["constants"].set_index("parameter")
    for p in ("c1", "c2", "c3", "c_v", "grad_norm_sq"):
        assert np.all(np.isfinite(const.loc[p, ["estimate", "std_err", "ci_low", "ci_high"]]))
        assert const.loc[p, "ci_low"] <= const.loc[p, "estimate"] <= const.loc[p, "ci_high"]
    c1, c2, c3, cv = (const.loc[p, "estimate"] for p in ("c1", "c2", "c3", "c_v"))
    mse = res["mse"]
    assert np.all(np.isfinite(mse[["mse", "mse_low", "mse_high"]].to_numpy()))
    assert np.all(mse.mse_low <= mse.mse) and np.all(mse.mse <= mse.mse_high)
    for _, r in mse.iterrows():
        G = r.G
        want = {"vanilla": c1 + cv / G, "oracle": c1 + c2 / G,
                "grpo": c1 + c2 / G + c3 / (G * (G - 1))}[r.estimator]
        assert np.isclose(r.mse, want, rtol=1e-9, atol=1e-12 * abs(want))
        assert np.isclose(r.budget_mse, G * r.mse)
    bud = res["budgets"]
    for _, r in bud.iterrows():
        G = est.recommended_group_size(int(r.N))
        if G is None:  # c1 not resolved above 0: no recommendation (never the budget N)
            assert pd.isna(r.G) and pd.isna(r.B)
        else:
            assert 2 <= r.G <= r.N and r.B == r.N // r.G and r.G == G
    prompts = res["prompts"]
    np.testing.assert_allclose(prompts.value, np.asarray(est.rewards).mean(axis=1))
    # phase 2 runs on a subset (n_study = 4) of phase 1's 5 prompts, matched by prompt index
    pr = res["passrates"]
    assert len(prompts) == 4 and len(set(prompts.prompt)) == 4 and prompts.prompt.max() <= 4
    ref = pr[pr.task == bud.task.iloc[0]].set_index("prompt")
    np.testing.assert_allclose(prompts.ref_pass_rate, ref.loc[prompts.prompt, "pass_rate"])
    assert list(prompts.question) == list(ref.loc[prompts.prompt, "question"])


def test_rerun_loads_the_rollouts_and_gives_the_same_tables(run):
    policy, sc, out, res = run
    again = S.run_study(policy, sc, out, progress=False, reward=parity)
    for name in ("constants", "mse", "zero_variance", "budgets"):
        pd.testing.assert_frame_equal(again[name], res[name])


def test_zero_variance_share_on_known_pass_rates():
    # prompt 0: 2 of 4 reference responses right; prompt 1: all right; prompt 2: none
    ref = np.array([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    obs = np.array([[1, 1, 0, 1], [1, 1, 1, 1], [0, 1, 0, 0]])  # G = 2 blocks: (11)(01) ...
    t = S.zero_variance_table(ref, obs).set_index("G")
    assert list(t.index) == [2, 4] and list(t.groups_per_prompt) == [2, 1]
    # unbiased V^G + (1-V)^G: (C(k,G) + C(n-k,G)) / C(n,G)
    want2 = np.mean([2 / math.comb(4, 2), 1, 1])
    want4 = np.mean([0, 1, 1])
    assert np.isclose(t.loc[2, "predicted"], want2) and np.isclose(t.loc[4, "predicted"], want4)
    assert np.isclose(t.loc[2, "predicted_plugin"], np.mean([0.5, 1, 1]))
    assert np.isclose(t.loc[2, "observed"], np.mean([0.5, 1, 0.5]))
    assert np.isclose(t.loc[4, "observed"], np.mean([0, 1, 0]))
    assert t.loc[2, "predicted_low"] <= want2 <= t.loc[2, "predicted_high"]
    # exact unbiasedness: averaging C(k,G)/C(n,G) over every k ~ Binomial(n, p) gives p^G + q^G
    n, G, p = 6, 3, 0.3
    pk = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]
    e = sum(w * zero_share_unbiased([k], n, G)[0] for k, w in enumerate(pk))
    assert np.isclose(e, p**G + (1 - p) ** G)


def test_bad_inputs_raise_value_errors():
    with pytest.raises(ValueError, match="binary"):
        S.zero_variance_table(np.array([[0.5, 1, 0]]), np.array([[0, 1, 0]]))
    with pytest.raises(ValueError, match="same prompts"):
        S.zero_variance_table(np.ones((2, 4)), np.ones((3, 4)))
    with pytest.raises(ValueError, match="task must be one of"):
        S.candidate_questions("div7", 3, 0)
    with pytest.raises(ValueError, match="n_prompts"):
        S.candidate_questions("sub1", 1000, 0)
    with pytest.raises(ValueError, match="same length"):
        S.sample_pass_rates(None, ["a"], ["b"], [1, 2], 2, 2, 0)


def test_measured_mse_end_to_end_and_resume(run, tmp_path):
    """The measurement on the study's output: tables tagged, invariants of every group's Gram
    entries, zero-weight padding equal to the unpadded gradient, and a rerun that resumes."""
    from grpo_theory.studies.smollm2 import measured as MS

    policy, sc, out, _ = run
    cfg = MS.MeasuredConfig(model=sc.model, study=str(out), group_sizes=(2, 4), rows=8,
                            n_value=2, n_batches=3, budgets=(4, 8), seed=3)
    dest, work = tmp_path / "m", tmp_path / "w"
    tabs = MS.run_measurement(policy, cfg, dest, work, progress=False, reward=parity)
    g = pd.read_csv(dest / "measured_groups.csv")
    assert sorted(g.G.value_counts().items()) == [(2, 4), (4, 2)]
    assert (g.k <= g.G).all() and set(g.vhat) <= {0.0, 0.5, 1.0}
    assert (g.s11 >= 0).all() and (g.s00 >= 0).all()
    assert (g.s10 ** 2 <= g.s11 * g.s00 * (1 + 1e-5) + 1e-9).all()  # Cauchy-Schwarz
    assert (g.s11[g.k == 0] == 0).all() and (g.s00[g.k == g.G] == 0).all()
    b = pd.read_csv(dest / "measured_batches.csv")
    assert b["count"].sum() == len(g) and (g.version == S.grpo_theory.__version__).all()
    mse = pd.read_csv(dest / "measured_mse.csv")
    assert {"estimator", "N", "G", "mse", "se", "predicted", "predicted_se",
            "replicates"} <= set(mse.columns)
    assert set(zip(mse.N, mse.G)) == {(4, 2), (4, 4), (8, 2), (8, 4)}
    assert np.isfinite(mse.predicted).all() and (mse.predicted_se >= 0).all()
    for f in ("measured_argmin.csv", "measured_differences.csv", "measured_mse.png",
              "MEASURED.md", "measured_meta.json"):
        assert (dest / f).is_file(), f
    assert tabs["grad_norm_sq"]["predicted"] == pytest.approx(
        float(pd.read_csv(out / "constants.csv").set_index("parameter").loc[
            "grad_norm_sq", "estimate"]))
    # resume: the same configuration computes no group again
    again = MS.run_measurement(policy, cfg, dest, work, progress=False, reward=parity)
    pd.testing.assert_frame_equal(pd.read_csv(dest / "measured_groups.csv"), g)
    assert again["mse"].mse.tolist() == pytest.approx(mse.mse.tolist())
    # more rows extend the saved run (the same draws for the same (G, j)); fewer are refused
    import dataclasses

    more = dataclasses.replace(cfg, rows=12)
    MS.run_measurement(policy, more, dest, work, progress=False, reward=parity)
    g2 = pd.read_csv(dest / "measured_groups.csv")
    assert sorted(g2.G.value_counts().items()) == [(2, 6), (4, 3)]
    old = g.drop(columns=["seconds", "rows"]).set_index(["G", "j"])
    new = g2.drop(columns=["seconds", "rows"]).set_index(["G", "j"]).loc[old.index]
    pd.testing.assert_frame_equal(new, old)
    with pytest.raises(ValueError, match="beyond --rows"):
        MS.run_measurement(policy, cfg, dest, work, progress=False, reward=parity)
    # a run stopped by max_seconds (here before any new group) writes the tables from the
    # saved groups and says so; the law-against-rival check and its plan come with them
    MS.run_measurement(policy, dataclasses.replace(cfg, rows=16), dest, work, progress=False,
                       reward=parity, max_seconds=0.0)
    g3 = pd.read_csv(dest / "measured_groups.csv")
    pd.testing.assert_frame_equal(g3.drop(columns=["rows"]), g2.drop(columns=["rows"]))
    assert "stopped before --rows 16" in (dest / "MEASURED.md").read_text()
    riv = pd.read_csv(dest / "measured_rival.csv")
    assert riv.run.tolist() == ["seed 3", "seed 3", "combined"]
    assert riv.responses.tolist() == [12, 12, 24] and np.isfinite(riv.law).all()
    assert (dest / "measured_rival_plan.csv").is_file()
    # --pool: another run's folder joins the check (pooled rows per G)
    pooled = MS.analyse(dest, str(out), pool=[dest])["rival"]
    assert pooled[pooled.run == "pooled"].G.tolist() == [2, 4]
    assert pooled[pooled.run == "combined"].responses.iloc[0] == 48
    # zero-weight padding rows (a power-of-two bucket) leave the gradient unchanged
    x = np.repeat(np.asarray(S.chat_prompts(policy, ["What is 2 + 3?"], ["2 + 3 ="])), 4, axis=0)
    y = np.asarray(policy.sample(jax.random.PRNGKey(0), x, 3))
    rows = np.array([0, 2, 3])
    padded = MS._subset_score(policy, x, y, rows)
    plain = policy.weighted_score(x[rows], y[rows], np.ones(3))
    assert padded.shape == plain.shape  # float32 rounding of a 4-row against a 3-row batch
    assert np.linalg.norm(padded - plain) <= 1e-5 * np.linalg.norm(plain)
    assert MS._subset_score(policy, x, y, np.array([], int)) is None
    with pytest.raises(ValueError, match="make smollm2-study"):
        MS.population(tmp_path)
