"""Named example problems shared by the drivers, tests and notebooks (all seeded, float64)."""

from __future__ import annotations

import jax
import numpy as np

from ._validation import positive_int, seed_key
from .core.policies import LinearSoftmaxBandit, SequencePolicy, SoftmaxBandit

__all__ = ["default_bandit", "linear_bandit", "sequence_policy"]


def default_bandit(seed: int = 2024, n_prompts: int = 4, n_responses: int = 6) -> SoftmaxBandit:
    """A tabular softmax bandit with Gaussian logits (scale 1.5) and uniform reward means."""
    n_prompts, n_responses = positive_int("n_prompts", n_prompts), positive_int("n_responses",
                                                                                n_responses)
    k1, k2 = jax.random.split(seed_key(seed))
    logits = 1.5 * np.asarray(jax.random.normal(k1, (n_prompts, n_responses)))
    means = np.asarray(jax.random.uniform(k2, (n_prompts, n_responses)))
    return SoftmaxBandit(logits, means)


def linear_bandit(seed: int = 7, n_prompts: int = 6, n_responses: int = 5,
                  dim: int = 4) -> LinearSoftmaxBandit:
    """Prompts share a d-dimensional parameter: logits = features @ theta; binary rewards."""
    n_prompts, n_responses = positive_int("n_prompts", n_prompts), positive_int("n_responses",
                                                                                n_responses)
    dim = positive_int("dim", dim)
    k1, k2, k3 = jax.random.split(seed_key(seed), 3)
    feats = np.asarray(jax.random.normal(k1, (n_prompts, n_responses, dim)))
    theta = 0.5 * np.asarray(jax.random.normal(k2, (dim,)))
    means = np.asarray(jax.random.bernoulli(k3, 0.4, (n_prompts, n_responses)), dtype=float)
    return LinearSoftmaxBandit(feats, theta, means)


def sequence_policy(seed: int = 11, n_prompts: int = 3, vocab_size: int = 2,
                    horizon: int = 4) -> SequencePolicy:
    """Tabular autoregressive policy with EOS; reward mean rises with the count of token 1."""

    def reward(prompt, tokens, length):
        body = tokens[(tokens >= 0) & (tokens < vocab_size)]
        return float(np.clip(0.15 + 0.2 * np.sum(body == 1) - 0.05 * prompt, 0.0, 1.0))

    n_prompts = positive_int("n_prompts", n_prompts)
    vocab_size, horizon = positive_int("vocab_size", vocab_size), positive_int("horizon", horizon)
    params = 0.8 * np.asarray(jax.random.normal(
        seed_key(seed), (n_prompts, horizon, vocab_size + 1, vocab_size + 1)))
    return SequencePolicy(params, reward, vocab_size, horizon, eos=True)


from ._precision import scope_module as _scope  # noqa: E402

_scope(globals())
