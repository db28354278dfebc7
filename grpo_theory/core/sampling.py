r"""Drawing prompts, responses and binary rewards from an enumerable problem.

One batch: prompts ``x_b ~ f`` (b = 1..B), responses ``y_bg ~ pi(.|x_b)`` (g = 1..G) and rewards
``Z_bg ~ Bernoulli(mu(x_b, y_bg))``, all by inverse-CDF lookups of uniforms so the same uniforms
give the same draws on every backend. This module imports no other module of the package at run
time (the policies call it, the Monte Carlo engine and the training loops call it).

The Monte Carlo engine uses a cheaper but equally exact draw (:func:`sample_cells_from_uniforms`):
the pair (response, reward) of one response is ONE inverse-CDF lookup over the ``2K`` cells
``c = 2y + z`` of its prompt, with masses ``pi(y|x)(1 - mu(x, y))`` (``z = 0``) and
``pi(y|x) mu(x, y)`` (``z = 1``). That is the joint law of ``(y, Z)`` given ``x``, so it halves
the random numbers per response (``1 + G`` per group instead of ``1 + 2G``) without changing the
sampled distribution. With float32 uniforms (JAX makes them multiples of ``2**-23``; they are
compared against a float64 CDF) every cell probability is rounded to a multiple of ``2**-23``
(about 1.2e-7), far below any Monte Carlo standard error the engine reaches.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .. import _validation as V
from .problem import DiscreteProblem, as_problem
from .._precision import float64


def _inverse_cdf(cdf, u):
    """Index i with cdf[i-1] <= u < cdf[i] (last index if rounding leaves u >= cdf[-1])."""
    return jnp.minimum(jnp.sum(u[..., None] >= cdf, axis=-1), cdf.shape[-1] - 1)


def safe_cdf(mass):
    """Cumulative sums along the last axis; entries from the last positive mass on read 1.0.

    ``u < 1`` always, so rounding of the total (``cumsum`` ending at ``1 - 1e-16``) can never
    select a zero-mass trailing cell, and zero-mass cells elsewhere have empty intervals.
    """
    n = mass.shape[-1]
    cdf = jnp.cumsum(mass, axis=-1)
    last = n - 1 - jnp.argmax((mass > 0)[..., ::-1], axis=-1)
    return jnp.where(jnp.arange(n) >= last[..., None], 1.0, cdf)


@float64
def joint_cell_cdf(problem: DiscreteProblem):
    """CDF ``(P, 2K)`` over the cells ``c = 2y + z`` of each prompt (see the module docstring).

    Args:
        problem: a :class:`~grpo_theory.core.problem.DiscreteProblem`.

    Returns:
        float64 array; row ``x`` is the cumulative sum of ``pi(y|x) (1 - mu)``, ``pi(y|x) mu``
        interleaved over ``y``, with the tail (from the last positive cell) set to exactly 1.
    """
    pi, mu = problem.probs, problem.reward_means
    mass = jnp.stack([pi * (1.0 - mu), pi * mu], axis=-1).reshape(pi.shape[0], -1)
    return safe_cdf(mass)


@float64
def sample_cells_from_uniforms(problem: DiscreteProblem, ux, uc, prompt_cdf=None, cell_cdf=None):
    """Prompts and joint (response, reward) cells from one uniform each (inverse CDF).

    Args:
        problem: the problem.
        ux: uniforms in [0, 1) ``(..., B)`` for the prompts (float32 or float64).
        uc: uniforms in [0, 1) ``(..., B, G)``, one per response.
        prompt_cdf, cell_cdf: optional precomputed ``safe_cdf(f)`` and :func:`joint_cell_cdf`.

    Returns:
        ``(x, y, z)``: prompt indices ``(..., B)``, responses ``(..., B, G)`` and float64 binary
        rewards ``(..., B, G)``, with ``P(y, z | x) = pi(y|x) mu^z (1 - mu)^(1 - z)`` (up to the
        resolution of the uniforms). The tail of each CDF reads exactly 1 and ``u < 1``, so a
        zero-mass cell is never drawn.
    """
    pcdf = safe_cdf(problem.prompt_probs) if prompt_cdf is None else prompt_cdf
    ccdf = joint_cell_cdf(problem) if cell_cdf is None else cell_cdf
    x = jnp.minimum(jnp.sum(ux.astype(pcdf.dtype)[..., None] >= pcdf, axis=-1), pcdf.shape[-1] - 1)
    c = jnp.sum(uc.astype(ccdf.dtype)[..., None] >= ccdf[x][..., None, :], axis=-1)
    c = jnp.minimum(c, ccdf.shape[-1] - 1)  # only reached by an out-of-range u >= 1
    return x, c // 2, (c % 2).astype(jnp.float64)


@float64
def sample_groups_joint(key, problem: DiscreteProblem, batch_size: int, group_size: int,
                        dtype=jnp.float64):
    """Like :func:`sample_groups` (same law, other draws) with ``1 + G`` uniforms per group.

    Args:
        key: a JAX PRNG key (any implementation).
        problem: the problem.
        batch_size, group_size: ``B`` and ``G``.
        dtype: dtype of the uniforms (``float64`` or ``float32``).

    Returns:
        ``(x, y, z)`` as :func:`sample_groups`.
    """
    u = jax.random.uniform(key, (batch_size, group_size + 1), dtype=dtype)
    return sample_cells_from_uniforms(problem, u[:, 0], u[:, 1:])


def sample_from_uniforms(problem: DiscreteProblem, ux, uy, uz):
    """Inverse-CDF sampling from uniforms ``ux`` (..., B), ``uy`` and ``uz`` (..., B, G)."""
    x = _inverse_cdf(jnp.cumsum(problem.prompt_probs), ux)
    cdf = jnp.cumsum(problem.probs, axis=1)
    y = _inverse_cdf(cdf[x][..., None, :], uy)
    z = (uz < problem.reward_means[x[..., None], y]).astype(jnp.float64)
    return x, y, z


def sample_groups(key, problem: DiscreteProblem, batch_size: int, group_size: int):
    """Draw prompts ``x`` (B,), responses ``y`` (B, G) and binary rewards ``z`` (B, G).

    ``key`` is a JAX key or an integer seed; ``batch_size`` and ``group_size`` integers >= 1.
    """
    key = V.key_or_seed(key)
    problem = as_problem(problem)
    batch_size = V.positive_int("batch_size", batch_size)
    group_size = V.positive_int("group_size", group_size)
    kx, ky, kz = jax.random.split(key, 3)
    return sample_from_uniforms(
        problem, jax.random.uniform(kx, (batch_size,)),
        jax.random.uniform(ky, (batch_size, group_size)),
        jax.random.uniform(kz, (batch_size, group_size)))
