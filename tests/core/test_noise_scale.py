"""GRPO's noise scale: exact against the binary route's MSE and against brute-force enumeration
of one response's term; the iid noise scale is shown to differ (the check fails on it)."""

import itertools

import numpy as np
import pytest

from grpo_theory.core import (LinearSoftmaxBandit, SoftmaxBandit, exact_mse, noise_scale,
                              scaling_constants)
from grpo_theory.core.noise import grpo_noise_scale

BANDIT = SoftmaxBandit([[0.0, 1.0, -1.0], [0.5, 0.0, 0.0]], [[1.0, 0.0, 0.5], [0.2, 0.9, 0.0]])
LINEAR = LinearSoftmaxBandit(np.array([[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]],
                                       [[0.2, -1.0], [1.0, 0.3], [0.0, 0.0]]]),
                             np.array([0.3, -0.4]), [[0.9, 0.1, 0.4], [0.3, 0.6, 0.0]],
                             prompt_probs=[0.3, 0.7])


def _brute_force(problem, G):
    """E u and E||u||^2 of one response's term u = (Z_1 - mean(Z_2..Z_G)) s_1, by enumerating
    every (responses, rewards) outcome of a group (independent of the package's moments)."""
    dp = problem.problem(problem.params)
    pi, mu = np.asarray(dp.probs), np.asarray(dp.reward_means)
    s = np.asarray(dp.scores)  # (P, K, D)
    f = np.asarray(dp.prompt_probs)
    P, K = pi.shape
    mean, second, grad = 0.0, 0.0, 0.0
    for x in range(P):
        for ys in itertools.product(range(K), repeat=G):
            p_y = np.prod(pi[x, list(ys)])
            for zs in itertools.product((0, 1), repeat=G):
                p = p_y * np.prod([mu[x, y] if z else 1 - mu[x, y] for y, z in zip(ys, zs)])
                u = (zs[0] - np.mean(zs[1:])) * s[x, ys[0]]
                mean = mean + f[x] * p * u
                second = second + f[x] * p * (u @ u)
        grad = grad + f[x] * (pi[x] * mu[x]) @ s[x]
    return mean, second, grad


@pytest.mark.parametrize("problem", [BANDIT, LINEAR], ids=["tabular", "linear"])
@pytest.mark.parametrize("G", [2, 3, 4])
def test_both_scales_equal_their_definitions(problem, G):
    ns = noise_scale(problem, G)
    # B_noise: the budget N at which the exact MSE (the binary route, coded apart) is ||grad J||^2
    for B in (1, 3):
        mse = exact_mse(problem, "grpo", group_size=G, batch_size=B, method="binary")
        assert ns.mse(B * G) == pytest.approx(mse, rel=1e-10)
        assert ns.grpo == pytest.approx(B * G * mse / ns.grad_norm_sq, rel=1e-10)
    # B_iid: tr Cov(u) / ||grad J||^2 by enumeration; E u is grad J (leave-one-out is unbiased)
    mean, second, grad = _brute_force(problem, G)
    np.testing.assert_allclose(mean, grad, atol=1e-12)
    assert ns.grad_norm_sq == pytest.approx(grad @ grad, rel=1e-10)
    assert ns.iid == pytest.approx((second - grad @ grad) / (grad @ grad), rel=1e-10)


@pytest.mark.parametrize("G", [2, 4, 8, 32])
def test_the_iid_scale_misses_the_group_covariance(G):
    """The rival: the iid scale in place of GRPO's fails the MSE identity, by exactly the
    within-group term (c1 (G - 1) + E||g(X)||^2/(G - 1)) / ||grad J||^2, which grows with G."""
    ns = noise_scale(BANDIT, G)
    c = scaling_constants(BANDIT)
    e_g2 = ns.grad_norm_sq + c.c1  # E_X||g(X)||^2
    gap = (c.c1 * (G - 1) + e_g2 / (G - 1)) / ns.grad_norm_sq
    assert ns.grpo - ns.iid == pytest.approx(gap, rel=1e-10)
    mse = exact_mse(BANDIT, "grpo", group_size=G, batch_size=1)
    assert abs(ns.grad_norm_sq * ns.iid / G - mse) > 0.05 * mse
    assert ns.iid_ratio < 1 and ns.prompts == pytest.approx(ns.grpo / G)
    assert ns.constants == c


def test_the_formula_is_the_scaling_law_and_bad_input_is_named():
    c = scaling_constants(BANDIT)
    ns = noise_scale(BANDIT, 5)
    assert float(grpo_noise_scale(c.c1, c.c2, c.c3, ns.grad_norm_sq, 5)) == pytest.approx(ns.grpo)
    with pytest.raises(ValueError, match="group_size"):
        noise_scale(BANDIT, 1)
    flat = SoftmaxBandit(np.zeros((2, 3)), [[0.5, 0.5, 0.5], [0.2, 0.2, 0.2]])
    with pytest.raises(ValueError, match="zero policy gradient"):
        noise_scale(flat, 4)
    with pytest.raises(ValueError, match="budget"):
        ns.mse(0)


def test_the_estimate_from_rollouts_covers_the_exact_scale_and_refuses_the_iid_one():
    """From 400 prompts x 8 sampled responses (three fixed keys): the exact B_noise lies within
    3 standard errors of the estimate at every G; the iid scale, the rival, lies beyond 3 at
    G >= 4 (the groups' covariance is what it misses)."""
    import jax

    from grpo_theory.advisor import estimate_scaling_constants

    for seed in range(3):
        est = estimate_scaling_constants(BANDIT, n_prompts=400, n_samples=8,
                                         key=jax.random.PRNGKey(seed))
        for G in (2, 4, 8):
            ns, e = noise_scale(BANDIT, G), est.noise_scale(G)
            assert e.n == 400 and e.se > 0
            assert abs(e.zscore(ns.grpo)) < 3
            if G >= 4:
                assert e.zscore(ns.iid) > 3
    with pytest.raises(ValueError, match="group_size"):
        est.noise_scale(1)


def test_no_estimate_without_a_positive_gradient_estimate():
    from grpo_theory.advisor import estimate_from_rollouts

    scores = np.random.default_rng(0).normal(size=(5, 4, 3))
    est = estimate_from_rollouts(np.zeros((5, 4)), scores=scores)
    with pytest.raises(ValueError, match=r"\|\|grad J\|\|\^2 is 0 \(not positive\)"):
        est.noise_scale(4)


def test_the_docs_table_is_what_its_code_prints():
    """docs/noise-scale.md shows code blocks and their outputs: running each prints its own."""
    import contextlib
    import io
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "noise-scale.md").read_text()
    codes = re.findall(r"```python\n(.*?)```", page, re.S)
    shown = re.findall(r"```text\n(.*?)```", page, re.S)
    assert len(codes) == len(shown) == 2
    for code, text in zip(codes, shown):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/noise-scale.md", "exec"), {})
        assert out.getvalue() == text


def test_a_single_correct_response_gives_c1_and_the_gradient_exactly_zero():
    """One nonzero reward in the whole batch: ||grad J||^2 and c1 are 0 in exact arithmetic
    (no pair of nonzero terms); the rival, the two routes' rounding (here the dot products 1e-7
    off the group norms, as a ghost pass gives them), must not make them a positive c1 and a
    finite G*."""
    from grpo_theory.advisor import estimate_from_rollouts

    rng = np.random.default_rng(3)
    z = np.zeros((6, 4))
    z[2, 1] = 1.0
    sq = rng.uniform(1.0, 2.0, size=(6, 4))
    mean_sq = np.zeros(6)
    mean_sq[2] = sq[2, 1] / 16
    est = estimate_from_rollouts(z, sq_norms=sq, mean_sq=mean_sq, mean_dot=mean_sq * (1 + 1e-7))
    assert est.c1 == 0.0 and est.grad_norm_sq == 0.0 and est.g_star == np.inf
    assert np.all(np.asarray(est.pieces["grad_sq"]) == 0.0)
    # two correct responses in two prompts: the pair term is estimated, not zeroed
    z[4, 0] = 1.0
    mean_sq[4] = sq[4, 0] / 16
    est = estimate_from_rollouts(z, sq_norms=sq, mean_sq=mean_sq, mean_dot=mean_sq * (1 + 1e-7))
    assert est.grad_norm_sq != 0.0
