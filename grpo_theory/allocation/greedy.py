r"""Greedy marginal allocation in JAX: integer group sizes from concave marginal gains (jit-able).

For values concave in each prompt's group size, taking the largest marginal gains one response at
a time is optimal; :func:`sizes_from_gains` does it in one sort, inside ``jit``. It is the
vectorised step of the MSE-optimal allocation (gains ``(a + 2b/(G - 1)) / (G (G + 1))``,
:mod:`.optimal`) and of Knapsack RL's allocation (gains ``v(G + 1, p) - v(G, p)``,
:func:`.rules.pass_rate_allocation`) in the training loops.
"""

from __future__ import annotations

import jax.numpy as jnp

__all__ = ["sizes_from_gains"]


def sizes_from_gains(gains, total: int, min_size: int = 2):
    """Sizes ``(B,)`` >= ``min_size`` summing to ``total`` from marginal gains.

    Args:
        gains: ``(B, n)``; ``gains[b, j]`` is prompt b's gain of a response added at size
            ``min_size + j`` (non-increasing in j: concave values), so sizes reach at most
            ``min_size + n``.
        total: the responses of the batch, ``min_size B <= total <= (min_size + n) B``.
        min_size: every prompt's least size.

    Returns:
        ``min_size`` plus how many of the ``total - min_size B`` largest gains are each prompt's
        (a stable sort breaks ties by prompt, then by size).

    >>> import numpy as np
    >>> np.asarray(sizes_from_gains(jnp.array([[0.5, 0.2, 0.1], [0.4, 0.3, 0.0]]), 7)).tolist()
    [3, 4]
    """
    gains = jnp.asarray(gains)
    B, n = gains.shape
    order = jnp.argsort(-gains.reshape(-1), stable=True)
    take = (jnp.arange(order.size) < (total - min_size * B)).astype(jnp.int32)
    return min_size + jnp.zeros(B, jnp.int32).at[order // n].add(take)
