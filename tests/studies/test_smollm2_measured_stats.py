"""The measured-MSE statistics of the SmolLM2 measurement, on a bandit whose MSE is exact.

Groups are simulated from a tabular softmax bandit with binary rewards (a prompt drawn
uniformly, G responses, m more for the oracle's value), reduced to exactly what the real run
keeps (the 2 x 2 Gram entries of ``S_1``, ``S_0`` and the batch sums of the vanilla vectors),
and measured by :mod:`grpo_theory.studies.smollm2.measured_stats`. The measurement must agree
with :func:`grpo_theory.core.exact_mse` within its standard errors, and must reject the rival
law that drops the U-statistic term ``c3 / (G - 1)`` (GRPO measured against the oracle's MSE).
"""

import numpy as np
import pandas as pd
import pytest

from grpo_theory.core import SoftmaxBandit, exact_mse
from grpo_theory.core.estimators import compute_advantages
from grpo_theory.studies.smollm2 import measured_stats as M

GS = (2, 4, 8)
K = 20
M_VALUE = 3


@pytest.fixture(scope="module")
def bandit():
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 1.2, (5, 4))
    rewards = (rng.uniform(size=(5, 4)) < 0.5).astype(float)
    rewards[:, 0], rewards[:, 1] = 1.0, 0.0  # every prompt has both rewards
    return SoftmaxBandit(logits, rewards)


def _simulate(bandit, n_groups, seed):
    """Groups as the real run stores them (Gram entries, batch sums of vanilla vectors)."""
    from grpo_theory.core.problem import as_problem

    p = as_problem(bandit)
    probs, scores, mu = (np.asarray(p.probs), np.asarray(p.scores), np.asarray(p.reward_means))
    rng = np.random.default_rng(seed)
    D = scores.shape[-1]
    sums, counts, rows = np.zeros((K, D)), np.zeros(K, int), []
    for G in GS:
        for j in range(n_groups[G]):
            x = rng.integers(probs.shape[0])
            y = rng.choice(probs.shape[1], G + M_VALUE, p=probs[x])
            r = mu[x, y]
            s = scores[x, y[:G]]
            s1, s0 = s[r[:G] == 1].sum(0), s[r[:G] == 0].sum(0)
            b = j % K
            sums[b] += s1 / G
            counts[b] += 1
            rows.append(dict(G=G, j=j, batch=b, k=int(r[:G].sum()), vhat=r[G:].mean(),
                             s11=s1 @ s1, s10=s1 @ s0, s00=s0 @ s0))
    means = sums / counts[:, None]
    return pd.DataFrame(rows), means @ means.T, p


def _exact(bandit, p, e, G):
    if e != "oracle_hat":
        return exact_mse(bandit, e, G, 1)
    v = np.asarray(p.values())
    extra = np.mean(v * (1 - v) * np.asarray(p.mean_score_sq_norm())) / (M_VALUE * G)
    return exact_mse(bandit, "oracle", G, 1) + extra


def test_coefficients_are_the_registry_estimators():
    """``a S_1 + b S_0`` equals ``(1/G) sum A_i s_i`` with the registry's advantages."""
    rng = np.random.default_rng(0)
    for G in (2, 3, 5, 8):
        z = (rng.uniform(size=G) < 0.5).astype(float)
        s = rng.normal(size=(G, 7))
        S1, S0 = s[z == 1].sum(0), s[z == 0].sum(0)
        for name, e, ctx in (("vanilla", "vanilla", {}), ("grpo", "grpo", {}),
                             ("oracle_hat", "oracle", dict(vhat=0.3))):
            a, b = M.coefficients(name, G, z.sum(), ctx.get("vhat"))
            adv = np.asarray(compute_advantages(e, z, value=0.3 if e == "oracle" else None))
            np.testing.assert_allclose(a * S1 + b * S0, adv @ s / G, atol=1e-12)
    with pytest.raises(ValueError, match="estimator"):
        M.coefficients("grpo_std", 4, 1)
    with pytest.raises(ValueError, match="vhat"):
        M.coefficients("oracle_hat", 4, 1)


def test_u_statistic_is_unbiased_and_refuses_one_batch():
    rng = np.random.default_rng(1)
    g = np.array([1.0, -2.0, 0.5])
    est = []
    for _ in range(4000):
        T = g + rng.normal(size=(6, 3))
        est.append(M.u_statistic(T @ T.T))
    assert abs(np.mean(est) - g @ g) < 4 * np.std(est) / np.sqrt(len(est))
    with pytest.raises(ValueError, match="two distinct"):
        M.u_statistic(np.eye(3), [1, 1, 1])


def test_measured_mse_agrees_with_exact_and_rejects_the_iid_law(bandit):
    groups, gram, p = _simulate(bandit, {2: 6000, 4: 3000, 8: 1500}, seed=6)
    var = M.measured_group_variance(groups, gram, K)
    assert set(var.estimator) == set(M.ESTIMATORS) and set(var.G) == set(GS)
    J = float(np.sum(np.asarray(p.gradient()) ** 2))
    assert abs(var.grad_norm_sq.iloc[0] - J) < 4 * var.grad_norm_sq_se.iloc[0]
    for r in var.itertuples():
        exact = _exact(bandit, p, r.estimator, r.G)
        assert abs(r.group_mse - exact) < 4 * r.se, (r.estimator, r.G, r.group_mse, exact, r.se)
    # the rival: GRPO's MSE without its c3 / (G - 1) term (the oracle's) is rejected at G = 2
    g2 = var[(var.estimator == "grpo") & (var.G == 2)].iloc[0]
    assert abs(g2.group_mse - exact_mse(bandit, "oracle", 2, 1)) > 6 * g2.se
    # differences of the budget MSE: G v_G - 4 v_4, and the exact one within its se
    d = M.budget_differences(groups, gram, K, "grpo", 4).set_index("G")
    v = var[var.estimator == "grpo"].set_index("G").group_mse
    assert d.loc[2, "difference"] == pytest.approx(2 * v[2] - 4 * v[4])
    assert d.loc[4, "difference"] == 0 and d.loc[8, "se"] > 0
    exact_d = 2 * exact_mse(bandit, "grpo", 2, 1) - 4 * exact_mse(bandit, "grpo", 4, 1)
    assert abs(d.loc[2, "difference"] - exact_d) < 4 * d.loc[2, "se"]
    with pytest.raises(ValueError, match="reference"):
        M.budget_differences(groups, gram, K, "grpo", 3)
    tab = M.measured_mse_table(var, (8, 16))
    assert set(zip(tab.N, tab.G)) == {(8, 2), (8, 4), (8, 8), (16, 2), (16, 4), (16, 8)}
    row = tab[(tab.N == 16) & (tab.G == 4) & (tab.estimator == "grpo")].iloc[0]
    v4 = var[(var.estimator == "grpo") & (var.G == 4)].iloc[0]
    assert row.B == 4 and row.mse == pytest.approx(v4.group_mse / 4)
    assert row.se == pytest.approx(v4.se / 4)


def test_bootstrap_argmin_finds_a_clear_minimum():
    """Synthetic Gram entries whose budget MSE ``G var_G`` is smallest at G = 4."""
    rng = np.random.default_rng(2)
    true = {2: 10.0, 4: 3.0, 8: 2.0}  # G var: 20, 12, 16
    rows = []
    for G, v in true.items():
        for j in range(400):
            # vanilla only: ||ghat||^2 = s11 / G^2; choose s11 so its mean is G^2 (v + J)
            rows.append(dict(G=G, j=j, batch=j % 10, k=1, vhat=0.5,
                             s11=G * G * (v + 1.0) * rng.exponential(), s10=0.0, s00=0.0))
    groups = pd.DataFrame(rows)
    gram = np.ones((10, 10))  # ||grad J||^2 = 1
    arg = M.bootstrap_argmin(groups, gram, 10, n_boot=300)
    van = arg[arg.estimator == "vanilla"].iloc[0]
    assert van["argmin"] == 4 and van.share_4 > 0.8 and van.G_low <= 4 <= van.G_high


def test_oracle_hat_extra_is_unbiased_for_v_one_minus_v():
    rng = np.random.default_rng(4)
    V_true = np.array([0.2, 0.5, 0.9])
    s2 = np.array([1.0, 2.0, 3.0])
    vals = [M.oracle_hat_extra((rng.uniform(size=(3, 6)) < V_true[:, None]).astype(float), s2,
                               2)[0] for _ in range(3000)]
    assert np.mean(vals) == pytest.approx(np.mean(V_true * (1 - V_true) * s2) / 2, rel=0.03)
