"""BASIS's exact MSE in closed form (core/cross_prompt.py): equal to the exact pooled route at
finite B and G, G = 1 and B = 2 included; the rival that drops the two finite-B terms is far
off; the form's weights and its refusals."""

import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory.core import BASIS_PIECES, basis_pieces, batch_moments, scaling_constants
from grpo_theory.problems import scaling_family_bandit

BANDIT = gt.SoftmaxBandit([[0.0, 1.0, -1.0], [0.5, 0.0, 0.0]],
                          [[1.0, 0.0, 0.5], [0.2, 0.9, 0.0]])
SIZES = ((2, 1), (2, 3), (4, 1))  # (B, G)


def _without_finite_batch(p, B, G):
    """The rival: ``c1/B + c_J/(BG)``, the two terms of the baseline's own error dropped."""
    return p.c1 / B + p.c_j / (B * G)


def test_closed_form_equals_the_exact_pooled_route():
    # a second problem of the same shape: the compiled routes serve both
    for problem in (BANDIT, gt.SoftmaxBandit.random(0, 2, 3)):
        p = basis_pieces(problem)
        for B, G in SIZES:
            exact = batch_moments(problem, "basis", G, B, route="pooled").mse
            assert abs(p.mse(B, G) - exact) <= 1e-10 * exact, (B, G)
            # the rival without the finite-B terms is off by far more than the tolerance
            assert abs(_without_finite_batch(p, B, G) - exact) > 1e-2 * exact, (B, G)


def test_the_weights_are_the_documented_formula():
    B, G = 3.0, 2.0
    form = gt.get_estimator("basis").closed_form
    assert form.pieces == BASIS_PIECES and form.min_batch_size == 2
    c1, cv, g2, jqz, j2q, v2q, s2q = np.eye(7)
    cj = cv - 2 * jqz + j2q
    var_m0 = v2q - j2q + s2q / G
    want = c1 / B + cj / (B * G) + var_m0 / (B * G * (B - 1)) + g2 / (B * (B - 1) * G**2)
    np.testing.assert_allclose(form.mse_weights(B, G), want, rtol=1e-14)
    # at a budget N = B G: N MSE = c1 G + c_J + ((Var V G + E sigma^2) m0 + ||g||^2)/(N - G)
    p = basis_pieces(BANDIT)
    N = 12
    budget = (p.c1 * G + p.c_j + ((p.value_var * G + p.sigma2) * p.score_sq + p.grad_sq)
              / (N - G)) / N
    np.testing.assert_allclose(p.mse(N / G, G), budget, rtol=1e-12)
    np.testing.assert_allclose(p.vector()[5] - p.vector()[4], p.value_var * p.score_sq,
                               rtol=1e-12)


def test_bad_sizes_and_the_biased_rival_are_refused():
    form = gt.get_estimator("basis").closed_form
    with pytest.raises(ValueError, match="batch_size must be >= 2"):
        form.mse_weights(1, 4)
    with pytest.raises(ValueError, match="group_size must be > 0"):
        form.mse_weights(2, 0)
    assert gt.get_estimator("basis_self_inclusive").closed_form is None
    with pytest.raises(ValueError, match="couple the prompts"):  # no per-prompt route
        gt.exact_mse(BANDIT, "basis", 2, 2)


def test_the_best_group_size_at_a_budget_is_one_on_the_scaling_family():
    """The closed form's integer argmin over G in [1, N/2] at N = 256 (B = N/G >= 2) is G = 1 on
    the largest and the smallest reward gap of the ``pooled_basis`` study, as its exact pooled
    route found; leave-one-out's best G on the same member is larger (the rival: GRPO's law)."""
    N = 256
    G = np.arange(1, N // 2 + 1, dtype=np.float64)
    for delta in (0.5, 0.0055):
        bandit = scaling_family_bandit(delta)
        assert int(G[np.argmin(basis_pieces(bandit).mse(N / G, G))]) == 1, delta
    loo = scaling_constants(bandit).mse(N / G[1:], G[1:])
    assert int(G[1:][np.argmin(loo)]) > 2
