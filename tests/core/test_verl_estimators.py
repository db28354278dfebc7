"""The verl 0.9.1 estimators' own contract, without verl: the context they need is named when
missing or misshapen, and the token-weighted whitening reduces to the fixed-length preset.
(``tests/verl/test_verl_transcriptions.py`` checks them against verl itself.)"""

import jax.numpy as jnp
import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory.core import PromptContext, gdpo, whiten_tokens
from grpo_theory.core import reinforce_baseline


@pytest.mark.parametrize("L", [1, 3])
def test_whitening_at_equal_lengths_is_the_fixed_length_preset(L):
    """Rival: one token per response (L = 1) where responses have 3 tokens differs."""
    z = jnp.asarray(np.random.default_rng(0).uniform(-1, 2, (3, 4)))
    c = z - z.mean(-1, keepdims=True)
    out = gt.get_estimator("reinforce_plus_plus_baseline_verl_tokens")(
        z, PromptContext(length=jnp.full(z.shape, float(L))))
    np.testing.assert_allclose(out, whiten_tokens(c, jnp.full(z.shape, float(L))), rtol=1e-12)
    np.testing.assert_allclose(out, reinforce_baseline("verl", tokens_per_response=L)(z),
                               rtol=1e-12, atol=1e-14)
    if L == 3:
        assert not np.allclose(out, reinforce_baseline("verl", tokens_per_response=1)(z),
                               rtol=1e-6, atol=1e-8)


def test_gpg_scales_by_the_batch_share_of_nonzero_rewards():
    z = jnp.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # 1 nonzero of 6: alpha = 6
    out = gt.get_estimator("gpg_verl")(z)
    np.testing.assert_allclose(out, 6.0 * (z - z.mean(-1, keepdims=True)), rtol=1e-12)


def test_missing_context_is_named():
    z = jnp.array([[1.0, 0.0], [0.0, 0.0]])
    for est, field in [("opo_verl", "length"), ("remax_verl", "greedy_reward"),
                       ("optimal_token_baseline_verl", "score_sq"), ("gdpo_verl", "length")]:
        with pytest.raises(ValueError, match=f"needs PromptContext.{field}"):
            gt.get_estimator(est)(z)
    with pytest.raises(ValueError, match="length must have the rewards' shape"):
        gt.get_estimator("opo_verl")(z, PromptContext(length=jnp.ones(3)))
    with pytest.raises(ValueError, match=r"greedy_reward must have shape \(2,\)"):
        gt.get_estimator("remax_verl")(z, PromptContext(greedy_reward=jnp.ones(3)))
    with pytest.raises(ValueError, match="needs PromptContext.channels"):
        gdpo([1.0, 1.0])(z, PromptContext(length=jnp.ones((2, 2))))
    with pytest.raises(ValueError, match="weights must be None or"):
        gdpo([])
