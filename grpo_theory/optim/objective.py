"""The exact objective ``J(theta)`` of an enumerable policy and its supremum ``sup J``.

``sup J`` is each problem's own :meth:`max_objective` (the contracts
:class:`~grpo_theory.core.policy.EnumerablePolicy` and
:class:`~grpo_theory.core.policy.GradientProblem`): a closed form for tabular policies, L-BFGS
from several starts (:func:`maximise`) for shared parameters, see
:mod:`grpo_theory.optim.train`'s docstring. :func:`exact_objective` and :func:`maximise` live in
:mod:`grpo_theory.core.objective`.
"""

from __future__ import annotations

from .._precision import float64
from ..core import EnumerablePolicy, GradientProblem


@float64
def max_objective(policy) -> float:
    """sup_theta J(theta): the problem's own ``max_objective()``.

    Args:
        policy: an :class:`~grpo_theory.core.policy.EnumerablePolicy` (``SoftmaxBandit``,
            ``SequencePolicy``: ``E_X max_y mu``; ``LinearSoftmaxBandit``: L-BFGS; other
            enumerable policies: the best-response value ``E_X max_y mu``, an upper bound) or a
            :class:`~grpo_theory.core.policy.GradientProblem` with ``max_objective()``.
    Returns:
        The supremum as a float.
    """
    if not isinstance(policy, (EnumerablePolicy, GradientProblem)):
        raise ValueError(
            "policy must be an enumerable policy (an EnumerablePolicy: SoftmaxBandit, "
            "LinearSoftmaxBandit, SequencePolicy, ...) or a GradientProblem, got "
            f"{type(policy).__name__}")
    return float(policy.max_objective())
