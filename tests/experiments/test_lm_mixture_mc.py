"""The transformer's fixed-budget MSE with prompts drawn from a mixture
(grpo_theory.experiments.lm_support.mixture_mc): the exact mixture gradient, and the Monte Carlo MSE
against the law (c1 G + c2 + c3/(G-1))/N within a CI sized from the estimated variances, on a tiny
policy (seconds)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_theory.core.montecarlo import summarize_squared_errors
from grpo_theory.experiments.lm_support import mixture_mc as mm
from grpo_theory.lm.training.grpo import exact_answer_quantities
from grpo_theory.lm.policy import LMPolicy
from grpo_theory.lm.task import (EOS, VOCAB_SIZE, encode, encode_prompts, eval_set,
                                 target_responses)

jax.config.update("jax_enable_x64", True)

D = 4


def _apply(params, tokens, prompt_len):
    """Logits = a per-position bias + a prompt-dependent term (mean prompt embedding)."""
    h = params["E"][tokens[:, :prompt_len]].mean(axis=1)  # (N, D)
    return params["b"][None, : tokens.shape[1], :] + (h @ params["W"])[:, None, :]


def _tiny():
    """A policy whose single-digit answers have pass rates of order 0.1-0.5, and questions with
    single-digit answers (the fixed one first)."""
    q = eval_set(n=500)
    q = q.subset(np.flatnonzero((q.answer >= 0) & (q.answer <= 9))[:6])
    plen = encode_prompts(q, "answer").shape[1]
    rng = np.random.default_rng(0)
    b = np.zeros((plen + 8, VOCAB_SIZE), np.float32)
    for a in q.answer:  # the first response token: the questions' answer digits favoured
        b[plen - 1, encode(str(int(a)))[0]] = 4.0 + rng.uniform(0.0, 1.0)
    b[plen, EOS] = 4.0
    params = dict(b=jnp.asarray(b),
                  E=jnp.asarray(rng.normal(0, 1.0, (VOCAB_SIZE, D)), jnp.float32),
                  W=jnp.asarray(rng.normal(0, 0.5, (D, VOCAB_SIZE)), jnp.float32))
    return LMPolicy(params, _apply), q


def test_mixture_gradient_is_the_weighted_sum_of_v_s_star():
    pol, q = _tiny()
    w = mm.mixture_weights(0.5, 1, len(q) - 1)
    assert np.isclose(w.sum(), 1.0) and w[0] == 0.5
    x, canon = encode_prompts(q, "answer"), target_responses(q, "answer")
    v, _, _ = exact_answer_quantities(pol, x, canon)
    assert 0.02 < v.min() and v.max() < 0.9  # the test's policy is not degenerate
    gw, _ = pol.score_contractions(x, canon, (w * v)[None, :])  # sum_x w_x V s*
    np.testing.assert_allclose(mm.mixture_gradient(pol, q, w), gw[0], rtol=1e-5, atol=1e-8)


def test_monte_carlo_mse_matches_the_law():
    pol, q = _tiny()
    fixed, rest = q.subset([0]), q.subset(np.arange(1, len(q)))
    p, n = 0.5, 8
    s2 = {"F": mm.second_moments(pol, fixed, 512, 1), "R": mm.second_moments(pol, rest, 256, 2)}
    pred = mm.mixture_mse_prediction(pol, fixed, rest, p, s2, (n,), (2, 8))
    c = pred["constants"]
    assert c["c1"] > 0 and c["c3"] > 0
    w = mm.mixture_weights(p, 1, len(rest))
    grad = mm.mixture_gradient(pol, q, w)
    for g, key in ((2, 3), (8, 4)):
        e = mm.grpo_mse_replicates(pol, q, w, grad, n, g, 3000, key, block=100)
        mc, se, _, _ = summarize_squared_errors(e)
        ex, ex_se = pred["mse"][(n, g)]
        assert ex_se < 0.05 * ex and se < 0.05 * mc  # a tight test
        assert abs(mc - ex) < 4 * np.hypot(se, ex_se), (g, mc, se, ex, ex_se)
        if g == n:  # B = 1: the prompt term matters; dropping c1 (fixed prompts) is rejected
            ex_no_c1 = ex - c["c1"] * g / n
            assert abs(mc - ex_no_c1) > 4 * np.hypot(se, ex_se), (g, mc, ex_no_c1)


def test_replicates_validate_and_are_reproducible():
    pol, q = _tiny()
    w = mm.mixture_weights(0.0, 1, len(q) - 1)
    grad = mm.mixture_gradient(pol, q, w)
    a = mm.grpo_mse_replicates(pol, q, w, grad, 8, 2, 10, 7, block=5)
    b = mm.grpo_mse_replicates(pol, q, w, grad, 8, 2, 10, 7, block=5)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (10,) and np.all(a >= 0)
    with pytest.raises(ValueError, match="divide"):
        mm.grpo_mse_replicates(pol, q, w, grad, 8, 3, 10, 7)
    with pytest.raises(ValueError, match="grad"):
        mm.grpo_mse_replicates(pol, q, w, grad[:-1], 8, 2, 10, 7)
    with pytest.raises(ValueError, match="weights"):
        mm.grpo_mse_replicates(pol, q, w[:-1], grad, 8, 2, 10, 7)
    with pytest.raises(ValueError, match="p must"):
        mm.mixture_weights(1.5, 1, 3)


def test_driver_points_report_and_spearman_group():
    import pandas as pd

    from grpo_theory.studies import scaling_family as sf
    from grpo_theory.studies.scaling_family.lm_mc import mc_groups, mc_points, mc_report

    rows = [dict(p=p, N=256, G=g, B=256 // g, n_reps=10, mc=m / 256, mc_se=0.01, mc_ci_low=0.0,
                 mc_ci_high=1.0, exact=m / 256, exact_se=0.01, z=0.5, boot_freq=float(g == b),
                 c1=1.0, c2=1.0, c3=1.0, G_pred=gp, G_grid=b, best_G=b, ci_low=b // 2,
                 ci_high=2 * b, advisor_G=gp, advisor_ci_low=1.0, advisor_ci_high=9.0,
                 fixed="1+1", V_fixed=0.5, grad_norm2=1.0)
            for p, gp, b in ((0.0, 3.6, 4), (0.99, 21.0, 16)) for g, m in ((4, 300), (16, 400))]
    t = {"lm_mc": pd.DataFrame(rows)}
    pts = pd.DataFrame(mc_points(t))
    assert list(pts.label) == ["p=0 N=256", "p=0.99 N=256"] and list(pts.best_G) == [4, 16]
    assert list(pts.ci_low) == [2, 8] and list(pts.source) == ["lm:mc", "lm:mc"]
    md = "\n".join(mc_report(t))
    assert "Measured MSE argmin" in md and "4 [2, 8]" in md and "max |z|" in md
    assert mc_groups(pts) == []  # no bandit rows: no joint group
    both = pd.concat([pts, pts.assign(source="mc")])
    assert len(mc_groups(both)) == 1 and len(mc_groups(both)[0][1]) == 4
    assert mc_points({}) == [] and mc_report({"lm_mc": pd.DataFrame()}) == []
    assert sf.SCHEMA["lm_mc"] is not None and "lm_mc" in sf.PARTS
    assert [c.id for c in sf.cells(sf.SETTINGS["full"]) if c.kind == "lm_mc"] == [
        "lm_mc_p0.0", "lm_mc_p0.9", "lm_mc_p0.99"]
