r"""Monte Carlo of the GRPO gradient's fixed-budget MSE with prompts drawn from a mixture.

Theorem 7's law ``N MSE(G) = c1 G + c2 + c3/(G-1)`` needs prompts *sampled* (c1 is the
between-prompt variance of ``g(x) = E[A s | x]``). Here the prompt distribution is a discrete
one, ``w`` over the rows of a question table (e.g.
:mod:`grpo_theory.experiments.lm_support.mixture`'s
concentration: mass p on a fixed question, 1 - p uniform on the others), in the answer-only
format with the exact-match reward, where ``y*(x)`` is unique, so

.. math:: V(x) = \pi(y^*|x), \qquad \nabla J_w = \sum_x w_x \nabla V(x)
          = \nabla_\theta \sum_x w_x\, e^{\log\pi(y^*|x)}

are exact (teacher forcing, one backward pass: :func:`mixture_gradient`).

One replicate at budget ``N`` and group size ``G`` (:func:`grpo_mse_replicates`): ``B = N/G``
prompts i.i.d. from ``w``, ``G`` responses each from the policy, advantages from the estimator
registry (:func:`grpo_theory.core.estimators.get_estimator`, ``grpo`` = leave-one-out), and

.. math:: \hat g = \nabla_\theta \frac1{BG}\sum_{b,g} A_{bg} \log\pi(y_{bg}|x_b),\qquad
          e = \|\hat g - \nabla J_w\|^2,

one weighted backward pass per replicate (no per-sample gradients), replicates under
``lax.map`` in one compiled function per ``(B, G)``.

The prediction (:func:`mixture_mse_prediction`): the mixture's constants
(:func:`grpo_theory.experiments.lm_support.mixture.mixture_constants`) from exact ``V``,
``||s*||^2`` and sampled ``E[||s||^2 | x]`` per question (:func:`second_moments`), whose sampling
error is carried to the predicted MSE as a standard error (c2 and c3 are linear in them).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ... import _validation as V
from ...core import PromptContext, ScalingConstants, budget_mse, get_estimator
from ...lm.training import exact_answer_quantities
from .mixture import mixture_constants
from ...lm import (RESPONSE_LEN, LMPolicy, Questions, encode_prompts, generic_sample,
                   seq_log_probs, target_responses)


def mixture_weights(p: float, n_fixed: int, n_rest: int) -> np.ndarray:
    """Prompt probabilities over ``n_fixed`` fixed rows then ``n_rest`` other rows: ``p`` spread
    uniformly on the fixed ones, ``1 - p`` on the others (float64, sums to 1)."""
    p = V.real_scalar("p", p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p!r}")
    k, n = V.positive_int("n_fixed", n_fixed), V.positive_int("n_rest", n_rest)
    return np.concatenate([np.full(k, p / k), np.full(n, (1.0 - p) / n)])


def _table(questions: Questions, weights):
    x = encode_prompts(questions, "answer")
    canon = target_responses(questions, "answer")
    w = V.real_array("weights", weights)
    if w.shape != (len(questions),) or np.any(w < 0) or not np.isclose(w.sum(), 1.0):
        raise ValueError(f"weights must be a probability vector of length {len(questions)}, got "
                         f"shape {w.shape}, sum {float(w.sum()) if w.size else 0.0}")
    return x, canon, w


def mixture_gradient(policy: LMPolicy, questions: Questions, weights) -> np.ndarray:
    """Exact ``grad J_w = grad sum_x w_x pi(y*|x)`` (answer-only), (D,) float64."""
    x, canon, w = _table(questions, weights)
    g = _mixture_grad(policy.apply_fn, policy.params, jnp.asarray(x), jnp.asarray(canon),
                      jnp.asarray(w), policy.temperature, policy.eos_ids)
    return np.asarray(g, np.float64)


@partial(jax.jit, static_argnames=("apply_fn", "eos"))
def _mixture_grad(apply_fn, params, x, canon, w, temperature, eos):
    flat, unravel = ravel_pytree(params)

    def j(theta):
        lp = seq_log_probs(apply_fn, unravel(theta), x, canon, temperature, eos)
        return jnp.sum(w * jnp.exp(lp.astype(w.dtype)))

    return jax.grad(j)(flat)


def grpo_mse_replicates(policy: LMPolicy, questions: Questions, weights, grad, N: int,
                        group_size: int, n_reps: int, key, estimator: str = "grpo",
                        block: int = 1) -> np.ndarray:
    """Squared errors ``||g_hat - grad||^2`` of ``n_reps`` independent replicates (module doc).

    Args:
        policy: the language-model policy.
        questions: the question table; ``weights`` (len(questions),) the prompt distribution.
        grad: (D,) the exact gradient (:func:`mixture_gradient`).
        N, group_size: budget and group size G, ``G >= 2`` dividing ``N`` (``B = N / G``).
        n_reps: replicates; key: a JAX key or an integer seed.
        estimator: a registered estimator name (``grpo``: leave-one-out).
        block: replicates vmapped together (throughput; results do not depend on it).
    Returns:
        (n_reps,) float64 squared errors.
    """
    N, G = V.positive_int("N", N), V.positive_int("group_size", group_size, 2)
    if N % G:
        raise ValueError(f"group_size must divide N, got N={N}, group_size={G}")
    n_reps, block = V.positive_int("n_reps", n_reps), V.positive_int("block", block)
    key = V.key_or_seed(key)
    x, canon, w = _table(questions, weights)
    grad = V.real_array("grad", grad)
    if grad.shape != (policy.dim,):
        raise ValueError(f"grad must have shape ({policy.dim},), got {grad.shape}")
    n_blk = -(-n_reps // block)
    keys = jax.random.split(key, n_blk * block)
    keys = keys.reshape((n_blk, block) + keys.shape[1:])
    out = _replicates(policy.apply_fn, _sampler(policy), get_estimator(estimator), policy.params,
                      jnp.asarray(x), jnp.asarray(canon), jnp.asarray(_log(w)),
                      jnp.asarray(grad), keys, policy.temperature, N // G, G, policy.eos_ids)
    return np.asarray(out, np.float64).reshape(-1)[:n_reps]


def _log(w):
    """log w with log 0 = -inf (no warning): rows of mass 0 are never drawn."""
    out = np.full(w.shape, -np.inf)
    np.log(w, out=out, where=w > 0)
    return out


_SAMPLERS: dict = {}


def _sampler(policy: LMPolicy):
    """The policy's sampler (its KV-cached ``sample_fn``, else one generic sampler per
    (apply_fn, eos, pad), kept so that repeated calls reuse one compilation)."""
    if policy.sample_fn is not None:
        return policy.sample_fn
    k = (policy.apply_fn, policy.eos_ids, policy.pad_id)
    if k not in _SAMPLERS:
        _SAMPLERS[k] = partial(generic_sample, policy.apply_fn, eos=policy.eos_ids,
                               pad=policy.pad_id)
    return _SAMPLERS[k]


@partial(jax.jit, static_argnames=("apply_fn", "sample", "est", "B", "G", "eos"))
def _replicates(apply_fn, sample, est, params, x, canon, logw, grad, keys, temperature,
                B, G, eos):
    rlen = canon.shape[1]
    flat, unravel = ravel_pytree(params)

    def one(key):
        kx, ky = jax.random.split(key)
        idx = jax.random.categorical(kx, logw, shape=(B,))
        xs = jnp.repeat(x[idx], G, axis=0)
        y = sample(params, ky, xs, rlen, temperature).astype(xs.dtype)
        z = jnp.all(y == jnp.repeat(canon[idx], G, axis=0), axis=-1).reshape(B, G)
        a = est(z.astype(grad.dtype), PromptContext()).reshape(-1) / (B * G)

        def surrogate(theta):
            lp = seq_log_probs(apply_fn, unravel(theta), xs, y, temperature, eos)
            return jnp.sum(jax.lax.stop_gradient(a).astype(lp.dtype) * lp)

        gh = jax.grad(surrogate)(flat).astype(grad.dtype)
        return jnp.sum((gh - grad) ** 2)

    return jax.lax.map(jax.vmap(one), keys)


def second_moments(policy: LMPolicy, questions: Questions, n_samples: int, key,
                   chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Per question: the sample mean of ``||s||^2`` over ``n_samples`` responses (an unbiased
    ``E[||s||^2 | x]``) and its standard error; two (len(questions),) float64 arrays."""
    n = V.positive_int("n_samples", n_samples, 2)
    key = V.key_or_seed(key)
    x = np.repeat(encode_prompts(questions, "answer"), n, axis=0)
    y = np.asarray(policy.sample_blocked(key, x, RESPONSE_LEN["answer"]))
    _, sq = policy.score_contractions(x, y, np.zeros((1, x.shape[0])), chunk=chunk)
    sq = sq.reshape(len(questions), n)
    return sq.mean(1), sq.std(1, ddof=1) / np.sqrt(n)


def mixture_mse_prediction(policy: LMPolicy, fixed: Questions, rest: Questions, p: float,
                           s2: dict, budgets, grid) -> dict:
    """Constants of the mixture (mass ``p`` on ``fixed``, uniform within each part) and the
    predicted fixed-budget MSE over ``grid`` at each of ``budgets``, with its standard error.

    Args:
        policy, fixed, rest, p: the mixture.
        s2: ``{"F": (mean, se), "R": (mean, se)}`` of ``E[||s||^2 | x]`` per question
            (:func:`second_moments`).
        budgets: N values; grid: group sizes > 1.
    Returns:
        ``constants`` (:func:`~grpo_theory.experiments.lm_support.mixture.mixture_constants`' dict)
        and ``mse``: ``{(N, G): (predicted MSE, its standard error from the s2 sampling)}``.
    """
    parts, coef = {}, {}
    for name, q, mass in (("F", fixed, p), ("R", rest, 1.0 - p)):
        x = encode_prompts(q, "answer")
        v, ss, g_mean = exact_answer_quantities(policy, x, target_responses(q, "answer"))
        parts[name] = dict(v=v, s_star_sq=np.asarray(ss, np.float64),
                           s2=np.asarray(s2[name][0], np.float64),
                           g_mean=np.asarray(g_mean, np.float64))
        coef[name] = (mass / len(q), v, np.asarray(s2[name][1], np.float64))
    c = mixture_constants(parts, p)
    sc = ScalingConstants(c["c1"], c["c2"], c["c3"])
    mse = {}
    for n in budgets:
        for g in grid:
            var = sum(float(np.sum((m * (v**2 + v * (1 - v) / (g - 1)) / n * se) ** 2))
                      for m, v, se in coef.values())
            mse[(int(n), int(g))] = (float(budget_mse(sc, float(g), float(n))), float(np.sqrt(var)))
    return dict(constants=c, mse=mse)
