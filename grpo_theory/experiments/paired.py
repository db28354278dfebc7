"""Paired Monte Carlo: several estimators evaluated on the *same* sampled groups.

Common random numbers make differences of MSEs (e.g. GRPO minus oracle, which is O(G^-2) while
each MSE is O(1/G)) measurable: the per-replicate difference of squared errors has a far smaller
variance than the difference of two independent estimates. Sampling and the estimates reuse
:func:`grpo_theory.core.sampling.sample_groups` / :func:`estimate_gradient`; prompt-only baselines
``b(x)`` are passed as an array (n_b, P) and evaluated in one vectorised einsum.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from grpo_theory._validation import integer
from grpo_theory.core import as_problem, estimate_gradient, get_estimator, sample_groups, z_value


@partial(jax.jit, static_argnames=("ests", "batch_size", "group_size", "chunk", "n_chunks"))
def _paired(key, problem, baselines, ests, batch_size, group_size, chunk, n_chunks):
    target = problem.gradient()
    B, G = batch_size, group_size

    def one(k):
        x, y, z = sample_groups(k, problem, B, G)
        outs = [estimate_gradient(problem, e, x, y, z) for e in ests]
        if baselines.shape[0]:
            sc = problem.scores[x[:, None], y]  # (B, G, D)
            adv = z[None] - baselines[:, x][..., None]  # (n_b, B, G)
            outs += list(jnp.einsum("nbg,bgd->nd", adv, sc) / (B * G))
        return jnp.sum((jnp.stack(outs) - target) ** 2, axis=-1)

    keys = jax.random.split(key, n_chunks * chunk).reshape(n_chunks, chunk, -1)
    err2 = jax.lax.map(jax.vmap(one), keys)
    return err2.reshape(n_chunks * chunk, -1)


def paired_squared_errors(bandit, estimators=(), baselines=None, group_size: int = 2,
                          batch_size: int = 1, n_reps: int = 10_000, seed: int = 0,
                          chunk: int | None = None, key=None) -> np.ndarray:
    """Per-replicate ``||ghat - grad J||^2`` for each estimator then each baseline row.

    A baseline row ``b`` gives the estimate ``(1/(BG)) sum (z - b(x)) s(x, y)``; every column
    is evaluated on the same sampled batches, so differences of columns are paired.

    Args:
        bandit: the problem (a bandit or anything :func:`~grpo_theory.core.problem.as_problem`
            takes).
        estimators: names of the estimator registry.
        baselines: prompt-only baselines, an array (n_b, n_prompts) (or one row); None: none.
        group_size: responses G per prompt (>= 1).
        batch_size: prompts B per batch (>= 1).
        n_reps: replicates (>= 1).
        seed: the PRNG seed of the draws.
        chunk: replicates per compiled step (None: sized to about 2^22 numbers).
        key: a JAX PRNG key (None: ``jax.random.PRNGKey(seed)``).

    Returns:
        An array (n_reps, len(estimators) + n_b), all columns from the same draws.
    """
    group_size = integer("group_size", group_size, 1)
    batch_size = integer("batch_size", batch_size, 1)
    n_reps = integer("n_reps", n_reps, 1)
    if chunk is not None:
        chunk = integer("chunk", chunk, 1)
    problem = as_problem(bandit)
    ests = tuple(get_estimator(e) for e in estimators)
    b = jnp.zeros((0, problem.n_prompts)) if baselines is None else jnp.asarray(
        baselines, dtype=jnp.float64).reshape(-1, problem.n_prompts)
    if chunk is None:
        per = batch_size * group_size * problem.dim * (len(ests) + b.shape[0] + 2)
        chunk = int(max(1, min(n_reps, 2**22 // max(per, 1))))
    n_chunks = -(-n_reps // chunk)
    key = jax.random.PRNGKey(integer("seed", seed, 0)) if key is None else key
    err2 = _paired(key, problem, b, ests, batch_size, group_size, chunk,
                   n_chunks)
    return np.asarray(err2)[:n_reps]


def mean_ci(samples, axis=0):
    """Mean, standard error and normal 95% CI along ``axis``.

    Returns:
        ``(mean, se, lower, upper)``, ``se = std(ddof=1) / sqrt(n)``, bounds ``mean -/+ z se``.
    """
    s = np.asarray(samples, dtype=np.float64)
    m = s.mean(axis=axis)
    se = s.std(axis=axis, ddof=1) / np.sqrt(s.shape[axis])
    return m, se, m - z_value() * se, m + z_value() * se
