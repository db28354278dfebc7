"""Estimator identities (property tests) and bad-input errors."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import grpo_theory as gt
from grpo_theory.core.ustat import grpo_loo_estimate, grpo_ustat_estimate
from grpo_theory.core import MissingClosedForm

# rewards on a 1/8 grid: real rewards are discrete, and a grid keeps affine maps away from the
# catastrophic cancellation that float64 cannot avoid (spreads of 1e-9 on values of order 1)
rewards_st = st.integers(2, 9).flatmap(
    lambda G: arrays(np.float64, (3, G), elements=st.integers(-40, 40).map(lambda k: k / 8)))


@settings(max_examples=15)
@given(st.integers(2, 8).flatmap(lambda G: st.tuples(
    arrays(np.float64, (G, 3), elements=st.floats(-3, 3, width=64)),
    arrays(np.float64, (G,), elements=st.floats(-3, 3, width=64)))))
def test_lemma1_loo_equals_pairwise_ustatistic(data):
    """Lemma 1 on random scores and rewards (few examples: each new G recompiles; sampled
    bandit groups are also checked against both forms in tests/test_practical.py)."""
    scores, rewards = map(jnp.asarray, data)
    direct = grpo_loo_estimate(scores, rewards)
    pairwise = grpo_ustat_estimate(scores, rewards)
    via_registry = jnp.mean(scores * gt.compute_advantages("grpo", rewards)[:, None], axis=0)
    np.testing.assert_allclose(direct, pairwise, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(direct, via_registry, rtol=1e-12, atol=1e-12)


@given(rewards_st)
def test_centred_advantages_sum_to_zero(z):
    for name in ("grpo", "grpo_mean", "grpo_std", "grpo_std_trl", "grpo_std_paper"):
        adv = gt.compute_advantages(name, z)
        np.testing.assert_allclose(jnp.sum(adv, axis=-1), 0.0, atol=1e-9)


@given(rewards_st)
def test_loo_is_rescaled_mean_centring(z):
    G = z.shape[-1]
    loo = gt.compute_advantages("grpo", z)
    mean = gt.compute_advantages("grpo_mean", z)
    np.testing.assert_allclose(loo, G / (G - 1) * mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gt.compute_advantages("rloo", z), loo, rtol=0, atol=0)


@given(rewards_st, st.floats(0.01, 100.0), st.floats(-50, 50))
def test_std_normalised_invariant_to_affine_rewards(z, a, c):
    for name in ("grpo_std_paper",):  # eps = 0: exact invariance
        np.testing.assert_allclose(gt.compute_advantages(name, a * z + c),
                                   gt.compute_advantages(name, z), rtol=1e-7, atol=1e-7)
    est = gt.grpo_std(ddof=0, eps=0.0)
    np.testing.assert_allclose(est(a * z + c), est(z), rtol=1e-7, atol=1e-7)


@given(st.integers(2, 10), st.floats(-3, 3))
def test_zero_variance_group_gets_zero_advantage(G, value):
    z = jnp.full((G,), value)
    for name in ["grpo_std", "grpo", "grpo_mean"] + [f"grpo_std_{p}" for p in gt.STD_PRESETS]:
        assert np.all(np.asarray(gt.compute_advantages(name, z)) == 0.0), name


def test_std_presets_conventions():
    z = jnp.array([1.0, 0.0, 0.0, 1.0, 1.0])
    trl = gt.compute_advantages("grpo_std_trl", z)
    manual = (z - z.mean()) / (np.std(np.asarray(z), ddof=1) + 1e-4)
    np.testing.assert_allclose(trl, manual, rtol=1e-12)
    easydel = gt.compute_advantages("grpo_std_easydel", z)
    np.testing.assert_allclose(easydel, (z - z.mean()) / (np.std(np.asarray(z)) + 1e-4), rtol=1e-12)
    np.testing.assert_allclose(gt.compute_advantages("grpo_std_drgrpo", z),
                               gt.compute_advantages("grpo_mean", z), rtol=0, atol=0)


def test_oracle_and_baselines_use_context():
    z = jnp.array([[1.0, 0.0, 1.0]])
    np.testing.assert_allclose(gt.compute_advantages("oracle", z, value=jnp.array([0.25])),
                               z - 0.25)
    est = gt.prompt_baseline(jnp.array([0.1, 0.7]))
    np.testing.assert_allclose(gt.compute_advantages(est, z, prompt=jnp.array([1])), z - 0.7)
    np.testing.assert_allclose(gt.compute_advantages("optimal", z,
                                                     optimal_baseline=jnp.array([0.5])), z - 0.5)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        gt.compute_advantages("grpo", jnp.array([1.0]))
    with pytest.raises(ValueError, match="rewards must be finite"):
        gt.compute_advantages("grpo", jnp.array([1.0, jnp.nan]))
    with pytest.raises(ValueError, match="rewards must be finite"):
        gt.compute_advantages("vanilla", jnp.array([1.0, jnp.inf]))
    with pytest.raises(ValueError, match="estimator must be one of"):
        gt.get_estimator("reinforce++")
    with pytest.raises(ValueError, match="needs PromptContext.value"):
        gt.compute_advantages("oracle", jnp.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="ddof must be 0 or 1"):
        gt.grpo_std(ddof=2)
    with pytest.raises(ValueError, match="eps must be"):
        gt.grpo_std(eps=-1.0)
    with pytest.raises(ValueError, match="centre must be"):
        gt.grpo_std(centre="median")
    with pytest.raises(ValueError, match="b must be a 1-d array"):
        gt.prompt_baseline(jnp.array([[0.1]]))
    with pytest.raises(ValueError, match="over must be"):
        gt.grpo_std(over="prompt")


@pytest.mark.parametrize("bad, msg", [
    ([0.1 + 1j, 0.2], "b must be real"), (["0.1", "0.2"], "b must be an array of real numbers"),
    ("0.1", "b must be an array of real numbers"), ([], "b must not be empty"),
    ([0.1, np.nan], "b must be finite"), ([0.1, np.inf], "b must be finite"),
    (0.5, "b must be a 1-d array"), ([[0.1, 0.2]], "b must be a 1-d array")])
def test_prompt_baseline_validates_b(bad, msg):
    with pytest.raises(ValueError, match=msg):
        gt.prompt_baseline(bad)


def test_check_problem_refuses_baseline_of_wrong_length():
    est = gt.prompt_baseline(np.array([0.1, 0.2, 0.3]))
    est.check_problem(3)
    est.check_problem(np.int64(3))
    for n in (2, 4):
        with pytest.raises(ValueError, match=rf"b must have shape \({n},\).*got 3 entries"):
            est.check_problem(n)
    for name in gt.available_estimators():  # estimators without a user baseline accept any P
        gt.get_estimator(name).check_problem(7)


def test_exact_mse_refuses_baseline_of_wrong_length():
    from grpo_theory.problems import default_bandit

    bandit = default_bandit()  # 4 prompts
    assert np.isfinite(float(gt.exact_mse(bandit, gt.prompt_baseline(np.full(4, 0.3)), 4, 2)))
    for n in (3, 5):
        with pytest.raises(ValueError, match=rf"b must have shape \(4,\).*got {n} entries"):
            gt.exact_mse(bandit, gt.prompt_baseline(np.full(n, 0.3)), 4, 2)


def test_batch_coupled_flags():
    coupled = {n for n in gt.available_estimators() if gt.get_estimator(n).batch_coupled}
    assert coupled == {"grpo_std_trl_batch", "grpo_std_easydel_batch", "reinforce_baseline",
                       "reinforce_baseline_openrlhf", "reinforce_plus_plus_baseline",
                       "reinforce_plus_plus_baseline_verl", "jspo", "jspo_pooled",
                       "jspo_plus_plus",
                       # verl 0.9.1 (core/verl_estimators.py)
                       "reinforce_plus_plus_verl", "reinforce_plus_plus_baseline_verl_tokens",
                       "gpg_verl", "gdpo_verl", "gdpo",
                       # history baselines (core/baselines.py): SPO whitened over the batch
                       "spo",
                       # BASIS and EBPO's self-inclusive rival (core/baselines.py,
                       # core/history_baselines.py)
                       "basis", "basis_self_inclusive", "ebpo_self_inclusive"}
    with_form = set()
    for n in coupled:
        est = gt.get_estimator(n)
        # exact by batch counts (core.batch_exact), never by the per-group routes; those that
        # read response lengths (verl's token whitening) are not functions of the rewards
        assert not est.rewards_only, n
        if est.closed_form is not None:  # an MSE over cross-prompt pieces, no per-prompt law
            with_form.add(n)
            with pytest.raises(MissingClosedForm, match="per-prompt"):
                est.closed_form.moments(None, 2, None)
            with pytest.raises(ValueError, match="couple the prompts"):
                gt.exact_mse(gt.SoftmaxBandit.random(0, 2, 2), n, 2, 2)
        assert est.binary_exact == ("length" not in est.needs), n
    assert with_form == {"basis"}  # the biased rival basis_self_inclusive carries none


def test_registry_lists_required_names():
    names = gt.available_estimators()
    for n in ("vanilla", "oracle", "grpo", "rloo", "grpo_mean", "grpo_std", "optimal"):
        assert n in names
