r"""GRPO's gradient noise scale, exactly, and the iid noise scale that ignores the groups.

With B prompts of G responses (a budget of ``N = B G`` responses), GRPO's leave-one-out
estimate has the exact MSE ``(c1 G + c2 + c3/(G - 1)) / N`` (Theorem 7), so

.. math:: \frac{\mathrm{MSE}}{\|\nabla J\|^2} = \frac{B_\text{noise}(G)}{N}, \qquad
          B_\text{noise}(G) = \frac{c_1 G + c_2 + c_3/(G - 1)}{\|\nabla J\|^2}

(in responses): the budget at which the estimate's error equals the gradient's squared norm,
McCandlish et al.'s (2018) critical batch size for this estimator. ``B_noise(G) / G`` is the
same in prompts.

The *iid* noise scale treats the N responses as independent examples: it is the trace of the
covariance of one response's term ``u = (Z - mean of the other G - 1 rewards) s`` over
``||grad J||^2`` (what a per-example estimator of ``tr Sigma / |g|^2`` measures in a large
batch). With ``w(x) = E[||s||^2 (Z - V)^2 | x]`` and ``r(x) = E[||s||^2 | x] sigma^2(x)``,

.. math:: B_\text{iid}(G) = \frac{E_X[w(X) + r(X)/(G - 1)] - \|E\,u\|^2}{\|\nabla J\|^2}
          = \frac{c_1 + c_2 + (c_3 - E_X\|g(X)\|^2)/(G - 1)}{\|\nabla J\|^2}

(the second form when ``E[s | x] = 0``, as for every score), which misses the responses'
covariance within a group: ``B_noise - B_iid = (c1 (G - 1) + E_X||g(X)||^2/(G - 1)) /
||grad J||^2 > 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _validation as V
from .._precision import float64
from .gram import as_structure
from .scaling import ScalingConstants, scaling_constants
from .ustat import row_dot, prompt_moments


def grpo_noise_scale(c1, c2, c3, grad_norm_sq, group_size):
    """``B_noise(G) = (c1 G + c2 + c3/(G - 1)) / ||grad J||^2`` in responses (NumPy or JAX
    scalars and arrays of broadcastable shapes; the estimate route passes sample estimates)."""
    return (c1 * group_size + c2 + c3 / (group_size - 1)) / grad_norm_sq


@dataclass(frozen=True)
class NoiseScale:
    """GRPO's exact noise scale at one group size, with the iid one beside it (responses).

    Attributes:
        group_size: G.
        grpo: ``B_noise(G)``, the budget in responses at which MSE = ``||grad J||^2``.
        iid: ``B_iid(G)``, the noise scale with the responses taken as independent examples.
        grad_norm_sq: ``||grad J||^2``.
        constants: the :class:`~grpo_theory.core.scaling.ScalingConstants` c1, c2, c3.
    """

    group_size: int
    grpo: float
    iid: float
    grad_norm_sq: float
    constants: ScalingConstants

    @property
    def prompts(self) -> float:
        """``B_noise(G) / G``: the same budget in prompts of G responses."""
        return self.grpo / self.group_size

    @property
    def iid_ratio(self) -> float:
        """``B_iid / B_noise`` (< 1: the iid scale understates GRPO's noise)."""
        return self.iid / self.grpo

    def mse(self, budget) -> float:
        """GRPO's exact MSE at a budget of ``budget`` responses: ``||grad J||^2 B_noise / N``."""
        n = V.real_scalar("budget", budget, positive=True)
        return self.grad_norm_sq * self.grpo / n


@float64
def noise_scale(problem, group_size: int) -> NoiseScale:
    """GRPO's gradient noise scale ``B_noise(G)`` and the iid noise scale, exactly.

    Args:
        problem: a policy, a :class:`~grpo_theory.core.problem.DiscreteProblem` or a score
            structure.
        group_size: G >= 2 responses per prompt.

    Returns:
        :class:`NoiseScale` (module docstring for both definitions).

    Raises:
        ValueError: ``group_size`` below 2, or a problem whose gradient is zero (no noise scale).

    Examples:
        At a budget of ``B_noise`` responses the MSE equals ``||grad J||^2``:

        >>> from grpo_theory.core import SoftmaxBandit, exact_mse, noise_scale
        >>> bandit = SoftmaxBandit([[0.0, 1.0, -1.0], [0.5, 0.0, 0.0]],
        ...                        [[1.0, 0.0, 0.5], [0.2, 0.9, 0.0]])
        >>> ns = noise_scale(bandit, group_size=4)
        >>> round(ns.grpo, 3), round(ns.iid, 3)
        (10.452, 6.786)
        >>> bool(abs(exact_mse(bandit, "grpo", group_size=4, batch_size=2) - ns.mse(8)) < 1e-12)
        True
    """
    G = V.positive_int("group_size", group_size, 2)
    st = as_structure(problem)
    mo = prompt_moments(st)
    f = st.prompt_probs
    consts = scaling_constants(st)
    c1, c2, c3 = consts.c1, consts.c2, consts.c3
    grad_sq = f @ mo.grad_sq - c1
    if not float(grad_sq) > 0:
        raise ValueError("problem has a zero policy gradient (||grad J||^2 = 0): its noise scale "
                         "is infinite")
    v = mo.value
    # one response's term u = (Z - b) s with b the mean of G - 1 other rewards (independent of
    # (y, Z) given x, mean V, variance sigma^2/(G - 1)); binary Z
    second = mo.score_sq_z * (1 - 2 * v) + v**2 * mo.score_sq + mo.score_sq * mo.sigma2 / (G - 1)
    mean_u = mo.grad - v[:, None] * mo.mean_score
    mean_sq = f @ row_dot(mean_u, mean_u) - st.spread(f, mean_u)  # ||E u||^2
    iid = (f @ second - mean_sq) / grad_sq
    grpo = grpo_noise_scale(c1, c2, c3, grad_sq, G)
    return NoiseScale(G, float(grpo), float(np.asarray(iid)), float(grad_sq), consts)
