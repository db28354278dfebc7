r"""Greedy marginal allocation in JAX: integer group sizes from concave marginal gains (jit-able).

For values concave in each prompt's group size, taking the largest marginal gains one response at
a time is optimal; :func:`sizes_from_gains` does it in one sort, inside ``jit``. It is the
vectorised step of the MSE-optimal allocation (gains ``(a + 2b/(G - 1)) / (G (G + 1))``,
:mod:`.optimal`) and of Knapsack RL's allocation (gains ``v(G + 1, p) - v(G, p)``,
:func:`.rules.pass_rate_allocation`) in the training loops.

Their documented domains are checked at the boundary, on concrete inputs (outside ``jit``; a
traced value is the caller's to check): each bad input is a one-line ``ValueError`` naming the
argument.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .. import _validation as V


def knapsack_value(group_size, p, xp=np):
    """Knapsack RL's value of G = ``group_size`` rollouts of a prompt of pass rate p:
    ``(1 - p^G - (1 - p)^G) p (1 - p)^2`` (arrays broadcast; ``xp=jax.numpy`` keeps the inputs'
    JAX arrays and dtype for a jitted step)."""
    if xp is np:
        group_size, p = np.asarray(group_size, float), np.asarray(p, float)
    G = group_size
    return (1.0 - p ** G - (1.0 - p) ** G) * p * (1.0 - p) ** 2


def _in_range(name: str, arr, hi: float | None = None) -> None:
    """Refuse a concrete ``arr`` with a value that is not finite, negative or above ``hi``."""
    if not V.is_concrete(arr):
        return
    x = np.asarray(arr, np.float64).ravel()
    bad = ~(np.isfinite(x) & (x >= 0) & (x <= (np.inf if hi is None else hi)))
    if bad.any():
        want = "finite and >= 0" if hi is None else f"in [0, {hi:g}]"
        raise ValueError(f"{name} must be {want}, got {x[bad][0]!r}")


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
    if gains.ndim != 2:
        raise ValueError(f"gains must be a (B, n) array, got shape {gains.shape}")
    B, n = gains.shape
    if V.is_concrete(min_size):
        min_size = V.integer("min_size", min_size, 1)
    if V.is_concrete(total) and V.is_concrete(min_size):
        V.integer("total", total, min_size * B, (min_size + n) * B)
    if V.is_concrete(gains) and bool(jnp.isnan(gains).any()):
        raise ValueError("gains must not be NaN (a prompt's marginal gains are numbers)")
    order = jnp.argsort(-gains.reshape(-1), stable=True)
    take = (jnp.arange(order.size) < (total - min_size * B)).astype(jnp.int32)
    return min_size + jnp.zeros(B, jnp.int32).at[order // n].add(take)


def mse_gains(a, b, width: int):
    """The MSE-optimal allocation's gains ``v(G) - v(G + 1) = (a + 2 b / (G - 1)) / (G (G + 1))``
    for ``G = 2 .. width - 1`` (``(B, width - 2)``, the input of :func:`sizes_from_gains`), with
    ``v(G) = a / G + b / (G (G - 1))`` a prompt's leave-one-out variance (:mod:`.optimal`).

    Args:
        a, b: ``(B,)`` per-prompt constants (>= 0); width: the largest group (>= 3).

    >>> import numpy as np
    >>> np.asarray(mse_gains(jnp.array([6.0]), jnp.array([0.0]), 4)).round(3).tolist()
    [[1.0, 0.5]]
    """
    width = V.integer("width", width, 3)
    _in_range("a", a)
    _in_range("b", b)
    G = jnp.arange(2, width, dtype=jnp.result_type(a, float))[None, :]
    a, b = jnp.asarray(a)[:, None], jnp.asarray(b)[:, None]
    return (a + 2.0 * b / (G - 1)) / (G * (G + 1))


def unique_answer_constants(value, answer_score_sq, score_sq):
    r"""``(a_x, b_x)`` of a prompt whose only rewarded response is ``y*`` (reward 1, else 0).

    With ``V = pi(y*|x)``, ``g(x) = V s*`` and ``E[||s||^2 Z | x] = V ||s*||^2``:

    .. math:: a_x = \operatorname{tr}\Sigma_{or}(x) = E[\|s\|^2 (Z - V)^2] - \|g(x)\|^2
              = V (1 - 3V) \|s^*\|^2 + V^2 E\|s\|^2, \qquad
              b_x = E\|s\|^2 V (1 - V) + V^2 \|s^*\|^2 .

    ``a`` is floored at 0 (a trace; a plug-in ``E||s||^2`` may undershoot).

    Args:
        value: ``V`` (B,); answer_score_sq: ``||s*||^2`` (B,); score_sq: ``E[||s||^2 | x]``
            (B,) or one shared value.

    >>> a, b = unique_answer_constants(jnp.array([0.5]), jnp.array([2.0]), jnp.array([3.0]))
    >>> float(a[0]), float(b[0])
    (0.25, 1.25)
    """
    _in_range("value", value, 1.0)
    _in_range("answer_score_sq", answer_score_sq)
    _in_range("score_sq", score_sq)
    v, star, s2 = jnp.asarray(value), jnp.asarray(answer_score_sq), jnp.asarray(score_sq)
    a = jnp.maximum(v * (1 - 3 * v) * star + v**2 * s2, 0.0)
    b = s2 * v * (1 - v) + v**2 * star
    return a, b
