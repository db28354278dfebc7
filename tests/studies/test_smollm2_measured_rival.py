"""GRPO's law against its rival on measured groups, and the power plan, on synthetic tables.

Groups are synthesised so that GRPO's budget MSE ``N MSE(G) = G (E||ghat_1||^2 - ||grad J||^2)``
has a chosen mean at each G: every group has one rewarded response (``k = 1``, so
``ghat = S_1 / G`` when ``S_0 = 0``) and ``S_1.S_1`` drawn with mean ``G target_G``; the batch
Gram matrix is zero (``||grad J||^2 = 0``). Drawn at the law, the check must exclude the rival;
drawn at the rival, it must not (and must reject the law instead).
"""

import numpy as np
import pandas as pd
import pytest

from grpo_theory.studies.smollm2 import measured_rival as R
from grpo_theory.studies.smollm2 import measured_stats as M

THETA = np.array([500.0, 6800.0, 6600.0, 2700.0, 170.0])
COV = np.diag([140.0, 600.0, 620.0, 350.0, 26.0]) ** 2
K = 16


def _groups(targets, n_groups, seed, shape=4.0):
    """Groups whose GRPO ``N MSE(G)`` has mean ``targets[G]`` (gamma noise, ``shape``)."""
    rng = np.random.default_rng(seed)
    rows = []
    for G, t in targets.items():
        s11 = rng.gamma(shape, G * t / shape, n_groups)
        rows += [dict(G=G, j=j, batch=j % K, k=1, vhat=0.5, s11=s, s10=0.0, s00=0.0)
                 for j, s in enumerate(s11)]
    return pd.DataFrame(rows)


def _run(rival: bool, seed: int, n_groups=600, Gs=(2, 3, 4)):
    targets = {G: float(R.law_weights(G, rival) @ THETA) for G in Gs}
    g = _groups(targets, n_groups, seed)
    Gv, y, cov = R.budget_mse_replicates(g, np.zeros((K, K)), K)
    return R.run_entries(f"seed {seed}", Gv, y, cov, [n_groups * G for G in Gv])


def test_law_weights_and_their_difference():
    for G in (2, 3, 4, 8):
        d = (R.law_weights(G) - R.law_weights(G, rival=True)) @ THETA
        assert d == pytest.approx(THETA[2] / (G * (G - 1)))
    with pytest.raises(ValueError, match="G must be >= 2"):
        R.law_weights(1)


def test_replicates_agree_with_budget_differences():
    """y and its jackknife covariance give budget_differences' difference and se (the shared
    ||grad J||^2 included: a covariance-free se, sqrt(se_G^2 + se_ref^2), would differ)."""
    rng = np.random.default_rng(0)
    g = _groups({2: 14000.0, 4: 11000.0, 8: 12000.0}, 64, 1)
    g["k"] = rng.integers(0, 3, len(g)).clip(max=g.G)
    g["s00"], g["s10"] = rng.gamma(3, 500, len(g)), rng.normal(0, 50, len(g))
    A = rng.normal(0, 3, (K, 40)) + 2.0
    gram = A @ A.T
    Gs, y, cov = R.budget_mse_replicates(g, gram, K)
    d = M.budget_differences(g, gram, K, "grpo", 4)
    for i, G in enumerate(Gs):
        r = d[d.G == G].iloc[0]
        assert y[i] - y[1] == pytest.approx(r.difference)
        se = np.sqrt(cov[i, i] + cov[1, 1] - 2 * cov[i, 1])
        assert se == pytest.approx(r.se, abs=1e-6 * abs(r.difference) + 1e-9)
    naive = np.sqrt(cov[0, 0] + cov[1, 1])
    assert abs(naive - d[d.G == 2].se.iloc[0]) > 1e-3 * naive


def test_the_check_excludes_the_rival_at_the_law_and_not_at_the_rival():
    for seed in (1, 2, 3):
        law = R.rival_check([_run(False, seed)], THETA, COV)
        c = law[law.run == "combined"].iloc[0]
        assert c.rival_excluded and c.z_rival >= 3 and abs(c.z_law) < 3
        assert c.expected_z_rival >= 3
        riv = R.rival_check([_run(True, seed)], THETA, COV)
        c = riv[riv.run == "combined"].iloc[0]
        assert not c.rival_excluded and abs(c.z_rival) < 3 and c.z_law <= -3


def test_independent_runs_pool_and_add_their_evidence():
    """Two runs (own seeds) pool per G by inverse variance; combined, they separate more than
    either alone; the constants' error widens the total se."""
    a, b = _run(False, 5, n_groups=150), _run(False, 6, n_groups=150, Gs=(2, 3))
    one = R.rival_check([a], THETA, COV)
    both = R.rival_check([a, b], THETA, COV)
    p = both[(both.run == "pooled") & (both.G == 2)].iloc[0]
    w = 1 / np.array([a["cov"][0, 0], b["cov"][0, 0]])
    assert p.measured == pytest.approx((w @ [a["y"][0], b["y"][0]]) / w.sum())
    assert p.se == pytest.approx(1 / np.sqrt(w.sum()))
    assert p.responses == 600
    assert set(both[both.run == "pooled"].G) == {2, 3}
    ce, cb = (t[t.run == "combined"].iloc[0] for t in (one, both))
    assert cb.expected_z_rival > ce.expected_z_rival
    assert (both.se_rival_total >= both.se).all() and (both.se_law_total >= both.se).all()
    sep = R.pooled_difference([a, b], 2, 4, THETA)
    assert sep["predicted"] == pytest.approx(THETA[0] * -2 + THETA[2] * (1 - 1 / 3))
    assert sep["se"] > 0 and sep["responses"] == 600
    with pytest.raises(ValueError, match="G = 5"):
        R.pooled_difference([a, b], 5, 4)


def test_plan_on_synthetic_numbers():
    """d = c3/2 = 1 at G = 2 and se 0.5 at 100 responses (v = 25): E z = sqrt(100/25) = 2, and
    3 se needs 9 v / d^2 = 225 responses, 125 more (the rival rule responses (3 se / d) linear
    in se would give 150). G = 3 takes v interpolated in log G between G = 2 and 4."""
    plan = R.rival_plan([2, 4], [0.5, 0.2], [100, 100], c3=2.0, new_Gs=(2, 3), target=3.0,
                        seconds_per_sample=0.5, n_value=1)
    r2 = plan[plan.design == "G = 2 alone"].iloc[0]
    assert r2.pilot_z == pytest.approx(2.0) and r2.added_per_G == 125
    assert r2.sampled == np.ceil(125 * 3 / 2) and r2.minutes == pytest.approx(125 * 1.5 * 0.5 / 60)
    r3 = plan[plan.design == "G = 3 alone"].iloc[0]
    t = np.log(1.5) / np.log(2)
    v3 = np.exp((1 - t) * np.log(25.0) + t * np.log(4.0))
    assert r3.v == pytest.approx(v3) and r3.d == pytest.approx(1 / 3)
    assert r3.added_per_G == np.ceil(9 * v3 * 9)
    # the pilot plus a run at G = 2, 3: z_p^2 + R (d_2^2/v_2 + d_3^2/v_3) = 9
    zp2 = 100 / 25 + 100 * (1 / 6) ** 2 / 4
    both = plan[plan.design.str.startswith("the pilot plus")].iloc[0]
    assert both.pilot_z == pytest.approx(np.sqrt(zp2))
    assert both.added_per_G == np.ceil((9 - zp2) / (1 / 25 + (1 / 9) / v3))
    doubled = R.rival_plan([2, 4], [1.0, 0.2], [100, 100], c3=2.0)
    assert doubled[doubled.design == "G = 2 alone"].added_per_G.iloc[0] == 9 * 100 - 100


def test_bad_inputs_raise_value_errors():
    with pytest.raises(ValueError, match="outside the pilot"):
        R.per_response_variance([2, 4], [1.0, 1.0], [10, 10], 8)
    with pytest.raises(ValueError, match="theta"):
        R.rival_check([_run(False, 1, n_groups=40)], THETA[:3], COV)
    with pytest.raises(ValueError, match="runs"):
        R.rival_check([], THETA, COV)
    with pytest.raises(ValueError, match="match"):
        R.run_entries("x", [2, 3], [1.0], np.eye(2), [1, 1])
    with pytest.raises(ValueError, match="c3"):
        R.rival_plan([2, 4], [1.0, 1.0], [10, 10], c3=-1.0)
    with pytest.raises(ValueError, match="one entry per G"):
        R.rival_plan([2, 4], [1.0], [10, 10], c3=1.0)
