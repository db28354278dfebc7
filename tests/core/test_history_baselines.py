"""The field's history baselines (EBPO, DBB, KAE: ``core.history_baselines``) and BASIS's
cross-prompt baseline (``core.baselines``), exact given the state.

Rivals each check excludes: a wrong exact route (brute-force enumeration at the state, coded
apart from the count states, must agree to rounding), a state ignored (the moments at the
initial state are off), the self-inclusive forms (EBPO's prior updated with the current batch
before the advantage, BASIS's mean over all prompts: the unbiasedness check fails on them), a
wrong law for Monte Carlo (leave-one-out's or no baseline's exact MSE lies outside its
interval), and a wrong tracker update (literal loops over the responses).
"""

import jax.numpy as jnp
import numpy as np
import pytest

from grpo_theory.core import (PromptContext, SoftmaxBandit, at_state, basis, batch_moments, dbb,
                              ebpo, enumerated_moments, get_estimator, kae, mc_mse,
                              prompt_baseline)


def _toy(p):
    p = np.asarray(p, np.float64)
    return SoftmaxBandit(np.log(np.stack([p, 1 - p], 1)), [[1.0, 0.0]] * len(p))


def _mixed():
    """Two prompts, three arms with partial rewards."""
    return SoftmaxBandit([[0.0, 1.0, -1.0], [0.5, 0.0, 0.0]], [[1.0, 0.0, 0.5], [0.2, 0.9, 0.0]])


# six past group means (spread 0.06), within-group variance 0.09
EBPO_STATE = (jnp.asarray(6.0), jnp.asarray(0.25), jnp.asarray(0.3), jnp.asarray(0.09))
DBB_STATE = (jnp.asarray([2.0, 0.5]), jnp.asarray([1.0, 3.0]))
KAE_STATE = (jnp.asarray([[0.1, 0.3, 0.2], [0.0, 0.9, 0.6]]),
             jnp.asarray([[0.0, 1.0, 2.0], [-1.0, 1.0, 2.0]]), jnp.asarray(3.0))
CASES = [("ebpo", EBPO_STATE), ("dbb", DBB_STATE), ("kae", KAE_STATE)]


def _check_against_brute(bandit, est, G, B, state):
    mean, mse = enumerated_moments(bandit, at_state(est, state), G, B)
    bm = batch_moments(bandit, est, G, B, state=state)
    assert bm.mse == pytest.approx(mse, rel=1e-10)
    np.testing.assert_allclose(bm.mean, np.asarray(mean), atol=1e-13)
    return bm


@pytest.mark.parametrize("name,state", CASES)
def test_exact_given_the_state_equals_brute_force_and_is_unbiased(name, state):
    est = get_estimator(name)
    bm = _check_against_brute(_toy([0.2, 0.7]), est, 3, 2, state)
    assert bm.relative_bias < 1e-12
    start = batch_moments(_toy([0.2, 0.7]), est, 3, 2)  # the rival: the state ignored
    assert abs(start.mse - bm.mse) > 1e-3 * bm.mse


def test_ebpo_self_inclusive_prior_is_biased():
    """The prior updated with the current batch before the advantage: exact by the same routes,
    and the unbiasedness check fails on it."""
    rival = get_estimator("ebpo_self_inclusive")
    bm = _check_against_brute(_toy([0.2, 0.7]), rival, 3, 2, EBPO_STATE)
    assert bm.relative_bias > 1e-2
    assert batch_moments(_toy([0.1, 0.3, 0.6, 0.9]), rival, 3, 3,
                         state=EBPO_STATE).relative_bias > 1e-2
    assert batch_moments(_toy([0.1, 0.3, 0.6, 0.9]), "ebpo", 3, 3,
                         state=EBPO_STATE).relative_bias < 1e-12


def test_ebpo_shrinkage_and_welford_update_by_hand():
    """The advantage against a loop over responses (the empirical-Bayes factor from the pooled
    within-variance, the same for every response: a constant group still gets lam (r - mu));
    the state after two steps against NumPy's mean and variance of every past group mean (not
    of the rewards: that rival differs) and the mean of their within-group variances."""
    est = ebpo()
    rng = np.random.default_rng(0)
    z = rng.normal(size=(4, 5))
    n, mu, m2, sw = (float(a) for a in EBPO_STATE)
    w, tau2 = sw / 4, m2 / (n - 1) - sw / 5
    lam = w / (w + tau2)
    want = np.empty_like(z)
    for b in range(4):
        for i in range(5):
            want[b, i] = z[b, i] - ((1 - lam) * np.delete(z[b], i).mean() + lam * mu)
    got = np.asarray(est(z, PromptContext(state=EBPO_STATE)))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    const = np.asarray(est(jnp.ones(5), PromptContext(state=EBPO_STATE)))
    np.testing.assert_allclose(const, lam * (1 - mu), rtol=1e-12)  # leave-one-out: 0
    st = est.initial_state(3)
    seen, var = [], []
    for step in range(2):
        zz = rng.normal(size=(3, 4))
        seen += list(zz.mean(axis=1))
        var += list(zz.var(axis=1, ddof=1))
        st = est.next_state(st, jnp.arange(3), jnp.asarray(zz))
    assert float(st[0]) == 6 and float(st[1]) == pytest.approx(np.mean(seen), rel=1e-12)
    assert float(st[2]) / 5 == pytest.approx(np.var(seen, ddof=1), rel=1e-12)
    assert abs(float(st[2]) / 5 - np.var(np.r_[zz], ddof=1)) > 1e-3
    assert float(st[3]) == pytest.approx(np.mean(var), rel=1e-12)
    # before two past values the prior is unused: plain leave-one-out
    np.testing.assert_allclose(np.asarray(est(z, PromptContext(state=est.initial_state(1)))),
                               np.asarray(get_estimator("grpo")(z)), atol=1e-12)


def test_dbb_is_a_given_baseline_and_tracks_every_response():
    """Given the tracker DBB's MSE is that of the prompt baseline alpha/(alpha+beta); the update
    takes every response of a prompt (SPO's last-response rule is the rival) once per step."""
    a, b = (np.asarray(v) for v in DBB_STATE)
    given = batch_moments(_mixed(), prompt_baseline(a / (a + b)), 3, 2)
    bm = batch_moments(_mixed(), "dbb", 3, 2, state=DBB_STATE)
    assert bm.mse == pytest.approx(given.mse, rel=1e-12)
    x = jnp.asarray([1, 0, 1])
    z = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    st = dbb(rho=0.8).next_state(DBB_STATE, x, jnp.asarray(z))
    np.testing.assert_allclose(np.asarray(st[0]), [0.8 * 2 + 1, 0.8 * 0.5 + 4], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(st[1]), [0.8 * 1 + 2, 0.8 * 3 + 2], rtol=1e-12)
    spo_like = 0.8 * 0.5 + z[2, -1]
    assert abs(float(st[0][1]) - spo_like) > 1


def test_kae_smoothing_by_hand_and_window_update():
    est = kae(bandwidth=1.5, window=3, mix=0.25)
    z = np.array([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
    x = jnp.asarray([1, 0])
    got = np.asarray(est(z, PromptContext(prompt=x, state=KAE_STATE)))
    m, s, t = (np.asarray(v) for v in KAE_STATE)
    for b, p in enumerate([1, 0]):
        k = np.where(s[p] >= 0, np.exp(-0.5 * ((t - s[p]) / 1.5) ** 2), 0.0)
        smooth = (k @ m[p]) / k.sum()
        loo = (z[b].sum() - z[b]) / 3
        np.testing.assert_allclose(got[b], z[b] - (0.75 * loo + 0.25 * smooth), rtol=1e-12)
    st = est.next_state(KAE_STATE, jnp.asarray([1]), jnp.asarray(z[:1]))
    np.testing.assert_allclose(np.asarray(st[0])[1], [0.9, 0.6, 0.75])
    np.testing.assert_allclose(np.asarray(st[1])[1], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(np.asarray(st[0])[0], np.asarray(KAE_STATE[0])[0])
    assert float(st[2]) == 4.0
    # no history: plain leave-one-out
    fresh = est(z, PromptContext(prompt=x, state=est.initial_state(2)))
    np.testing.assert_allclose(np.asarray(fresh), np.asarray(get_estimator("grpo")(z)), atol=1e-12)


@pytest.mark.parametrize("name,state,G", [("ebpo", EBPO_STATE, 3), ("kae", KAE_STATE, 3)])
def test_monte_carlo_covers_the_exact_mse_given_the_state(name, state, G):
    bandit = _toy([0.2, 0.7])
    est = at_state(get_estimator(name), state)
    exact = batch_moments(bandit, est, G, 2).mse
    mc = mc_mse(bandit, est, G, 2, n_reps=40_000, seed=3)
    rival = batch_moments(bandit, "grpo", G, 2).mse
    assert abs(mc.value - exact) <= 4 * mc.se
    assert abs(mc.value - rival) > 4 * mc.se


def test_training_threads_the_history_states():
    import grpo_theory as gt

    for name in ("ebpo", "dbb", "kae"):
        r = gt.train(_toy([0.3, 0.6]), name, 2, 3, 3, eta=0.5, seeds=[0])
        assert np.all(np.isfinite(np.asarray(r.objective))), name


# --- BASIS: one response a prompt, the other prompts as the baseline ----------------------------


@pytest.mark.parametrize("G,B", [(1, 2), (2, 3), (1, 4)])
def test_basis_pooled_route_equals_counts_and_brute_force(G, B):
    toy = _toy([0.1, 0.4, 0.8])
    for name in ("basis", "basis_self_inclusive"):
        a = batch_moments(toy, name, G, B, route="counts")
        b = batch_moments(toy, name, G, B, route="pooled")
        assert b.mse == pytest.approx(a.mse, rel=1e-12)
        np.testing.assert_allclose(b.prompt_means, a.prompt_means, rtol=1e-11, atol=1e-15)
        if G * B <= 4:
            mean, mse = enumerated_moments(toy, name, G, B)
            assert a.mse == pytest.approx(mse, rel=1e-10)
    assert batch_moments(toy, "basis", G, B).relative_bias < 1e-12
    assert batch_moments(toy, "basis_self_inclusive", G, B).relative_bias > 1e-2


def test_basis_pooled_form_is_the_estimator_and_refuses_one_prompt():
    for est in (basis(), basis(self_inclusive=True)):
        z = np.random.default_rng(1).normal(size=(2, 5, 3))
        full = np.asarray(est(z))
        t = np.asarray(est.pooled.statistic(z))
        for x in range(5):
            others = t.sum(axis=1) - t[:, x]
            np.testing.assert_allclose(np.asarray(est.pooled.advantage(z[:, x], others, 4)),
                                       full[:, x], rtol=1e-12)
    with pytest.raises(ValueError, match="batch_size >= 2"):
        get_estimator("basis")(np.ones((1, 3)))


def test_basis_monte_carlo_at_a_batch_the_counts_route_cannot_reach():
    """B = 16 single responses: Monte Carlo covers the pooled route's MSE; no baseline's MSE
    (the rival law) lies outside."""
    toy = _toy([0.1, 0.3, 0.6, 0.9])
    exact = batch_moments(toy, "basis", 1, 16, route="pooled").mse
    mc = mc_mse(toy, "basis", 1, 16, n_reps=40_000, seed=5)
    rival = batch_moments(toy, "vanilla", 1, 16).mse
    assert abs(mc.value - exact) <= 4 * mc.se
    assert abs(mc.value - rival) > 4 * mc.se


@pytest.mark.parametrize("bad,msg", [(dict(rho=0.0), "rho"), (dict(rho=1.5), "rho"),
                                     (dict(alpha0=-1.0), "alpha0"), (dict(beta0=True), "beta0")])
def test_dbb_validates(bad, msg):
    with pytest.raises(ValueError, match=msg):
        dbb(**bad)


@pytest.mark.parametrize("bad,msg", [(dict(bandwidth=0.0), "bandwidth"), (dict(window=0), "window"),
                                     (dict(window=2.0), "window"), (dict(mix=1.5), "mix")])
def test_kae_validates(bad, msg):
    with pytest.raises(ValueError, match=msg):
        kae(**bad)


def test_stateful_ones_name_a_missing_state_and_at_state_needs_one():
    with pytest.raises(ValueError, match="PromptContext.state"):
        get_estimator("ebpo")(np.ones((2, 3)))
    with pytest.raises(ValueError, match="PromptContext.prompt"):
        get_estimator("dbb")(np.ones((2, 3)), PromptContext(state=DBB_STATE))
    with pytest.raises(ValueError, match="carries no state"):
        at_state(get_estimator("grpo"), None)
    with pytest.raises(ValueError, match="self_inclusive"):
        ebpo(self_inclusive="yes")
