"""DPPO pruning: exact unbiasedness over all masks, biased controls, exact variance cost."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_theory import problems
import grpo_theory as gt
from grpo_theory.companions import dppo

SMALL = gt.SoftmaxBandit(np.array([[0.3, -0.2, 0.9], [1.0, 0.0, -1.0]]),
                         np.array([[0.2, 0.9, 0.5], [1.0, 0.0, 0.4]]), prompt_probs=[0.3, 0.7])
PROBLEM = SMALL.problem()
LENGTHS = np.array([1.0, 3.0, 7.0])
UNIFORM = dppo.KeepScheme("uniform", 0.6, 0.7)
ADVANTAGE = dppo.KeepScheme("advantage", 0.8, floor=0.3, zero_group_prompt=0.4)
CONTROLS = [m for m in dppo.METHODS if m != "dppo"]
# the driver's problem and batch shape (B = 2, G = 4; 2^10 masks; D = 144): shared compilation
DIFF, DIFF_LENGTHS = problems.difficulty_problem()
X = jnp.array([1, 2])
Y = jnp.array([[0, 5, 17, 30], [30, 2, 9, 9]])
Z = jnp.array([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0]])


def _terms(est="grpo", x=X, y=Y, z=Z):
    adv, S, ctx = dppo.batch_terms(DIFF, est, x, y, z)
    return adv, S, ctx, dppo.full_estimate(adv, S)


@pytest.mark.parametrize("est", ["grpo", "grpo_std", "oracle"])
@pytest.mark.parametrize("scheme", [UNIFORM, ADVANTAGE], ids=["uniform", "advantage"])
def test_dppo_unbiased_given_the_batch_by_enumerating_all_masks(est, scheme):
    adv, S, ctx, full = _terms(est)
    qp, qc = scheme(adv)
    mom = dppo.exact_mask_moments(est, Z, ctx, adv, S, qp, qc)
    assert mom["total_probability"] == pytest.approx(1.0, abs=1e-14)
    np.testing.assert_allclose(mom["dppo"][0], full, rtol=1e-12, atol=1e-15)
    # exact variance of the masks = Horvitz-Thompson formula
    np.testing.assert_allclose(mom["dppo"][1], dppo.added_variance(adv, S, qp, qc), rtol=1e-11)


@pytest.mark.parametrize("scheme", [UNIFORM, ADVANTAGE], ids=["uniform", "advantage"])
def test_every_negative_control_is_biased_given_the_batch(scheme):
    adv, S, ctx, full = _terms("grpo")
    qp, qc = scheme(adv)
    mom = dppo.exact_mask_moments("grpo", Z, ctx, adv, S, qp, qc)
    for m in CONTROLS:
        bias = float(jnp.max(jnp.abs(mom[m][0] - full)))
        assert bias > 1e-4, (m, bias)  # vs DPPO's ~1e-16


@settings(max_examples=25)
@given(seed=st.integers(0, 2**31 - 1),
       qp=st.lists(st.floats(0.05, 1.0), min_size=2, max_size=2),
       qc=st.lists(st.floats(0.05, 1.0), min_size=8, max_size=8),
       est=st.sampled_from(["grpo", "grpo_std"]))
def test_dppo_unbiased_for_arbitrary_keep_probabilities(seed, qp, qc, est):
    x, y, z = gt.sample_groups(jax.random.PRNGKey(seed), DIFF, 2, 4)
    adv, S, ctx, full = _terms(est, x, y, z)
    qp, qc = jnp.array(qp), jnp.array(qc).reshape(2, 4)
    mom = dppo.exact_mask_moments(est, z, ctx, adv, S, qp, qc)
    scale = float(jnp.max(jnp.abs(full))) + 1.0
    np.testing.assert_allclose(mom["dppo"][0], full, rtol=0, atol=1e-13 * scale / qc.min())
    np.testing.assert_allclose(mom["dppo"][1], dppo.added_variance(adv, S, qp, qc),
                               rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("scheme", [UNIFORM, ADVANTAGE], ids=["uniform", "advantage"])
def test_exact_over_batch_sampling_and_masks(scheme):
    res = dppo.exact_pruning_expectation(SMALL, "grpo", 2, 2, scheme, lengths=LENGTHS)
    grad = np.asarray(PROBLEM.gradient())
    d = res["dppo"]
    np.testing.assert_allclose(d["mean_full"], grad, rtol=1e-12, atol=1e-15)  # GRPO unbiased
    np.testing.assert_allclose(d["mean_pruned"], grad, rtol=1e-12, atol=1e-15)
    assert d["cond_bias"] < 1e-14
    # MSE(DPPO) = MSE(full) + E[added variance] = binary-conditioning closed form
    closed = dppo.exact_pruned_mse(SMALL, "grpo", 2, 2, scheme, lengths=LENGTHS)
    assert d["mse_pruned"] == pytest.approx(d["mse_full"] + d["added_variance"], rel=1e-12)
    assert d["mse_pruned"] == pytest.approx(closed["mse"], rel=1e-12)
    assert d["mse_full"] == pytest.approx(gt.exact_mse(SMALL, "grpo", 2, 2), rel=1e-12)
    assert d["kept_tokens"] == pytest.approx(closed["kept_tokens"], rel=1e-12)
    assert d["added_variance"] > 1e-3
    for m in CONTROLS:
        if scheme is ADVANTAGE and m == "recompute":
            continue  # G = 2: mixed groups are kept surely, see the driver's report
        bias = float(np.max(np.abs(res[m]["mean_pruned"] - grad)))
        assert bias > 1e-3, (m, bias)


def test_batch_enumeration_is_the_core_enumeration():
    prob, x, y, z = dppo.enumerate_batches(SMALL, 2, 2)
    adv, S, _ = dppo.batch_terms(PROBLEM, "grpo", x, y, z)
    core_prob, core_est = gt.enumerate_estimates(SMALL, "grpo", 2, 2)
    np.testing.assert_array_equal(prob, core_prob)
    np.testing.assert_allclose(dppo.full_estimate(adv, S), core_est, rtol=1e-14, atol=1e-16)


def test_over_batches_g3_closed_form_and_recompute_control():
    res = dppo.exact_pruning_expectation(SMALL, "grpo", 3, 1, ADVANTAGE, lengths=LENGTHS)
    closed = dppo.exact_pruned_mse(SMALL, "grpo", 3, 1, ADVANTAGE, lengths=LENGTHS)
    grad = np.asarray(PROBLEM.gradient())
    d = res["dppo"]
    np.testing.assert_allclose(d["mean_pruned"], grad, rtol=1e-12, atol=1e-15)
    assert d["mse_pruned"] == pytest.approx(closed["mse"], rel=1e-12)
    assert d["kept_tokens"] == pytest.approx(closed["kept_tokens"], rel=1e-12)
    # with G = 3 the advantage-aware scheme prunes inside mixed groups: recompute is biased
    assert np.max(np.abs(res["recompute"]["mean_pruned"] - grad)) > 1e-3


def test_added_variance_formula_vs_monte_carlo_over_masks():
    adv, S, ctx, full = _terms("grpo")
    qp, qc = UNIFORM(adv)
    est = dppo.mc_mask_estimates(jax.random.PRNGKey(0), "dppo", "grpo", Z, ctx, adv, S, qp, qc,
                                 n_reps=10_000)  # the driver's quick setting
    d2 = np.asarray(jnp.sum((est - full) ** 2, axis=1))
    se = d2.std(ddof=1) / np.sqrt(d2.size)
    formula = float(dppo.added_variance(adv, S, qp, qc))
    assert abs(d2.mean() - formula) <= 4 * se
    assert se < 0.05 * formula  # the check has power
    np.testing.assert_allclose(np.asarray(est).mean(0), full, atol=5 * np.sqrt(formula / 10_000))


def test_mc_pruned_mse_matches_exact_and_controls_differ():
    # the driver's trade-off configuration (shares its compilation)
    sch = dppo.KeepScheme("uniform", 0.6, 0.7)
    mc = dppo.mc_pruned_mse(DIFF, "grpo", 8, 4, sch, n_reps=4_000, seed=3, lengths=DIFF_LENGTHS)
    ex = dppo.exact_pruned_mse(DIFF, "grpo", 8, 4, sch, lengths=DIFF_LENGTHS)
    assert abs(mc["dppo"]["mse"] - ex["mse"]) <= 4 * mc["dppo"]["se"]
    assert abs(mc["full"]["mse"] - ex["mse_full"]) <= 4 * mc["full"]["se"]
    assert ex["kept_tokens"] == pytest.approx(0.6 * 0.7, rel=1e-12)
    assert abs(mc["kept_tokens"] - ex["kept_tokens"]) < 0.02
    # the controls' MSE is not DPPO's (no_rescale shrinks the gradient, deterministic is biased)
    for m in ("no_rescale", "deterministic"):
        assert abs(mc[m]["mse"] - ex["mse"]) > 4 * mc[m]["se"], m


def test_masked_advantages_recompute_on_the_kept_subset():
    z = jnp.array([[1.0, 0.0, 1.0, 1.0]])
    ctx = gt.PromptContext()
    est = gt.get_estimator("grpo")
    masked = jax.jit(dppo.masked_advantages, static_argnums=0)
    full = masked(est, z, jnp.array([[True] * 4]), ctx)
    np.testing.assert_allclose(full, est(z))
    keep = jnp.array([[True, True, False, True]])
    sub = masked(est, z, keep, ctx)
    np.testing.assert_allclose(sub[0, [0, 1, 3]], [0.5, -1.0, 0.5])  # LOO on (1, 0, 1)
    assert sub[0, 2] == 0.0
    one = masked(est, z, jnp.array([[False, True, False, False]]), ctx)
    np.testing.assert_array_equal(one, 0.0)  # a 1-completion group cannot form a baseline


def test_deterministic_control_drops_lowest_abs_advantages():
    adv = jnp.array([[0.5, -2.0, 0.1, 1.0]])
    S = jnp.eye(4)[None]  # score of completion g = e_g: the estimate shows who was kept
    est = dppo.pruned_estimate("deterministic", "grpo", None, None, adv, S, jnp.array([1.0]),
                               jnp.full((1, 4), 0.5), jnp.ones(1), jnp.ones((1, 4)))
    np.testing.assert_allclose(est, [0.0, -2.0 * 2 / 4, 0.0, 1.0 * 2 / 4])


def test_zero_advantage_group_pruning_is_free():
    sch = dppo.KeepScheme("advantage", 1.0, floor=1.0, zero_group_prompt=0.2)
    ex = dppo.exact_pruned_mse(SMALL, "grpo", 3, 1, sch, lengths=LENGTHS)
    assert ex["added"] == 0.0
    assert ex["mse"] == ex["mse_full"]
    assert ex["kept_tokens"] < 0.9  # prompt 1 has a reward-1 and a reward-0 response


def test_keep_scheme_is_a_pytree_and_validates():
    for sch in (UNIFORM, ADVANTAGE, dppo.KeepScheme("advantage", 0.5, floor=0.2)):
        leaves, tree = jax.tree_util.tree_flatten(sch)
        back = jax.tree_util.tree_unflatten(tree, leaves)
        assert back == sch
        adv = jnp.array([[0.0, 0.0], [1.0, -0.5]])
        for a, b in zip(sch(adv), jax.jit(lambda s: s(adv))(sch)):
            np.testing.assert_allclose(a, b)
    qp, qc = ADVANTAGE(jnp.array([[0.0, 0.0, 0.0], [1.0, -0.5, -0.5]]))
    np.testing.assert_allclose(qp, [0.4, 0.8])
    np.testing.assert_allclose(qc, [[0.3] * 3, [1.0, 0.65, 0.65]])


@pytest.mark.parametrize("kwargs", [dict(q_prompt=0.0), dict(q_completion=1.5),
                                    dict(floor=-0.1), dict(kind="topk"),
                                    dict(zero_group_prompt=0.0)])
def test_bad_keep_probabilities_raise(kwargs):
    with pytest.raises(ValueError):
        dppo.KeepScheme(**kwargs)


def test_bad_inputs_raise():
    adv, S, ctx, _ = _terms()
    with pytest.raises(ValueError, match="qc"):
        dppo.exact_mask_moments("grpo", Z, ctx, adv, S, jnp.ones(2), jnp.zeros((2, 3)))
    with pytest.raises(ValueError, match="method"):
        dppo.mc_mask_estimates(jax.random.PRNGKey(0), "prune", "grpo", Z, ctx, adv, S,
                               jnp.ones(2), jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="max_masks"):
        dppo.enumerate_masks(4, 8)
    with pytest.raises(ValueError, match="group_size"):
        dppo.exact_pruned_mse(SMALL, "grpo", 1, 1, UNIFORM)
    with pytest.raises(ValueError, match="lengths"):
        dppo.exact_pruned_mse(SMALL, "grpo", 2, 1, UNIFORM, lengths=[1.0, 2.0])
    with pytest.raises(ValueError, match="max_outcomes"):
        dppo.enumerate_batches(SMALL, 6, 2)


def test_driver_small_setting_passes(tmp_path):
    import dataclasses

    from grpo_theory.experiments.runner import run_experiment
    from grpo_theory.studies import dppo_pruning as drv

    # the quick setting less one enumerated bandit shape and half the rates (compilations)
    s = dataclasses.replace(drv.SETTINGS["quick"], batch_configs=((2, 2),), rates=(0.6, 0.4),
                            floors=(0.25, 0.1))
    res = run_experiment(drv.EXPERIMENT, tmp_path, s, seed=0, progress=False)
    assert res.tables.complete and set(res.tables) == {"masks", "batches", "tradeoff"}
    c = drv.summary(res.tables)
    assert c["mask_dppo_bias"] <= drv.EXACT_TOL
    assert c["batch_dppo_bias"] <= drv.EXACT_TOL
    assert min(c["mask_control_bias"].values()) > 1e-3
    assert min(c["batch_control_bias"].values()) > 1e-3
    assert c["var_mc_z"] <= drv.Z_TOL and c["trade_z"] <= drv.Z_TOL
    assert c["zero_group_added"] == 0.0
    assert res.verdict == "PASS", res.section.checks_markdown()
    # the statistical checks' rival (no added variance) lies beyond 4 se
    stat = [c for c in res.section.checks if c.kind == "statistical"]
    assert len(stat) == 2 and all(c.has_power for c in stat), [c.rival_se for c in stat]
    d = drv.trade_view(res.tables["tradeoff"])
    adv = d[d.family == "advantage-aware"]
    # at equal expected kept tokens, advantage-aware pruning beats uniform pruning (exact)
    assert (adv.mse_ratio < adv.completion_uniform_ratio_same_tokens).all()
    assert (adv.mse_ratio < adv.prompt_uniform_ratio_same_tokens).all()
    assert adv.kept_tokens.min() < 0.5 and (adv.mse_ratio < 1.5).all()
    assert (tmp_path / drv.NAME / "dppo_pruning.png").exists()
    # a DPPO bias above the tolerance makes the verdict FAIL
    bad, m = dict(res.tables), res.tables["masks"]
    bad["masks"] = m.assign(max_abs_bias=np.where(m.method == "dppo", 1e-3 * m.scale,
                                                  m.max_abs_bias))
    assert drv.report(bad, s).verdict == "FAIL"
