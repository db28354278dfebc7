r"""BASIS's exact MSE in closed form: the population pieces of a cross-prompt baseline.

BASIS's baseline for prompt x is ``b_x`` = the mean of the other B - 1 prompts' group means
(:func:`grpo_theory.core.baselines.basis`). With prompts iid, G responses each, ``q = ||s||^2``,
``J = E Z``, ``m0 = E[q]``, ``V(x) = E[Z|x]``, ``sigma^2(x) = Var(Z|x)`` and ``g(x) = E[s Z|x]``,

.. math:: \mathrm{MSE}(B, G) = \frac{c_1}{B} + \frac{c_J}{BG}
          + \frac{(\mathrm{Var}_X V + E\sigma^2/G)\, m_0}{BG(B-1)} + \frac{\|g\|^2}{B(B-1)G^2},

``c_J = E[q (Z - J)^2] - E||g(X)||^2 = c_v - 2 J E[q Z] + J^2 m0``. (Write ``ghat = (1/B)
sum_i (U_i - b_i S_i)`` with ``U_i = (1/G) sum_k s_ik Z_ik``, ``S_i = (1/G) sum_k s_ik``; ``b_i``
is independent of prompt i, ``E[b_i^2] = J^2 + Var(Zbar_G)/(B-1)``, ``E<U_i, S_i> = E[q Z]/G``,
``E||S_i||^2 = m0/G``; of the cross terms only ``E[b_i b_j <S_i, S_j>] = ||g||^2/(G^2 (B-1)^2)``
survives.) :func:`basis_pieces` gives the pieces exactly; the weights over them are
:meth:`~grpo_theory.core.closed_forms.CrossPromptMean.mse_weights`, which the ``basis``
estimator carries.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from .._precision import float64
from .closed_forms import BASIS_PIECES, CrossPromptMean
from .gram import as_structure
from .ustat import prompt_moments


@dataclass(frozen=True)
class CrossPromptPieces:
    """The population moments of BASIS's exact MSE (Bernoulli rewards: ``Z^2 = Z``).

    Attributes:
        mean_reward: ``J = E Z``. score_sq: ``m0 = E[q]``. score_sq_z: ``E[q Z]``.
        value_var: ``Var_X V(X)``. value_sq: ``E[V(X)^2]``. sigma2: ``E[sigma^2(X)]``.
        c1, c_v, grad_sq: as in :data:`~grpo_theory.core.closed_forms.PIECES`.
    """

    mean_reward: float
    score_sq: float
    score_sq_z: float
    value_var: float
    value_sq: float
    sigma2: float
    c1: float
    c_v: float
    grad_sq: float

    @property
    def c_j(self) -> float:
        """``c_J = c_v - 2 J E[q Z] + J^2 m0 = E[q (Z - J)^2] - E||g(X)||^2``."""
        J = self.mean_reward
        return self.c_v - 2 * J * self.score_sq_z + J**2 * self.score_sq

    def vector(self) -> np.ndarray:
        """The pieces in the order of :data:`~grpo_theory.core.closed_forms.BASIS_PIECES` (7,)."""
        J, m0 = self.mean_reward, self.score_sq
        named = dict(c1=self.c1, c_v=self.c_v, grad_sq=self.grad_sq, j_qz=J * self.score_sq_z,
                     j2_q=J**2 * m0, v2_q=self.value_sq * m0, s2_q=self.sigma2 * m0)
        return np.array([named[k] for k in BASIS_PIECES], dtype=np.float64)

    def mse(self, batch_size, group_size):
        """BASIS's exact MSE with B >= 2 prompts of G responses (arrays broadcast).

        Args:
            batch_size: B >= 2; group_size: G > 0.

        Returns:
            The MSE (float, or an array for array inputs).
        """
        out = CrossPromptMean().mse_weights(batch_size, group_size) @ self.vector()
        return float(out) if np.ndim(out) == 0 else out


@float64
def basis_pieces(problem) -> CrossPromptPieces:
    """Exact population pieces of BASIS's MSE at the policy's current parameters.

    Args:
        problem: a policy, a :class:`~grpo_theory.core.problem.DiscreteProblem` or a score
            structure (Bernoulli rewards).

    Returns:
        :class:`CrossPromptPieces` (``.mse(B, G)``: the exact MSE; ``.vector()``: the pieces).

    Examples:
        BASIS's exact MSE equals the pooled route's:

        >>> from grpo_theory.core import SoftmaxBandit, basis_pieces, batch_moments
        >>> bandit = SoftmaxBandit([[0.0, 1.0, -1.0], [0.5, 0.0, 0.0]],
        ...                        [[1.0, 0.0, 0.5], [0.2, 0.9, 0.0]])
        >>> round(basis_pieces(bandit).mse(batch_size=2, group_size=3), 6)
        0.038968
        >>> round(batch_moments(bandit, "basis", 3, 2).mse, 6)
        0.038968
    """
    J, m0, qz, var_v, v2, s2, c1, c_v, grad_sq = (float(x) for x in
                                                   np.asarray(_moments(as_structure(problem))))
    return CrossPromptPieces(mean_reward=J, score_sq=m0, score_sq_z=qz, value_var=var_v,
                             value_sq=v2, sigma2=s2, c1=c1, c_v=c_v, grad_sq=grad_sq)


@jax.jit
def _moments(st):
    """``(J, m0, E[q Z], Var_X V, E[V^2], E[sigma^2], c1, c_v, ||grad J||^2)`` in one compiled
    call per structure shape."""
    mo = prompt_moments(st)
    f, v = st.prompt_probs, mo.value
    J = f @ v
    c1, grad_sq = st.spread(f, mo.grad), st.mean_sq(f, mo.grad)  # as the advisor's PIECES
    c_v = f @ (mo.score_sq_z - mo.grad_sq)
    return jnp.stack([J, f @ mo.score_sq, f @ mo.score_sq_z, f @ (v - J) ** 2, f @ v**2,
                      f @ mo.sigma2, c1, c_v, grad_sq])
