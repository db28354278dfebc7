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

from .policies import as_problem
from .ustat import prompt_moments

__all__ = ["ScalingConstants", "scaling_constants", "GroupSizeOptimum", "optimal_group_size",
           "budget_mse"]


@dataclass(frozen=True)
class ScalingConstants:
    c1: float
    c2: float
    c3: float

    def mse(self, batch_size, group_size):
        """Exact GRPO minibatch MSE ``c1/B + c2/(BG) + c3/(BG(G-1))``."""
        B, G = np.asarray(batch_size, float), np.asarray(group_size, float)
        return self.c1 / B + self.c2 / (B * G) + self.c3 / (B * G * (G - 1))


def scaling_constants(bandit) -> ScalingConstants:
    """Exact c1, c2, c3 at the policy's current parameters."""
    problem = as_problem(bandit)
    mo = prompt_moments(problem)
    f = np.asarray(problem.prompt_probs)
    g = np.asarray(problem.gradient())
    c1 = float(f @ np.sum((np.asarray(mo.grad) - g) ** 2, axis=1))
    c2 = float(f @ np.asarray(mo.tr_sigma_oracle))
    c3 = float(f @ np.asarray(mo.score_sq * mo.sigma2 + mo.grad_sq))
    return ScalingConstants(c1, c2, c3)


def budget_mse(constants: ScalingConstants, group_size, budget: float = 1.0):
    """Exact GRPO MSE under a fixed budget ``N = B G`` (B = N/G allowed to be fractional)."""
    G = np.asarray(group_size, float)
    c = constants
    return (c.c1 * G + c.c2 + c.c3 / (G - 1)) / budget


@dataclass(frozen=True)
class GroupSizeOptimum:
    paper: float  # sqrt(c3/c1), Theorem 7
    continuous: float  # 1 + sqrt(c3/c1), the exact form's real minimiser
    exact: int  # integer argmin over G >= 2 of the exact fixed-budget MSE
    constants: ScalingConstants


def optimal_group_size(bandit) -> GroupSizeOptimum:
    """G* predicted by the scaling law at the policy's current parameters.

    ``c1 = 0`` (all prompts share one gradient) makes larger groups always better: G* = inf.
    """
    c = scaling_constants(bandit)
    if c.c1 <= 0:
        return GroupSizeOptimum(float("inf"), float("inf"), np.iinfo(np.int64).max, c)
    r = sqrt(c.c3 / c.c1)
    cont = 1.0 + r
    cands = {max(2, floor(cont)), max(2, floor(cont) + 1)}
    best = min(sorted(cands), key=lambda G: float(budget_mse(c, G)))
    return GroupSizeOptimum(r, cont, int(best), c)


from .._precision import scope_module as _scope  # noqa: E402

_scope(globals())
