r"""Drawing prompts, responses and binary rewards from an enumerable problem.

One batch: prompts ``x_b ~ f`` (b = 1..B), responses ``y_bg ~ pi(.|x_b)`` (g = 1..G) and rewards
``Z_bg ~ Bernoulli(mu(x_b, y_bg))``, all by inverse-CDF lookups of uniforms so the same uniforms
give the same draws on every backend. This module imports no other module of the package at run
time (the policies call it, the Monte Carlo engine and the training loops call it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

if TYPE_CHECKING:  # pragma: no cover
    from .policies import DiscreteProblem

__all__ = ["sample_groups", "sample_from_uniforms"]


def _inverse_cdf(cdf, u):
    """Index i with cdf[i-1] <= u < cdf[i] (last index if rounding leaves u >= cdf[-1])."""
    return jnp.minimum(jnp.sum(u[..., None] >= cdf, axis=-1), cdf.shape[-1] - 1)


def sample_from_uniforms(problem: DiscreteProblem, ux, uy, uz):
    """Inverse-CDF sampling from uniforms ``ux`` (..., B), ``uy`` and ``uz`` (..., B, G)."""
    x = _inverse_cdf(jnp.cumsum(problem.prompt_probs), ux)
    cdf = jnp.cumsum(problem.probs, axis=1)
    y = _inverse_cdf(cdf[x][..., None, :], uy)
    z = (uz < problem.reward_means[x[..., None], y]).astype(jnp.float64)
    return x, y, z


def sample_groups(key, problem: DiscreteProblem, batch_size: int, group_size: int):
    """Draw prompts ``x`` (B,), responses ``y`` (B, G) and binary rewards ``z`` (B, G)."""
    kx, ky, kz = jax.random.split(key, 3)
    return sample_from_uniforms(
        problem, jax.random.uniform(kx, (batch_size,)),
        jax.random.uniform(ky, (batch_size, group_size)),
        jax.random.uniform(kz, (batch_size, group_size)))
