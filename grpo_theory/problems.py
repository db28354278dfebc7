"""Named example problems shared by the drivers, tests and notebooks (all seeded, float64)."""

from __future__ import annotations

from functools import lru_cache

import jax
import numpy as np

from ._validation import positive_int, seed_key
from .core import LinearSoftmaxBandit, SequencePolicy, SoftmaxBandit, exact_objective, maximise
from .optim import GaussianBandit, gaussian_bandit
from ._precision import float64


@float64
def default_bandit(seed: int = 2024, n_prompts: int = 4, n_responses: int = 6) -> SoftmaxBandit:
    """A tabular softmax bandit with Gaussian logits (scale 1.5) and uniform reward means."""
    n_prompts, n_responses = positive_int("n_prompts", n_prompts), positive_int("n_responses",
                                                                                n_responses)
    k1, k2 = jax.random.split(seed_key(seed))
    logits = 1.5 * np.asarray(jax.random.normal(k1, (n_prompts, n_responses)))
    means = np.asarray(jax.random.uniform(k2, (n_prompts, n_responses)))
    return SoftmaxBandit(logits, means)


@float64
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


@float64
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


@float64
def scaling_bandit(delta: float = 0.1) -> LinearSoftmaxBandit:
    """The scaling-law problem (Theorem 7): a linear softmax bandit with an interior maximiser.

    Shared theta in R^2, 4 prompts x 2 responses, rewards Bernoulli(0.5 + delta) for response 0
    and Bernoulli(0.5 - delta) for response 1. Response 0 has feature 8 e1, -4 e1, 6 e2, -3 e2 in
    the four prompts (response 1 has feature 0): prompts pull theta in opposite directions with
    different strengths, so J has an interior maximiser theta* where per-prompt gradients
    disagree (c1 > 0) while their mean is 0. At theta0 = 0 with delta = 0.1, G* is about 6
    (about 8 at theta*). ``delta = 0.5`` (deterministic rewards) is the std-normalisation problem.
    """
    feats = np.zeros((4, 2, 2))
    feats[0, 0], feats[1, 0], feats[2, 0], feats[3, 0] = [8, 0], [-4, 0], [0, 6], [0, -3]
    mu = np.full((4, 2), 0.5 - delta)
    mu[:, 0] = 0.5 + delta
    return LinearSoftmaxBandit(feats, np.zeros(2), mu)


@lru_cache(maxsize=1)
def _scaling_optimum() -> tuple:
    """theta* of :func:`scaling_bandit` (the same for every delta; L-BFGS at delta = 0.5)."""
    b = scaling_bandit(0.5)
    th, _ = maximise(lambda t: exact_objective(b, t), b.params)
    return tuple(float(x) for x in np.ravel(th))


@float64
def scaling_family_bandit(delta: float, at_optimum: bool = True) -> LinearSoftmaxBandit:
    r"""A one-parameter family for the scaling law: :func:`scaling_bandit` with reward gap delta.

    Rewards are Bernoulli(0.5 + delta) for response 0 and Bernoulli(0.5 - delta) for response 1,
    so ``J(theta) = 0.5 - delta + 2 delta E_X[p_X(theta)]`` is affine in delta and the
    maximiser theta* does not move with delta. Why delta moves c3/c1 (Theorem 7): every
    per-prompt gradient ``g(x) = 2 delta grad p_x`` scales with delta, so
    ``c1 = E_X||g(X) - g||^2`` scales as delta^2, while the first term of
    ``c3 = E_X[E[||s||^2|X] sigma^2(X) + ||g(X)||^2]`` keeps the reward variance
    ``sigma^2(x) = 1/4 - delta^2 (2 p_x - 1)^2`` near 1/4 whatever delta. Hence
    c3/c1 grows like 1/delta^2 and ``G* = 1 + sqrt(c3/c1)`` like 1/delta: at theta*,
    delta = 0.5 (deterministic rewards, c3 = 2 E||g(X)||^2 = 2 c1) gives G* = 1 + sqrt(2) and
    delta -> 0 sends G* to infinity (about 1 + 0.70/delta for small delta).

    Args:
        delta: reward gap in (0, 0.5].
        at_optimum: parameters theta* (default) or theta0 = 0.
    Returns:
        A :class:`LinearSoftmaxBandit` (4 prompts x 2 responses, theta in R^2).
    """
    delta = float(delta)
    if not (np.isfinite(delta) and 0.0 < delta <= 0.5):
        raise ValueError(f"delta must lie in (0, 0.5], got {delta!r}")
    b = scaling_bandit(delta)
    return b.with_params(np.asarray(_scaling_optimum())) if at_optimum else b


@float64
def difficulty_policy(seed: int = 5, difficulties=(0.02, 0.25, 0.6, 0.92), horizon: int = 4):
    """A sequence policy (binary vocabulary, EOS, ``horizon`` tokens) whose prompts range from
    nearly always wrong to nearly always right, so many groups have all-equal rewards (zero
    advantage), as in RL on reasoning data; longer responses are slightly more often correct.
    Reward mean = clip(d_x + 0.06 (#token 1) + 0.02 (length - 2), 0, 1)."""
    d = np.asarray(difficulties, dtype=np.float64)

    def reward(prompt, tokens, length):
        body = tokens[(tokens >= 0) & (tokens < 2)]
        return float(np.clip(d[prompt] + 0.06 * np.sum(body == 1) + 0.02 * (length - 2), 0, 1))

    params = 0.7 * np.asarray(jax.random.normal(seed_key(seed),
                                                (d.size, horizon, 3, 3)))
    return SequencePolicy(params, reward, 2, horizon, eos=True)


@lru_cache(maxsize=4)
def difficulty_problem(seed: int = 5):
    """``(DiscreteProblem, lengths (K,))`` of :func:`difficulty_policy`, computed once."""
    policy = difficulty_policy(seed)
    return policy.problem(), np.asarray(policy.lengths, dtype=np.float64)


@float64
def default_gaussian_bandit() -> GaussianBandit:
    """3 prompts, d = 2 shared parameters; a* not realisable, so g(x) != 0 at the optimum.

    ``A = [[0.7, 0.2], [0.2, 0.8]]``: ``mu = 0.544``, ``L = 0.956``.
    """
    return gaussian_bandit(
        prompt_probs=[0.5, 0.3, 0.2], features=[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
        curvature=[1.0, 2.0, 1.0], target=[1.0, -0.5, 1.5], offset=[1.0, 0.5, 2.0],
        sigma=0.5, noise_std=0.5)


@float64
def scalar_gaussian_bandit() -> GaussianBandit:
    """One prompt, one parameter: J = -theta^2/2 + const (lambda = 1) and, at the optimum, the
    oracle estimate with B = G = 1 has variance Gamma = 5/2 sigma^2 + tau^2/sigma^2 = 2.

    The scalar check of Theorem 8: with beta = 1.5, E[n Delta_n] -> beta^2 Gamma lambda /
    (2 (2 beta lambda - 1)) = 1.125 (0.5 without the beta^2 factor).
    """
    return gaussian_bandit(prompt_probs=[1.0], features=[[1.0]], curvature=[1.0], target=[0.0],
                           sigma=np.sqrt(0.4), noise_std=np.sqrt(0.4))


@float64
def length_reward_policy() -> SequencePolicy:
    """Reward mean rises with length (0.1 + 0.2 (L - 1) - 0.05 x): ||s||^2 and reward correlate."""
    def reward(p, t, L):
        return float(np.clip(0.1 + 0.2 * (L - 1) - 0.05 * p, 0, 1))

    params = 0.5 * np.asarray(jax.random.normal(seed_key(3), (2, 4, 3, 3)))
    return SequencePolicy(params, reward, 2, 4)


@float64
def length_policy(seed: int = 5, n_prompts: int = 3, vocab_size: int = 2, horizon: int = 5,
                  difficulty=(0.75, 0.45, 0.15), eos: bool = True) -> SequencePolicy:
    """Prompts of different difficulty; lengths 1..horizon. Reward mean of prompt x:
    ``clip(difficulty[x] + 0.2 * (first token == 1) - 0.1 * (last body token == 0), 0, 1)``."""
    if len(difficulty) != n_prompts:
        raise ValueError(f"difficulty must have n_prompts={n_prompts} entries")

    def reward(prompt, tokens, length):
        body = tokens[(tokens >= 0) & (tokens < vocab_size)]
        first = float(body.size > 0 and body[0] == 1)
        last0 = float(body.size > 0 and body[-1] == 0)
        return float(np.clip(difficulty[prompt] + 0.2 * first - 0.1 * last0, 0.0, 1.0))

    n_out = vocab_size + int(eos)
    params = 0.7 * np.asarray(jax.random.normal(
        seed_key(seed), (n_prompts, horizon, vocab_size + 1, n_out)))
    return SequencePolicy(params, reward, vocab_size, horizon, eos=eos)


@float64
def stop_or_run_policy(horizon: int = 6, p_correct=(0.3, 0.5), stop_prob: float = 0.3,
                       copy_logit: float = 6.0) -> SequencePolicy:
    """A policy that answers first, then continues or stops: the length is a free choice.

    Vocabulary {0, 1} + EOS. The first token is the answer (1 correct: reward 1, otherwise 0;
    a bare EOS is incorrect). Later tokens copy the answer token (logit ``copy_logit``) until
    EOS, emitted with probability about ``stop_prob`` per step, so the EOS decisions after a
    correct and after an incorrect answer are separate parameters. Prompts differ in
    ``p_correct`` (difficulty). Reward does not depend on length.
    """
    if not 0 < stop_prob < 1:
        raise ValueError(f"stop_prob must lie in (0, 1), got {stop_prob!r}")
    P = len(p_correct)
    params = np.zeros((P, horizon, 3, 3))
    for x, pc in enumerate(p_correct):
        if not 0 < pc < 1:
            raise ValueError(f"p_correct must lie in (0, 1), got {pc!r}")
        params[x, 0, 2] = [np.log(1 - pc), np.log(pc), -12.0]  # start: answer, almost never EOS
        for t in range(1, horizon):
            for prev in (0, 1):
                eos = copy_logit + np.log(stop_prob / (1 - stop_prob))
                row = [0.0, 0.0, eos]
                row[prev] = copy_logit
                params[x, t, prev] = row
            params[x, t, 2] = [0.0, 0.0, 0.0]  # unreachable (start only at t = 0)

    def reward(prompt, tokens, length):
        return float(tokens[0] == 1)

    return SequencePolicy(params, reward, 2, horizon, eos=True)
