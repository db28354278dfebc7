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


#: responses compared per inner reduction of :func:`sample_cell_counts_from_uniforms` (XLA's CPU
#: reductions over a group axis of 16 measured 2-3x faster than over 32 or 64 at once)
_COUNT_BLOCK = 16


@float64
def sample_cell_counts_from_uniforms(problem: DiscreteProblem, ux, uc, prompt_cdf=None,
                                     cell_cdf=None):
    """Prompts and each group's count of responses per (response, reward) cell.

    The same cells as :func:`sample_cells_from_uniforms` on the same uniforms, counted: with
    ``q_c`` the prompt's cell CDF, ``m_c = #{g : u_g >= q_c}`` responses lie above cell ``c``, so
    ``n_0 = G - m_0`` and ``n_c = m_{c-1} - m_c`` (the last cell also takes any ``u`` at or above
    its CDF, as the cell sampler's clamp does). No per-response index is formed.

    Args:
        problem: the problem.
        ux: uniforms in [0, 1) ``(..., B)`` for the prompts.
        uc: uniforms in [0, 1) ``(..., B, G)``, one per response.
        prompt_cdf, cell_cdf: optional precomputed ``safe_cdf(f)`` and :func:`joint_cell_cdf`.

    Returns:
        ``(x, n)``: prompt indices ``(..., B)`` and the counts ``(..., B, 2K)`` over the cells
        ``c = 2y + z`` (whole numbers in float64; each row sums to G).

    Examples:
        >>> import jax.numpy as jnp
        >>> from grpo_theory.core import SoftmaxBandit
        >>> from grpo_theory.core.sampling import sample_cell_counts_from_uniforms
        >>> p = SoftmaxBandit([[0.0, 1.0]], [[1.0, 0.0]]).problem()
        >>> x, n = sample_cell_counts_from_uniforms(p, jnp.zeros(1), jnp.array([[0.1, 0.5, 0.9]]))
        >>> n.tolist()  # cells (y=0, z=0), (y=0, z=1), (y=1, z=0), (y=1, z=1)
        [[0.0, 1.0, 2.0, 0.0]]
    """
    pcdf = safe_cdf(problem.prompt_probs) if prompt_cdf is None else prompt_cdf
    ccdf = joint_cell_cdf(problem) if cell_cdf is None else cell_cdf
    x = jnp.minimum(jnp.sum(ux.astype(pcdf.dtype)[..., None] >= pcdf, axis=-1), pcdf.shape[-1] - 1)
    q = ccdf[x]  # (..., B, 2K)
    u = uc.astype(ccdf.dtype)
    G = u.shape[-1]
    if G > _COUNT_BLOCK:  # blocks of 16 responses; padding at -1 lies below every CDF value
        pad = -G % _COUNT_BLOCK
        if pad:
            u = jnp.concatenate([u, jnp.full(u.shape[:-1] + (pad,), -1.0, u.dtype)], axis=-1)
        u = u.reshape(u.shape[:-1] + (-1, _COUNT_BLOCK))
        above = jnp.sum(jnp.sum(u[..., None] >= q[..., None, None, :], axis=-2), axis=-2)
    else:
        above = jnp.sum(u[..., None] >= q[..., None, :], axis=-2)  # (..., B, 2K): m_c
    above = above.astype(jnp.float64)  # differences in float64 measured faster than in int64
    upper = jnp.concatenate([jnp.full(above.shape[:-1] + (1,), float(G)), above[..., :-1]], -1)
    return x, (upper - above).at[..., -1].add(above[..., -1])


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
