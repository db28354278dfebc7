r"""The group-size scaling law (Theorem 7) and its exact finite-G form.

With B prompts and G responses each, GRPO's exact minibatch MSE is (Theorem 7)

.. math:: \mathrm{MSE}(B, G) = \frac{c_1}{B} + \frac{c_2}{BG} + \frac{c_3}{BG(G-1)},

with ``c1 = E_X||g(X) - g||^2`` (between-prompt spread), ``c2 = E_X tr Sigma_or(X)`` and
``c3 = E_X[E[||s||^2|X] sigma^2(X) + ||g(X)||^2]``. Under a fixed budget N = BG,
``N * MSE = c1 G + c2 + c3/(G - 1)``, minimised at ``G* = 1 + sqrt(c3/c1)`` whatever N; the
paper's leading-order form ``c1 G + c2 + c3/G`` gives ``G* = sqrt(c3/c1)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import floor, sqrt

import numpy as np

from .gram import as_structure
from .ustat import closed_form_pieces
from .._precision import float64


@dataclass(frozen=True)
class ScalingConstants:
    """The scaling-law constants of Theorem 7: GRPO's exact MSE at B prompts of G responses is
    ``(c1 G + c2 + c3/(G - 1)) / (B G)`` (:meth:`mse`)."""

    c1: float
    c2: float
    c3: float

    @float64
    def mse(self, batch_size, group_size):
        """Exact GRPO minibatch MSE ``c1/B + c2/(BG) + c3/(BG(G-1))``."""
        B, G = np.asarray(batch_size, float), np.asarray(group_size, float)
        return self.c1 / B + self.c2 / (B * G) + self.c3 / (B * G * (G - 1))


@float64
def scaling_constants(bandit) -> ScalingConstants:
    """Exact c1, c2, c3 (Theorem 7) at the policy's current parameters.

    Args:
        bandit: a policy, a :class:`DiscreteProblem` or a score structure (tabular policies at
            O(P K) cost through :mod:`grpo_theory.core.gram`).

    Returns:
        :class:`ScalingConstants` with ``c1 = E_X||g(X) - g||^2``, ``c2 = E_X tr Sigma_or(X)``
        and ``c3 = E_X[E[||s||^2|X] sigma^2(X) + ||g(X)||^2]``.

    Examples:
        GRPO's exact MSE at budget ``N = B G`` is ``(c1 G + c2 + c3/(G - 1)) / N`` (Theorem 7):

        >>> from grpo_theory.core import SoftmaxBandit, budget_mse, exact_mse, scaling_constants
        >>> bandit = SoftmaxBandit([[0.0, 1.0, -1.0], [0.5, 0.0, 0.0]],
        ...                        [[1.0, 0.0, 0.5], [0.2, 0.9, 0.0]])
        >>> c = scaling_constants(bandit)
        >>> [round(x, 4) for x in (c.c1, c.c2, c.c3)]
        [0.026, 0.1094, 0.1744]
        >>> round(float(budget_mse(c, group_size=4, budget=8)), 6)
        0.033936
        >>> round(exact_mse(bandit, "grpo", group_size=4, batch_size=2), 6)
        0.033936
    """
    st = as_structure(bandit)
    _, c = closed_form_pieces(st, 2, 1)  # the compiled closed forms also give c1, c2, c3
    c1, c2, c3 = (float(x) for x in np.asarray(c)[:3])
    return ScalingConstants(c1, c2, c3)


@float64
def budget_mse(constants: ScalingConstants, group_size, budget: float = 1.0):
    """Exact GRPO MSE under a fixed budget ``N = B G`` (B = N/G allowed to be fractional).

    ``group_size``: real G > 1 (scalar or array); ``budget``: N > 0.
    """
    from .. import _validation as V

    G = V.real_array("group_size", group_size)
    if np.any(G <= 1):
        raise ValueError(f"group_size must be > 1 (the c3/(G-1) term), got min {float(G.min())!r}")
    budget = V.real_scalar("budget", budget, positive=True)
    c = constants
    return (c.c1 * G + c.c2 + c.c3 / (G - 1)) / budget


def grid_argmin(constants: ScalingConstants, grid) -> int:
    """The G of ``grid`` minimising ``N MSE = c1 G + c2 + c3/(G-1)`` (the law's prediction on a
    grid of group sizes; ties to the first G of ``grid``).

    Args:
        constants: :class:`ScalingConstants`.
        grid: group sizes > 1 (a non-empty sequence).
    Returns:
        The minimising G (int).
    """
    g = list(grid)
    if not g:
        raise ValueError("grid must hold at least one group size")
    vals = [float(budget_mse(constants, G)) for G in g]
    return int(g[int(np.argmin(vals))])


@dataclass(frozen=True)
class GroupSizeOptimum:
    """The MSE-optimal group size at a fixed budget (Theorem 7): the paper's ``sqrt(c3/c1)``, the
    exact form's real minimiser ``1 + sqrt(c3/c1)`` and the integer argmin, with the constants."""

    paper: float  # sqrt(c3/c1), Theorem 7
    continuous: float  # 1 + sqrt(c3/c1), the exact form's real minimiser
    exact: int  # integer argmin over G >= 2 of the exact fixed-budget MSE
    constants: ScalingConstants


@float64
def optimal_group_size(bandit) -> GroupSizeOptimum:
    """G* predicted by the scaling law (Theorem 7) at the policy's current parameters.

    ``c1 = 0`` (all prompts share one gradient), or ``c3/c1`` beyond the float range (c1
    underflowing next to c3), makes larger groups always better: G* = inf (``exact`` is then the
    largest int64). ``c3 >= 0`` exactly; a rounding-level negative c3 (deterministic rewards,
    ``g(x) = 0``) counts as 0: ``paper = 0``, ``continuous = 1``, ``exact = 2``.

    Args:
        bandit: a policy, a :class:`DiscreteProblem` or a score structure.

    Returns:
        :class:`GroupSizeOptimum` (paper's sqrt(c3/c1), the exact form's 1 + sqrt(c3/c1), the
        integer argmin over G >= 2 and the constants).

    Examples:
        >>> from grpo_theory.core import SoftmaxBandit, optimal_group_size
        >>> bandit = SoftmaxBandit([[0.0, 1.0, -1.0], [0.5, 0.0, 0.0]],
        ...                        [[1.0, 0.0, 0.5], [0.2, 0.9, 0.0]])
        >>> opt = optimal_group_size(bandit)
        >>> round(opt.continuous, 3), opt.exact
        (3.591, 4)
    """
    c = scaling_constants(bandit)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        ratio = np.float64(c.c3) / np.float64(c.c1) if c.c1 > 0 else np.inf
    if not np.isfinite(ratio) or ratio >= 2.0**124:  # G* >= 2^62: beyond every int64 group
        return GroupSizeOptimum(float("inf"), float("inf"), int(np.iinfo(np.int64).max), c)
    r = sqrt(max(float(ratio), 0.0))  # c3 < 0 only by rounding (c3 >= 0 exactly): G* = 2
    cont = 1.0 + r
    cands = {max(2, floor(cont)), max(2, floor(cont) + 1)}
    best = min(sorted(cands), key=lambda G: float(budget_mse(c, G)))
    return GroupSizeOptimum(r, cont, int(best), c)
