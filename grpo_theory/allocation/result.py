"""The audit's result record (the package's :class:`~grpo_theory.core.stats.Result` interface)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core import ResultMixin


#: the rows of :meth:`AllocationAudit.summary`
SUMMARY_ROWS = ("bias_norm", "relative_bias", "cosine", "mse", "expected_rollouts",
                "batch_rollouts")


@dataclass(frozen=True, eq=False)
class AllocationAudit(ResultMixin):
    """Exact moments of one rule's gradient estimate (:func:`grpo_theory.allocation.audit`).

    Exact numbers carry a zero standard error, so ``conf_int`` gives degenerate intervals.

    Attributes:
        rule: the rule's name; estimator: the estimator's name; normaliser: ``"group"`` or
            ``"token"``; batch_size: B.
        mean: ``E[ghat]``, shaped like the gradient.
        gradient: the estimator's target, ``grad J`` (``grad pass@k`` for an estimator with
            ``pass_k = k``, :attr:`grpo_theory.core.Estimator.pass_k`), same shape.
        mse: ``E||ghat - grad J||^2`` for a batch of B prompts.
        expected_rollouts: expected responses sampled per prompt of the training batch.
        batch_rollouts: expected responses sampled per training batch.
        prompt_weights: (P,) ``w_x <m_x, g(x)> / ||g(x)||^2`` with ``w`` the slot law and ``m_x``
            the prompt's conditional mean: ``f(x)`` for an unbiased rule (NaN where g(x) = 0).
        prompt_rollouts: (P,) expected responses sampled for prompt x.
        acceptance: (P,) probability that prompt x's group is kept.
        slot_weights: (P,) the law of the prompt in one batch slot.
        prompt_probs: (P,) the problem's prompt law f.
        prompt_norms: (P,) ``||w_x m_x||^2`` and ``(P,)`` ``||f(x) g(x)||^2`` as the pair
            ``(rule, unbiased)``; meaningful as shares for disjoint (tabular) parameters.
    """

    rule: str
    estimator: str
    normaliser: str
    batch_size: int
    mean: np.ndarray
    gradient: np.ndarray
    mse: float
    expected_rollouts: float
    batch_rollouts: float
    prompt_weights: np.ndarray
    prompt_rollouts: np.ndarray
    acceptance: np.ndarray
    slot_weights: np.ndarray
    prompt_probs: np.ndarray
    prompt_norms: tuple = field(repr=False, default=())

    @property
    def bias(self) -> np.ndarray:
        """``E[ghat] - grad J``, shaped like the gradient."""
        return self.mean - self.gradient

    @property
    def bias_norm(self) -> float:
        return float(np.linalg.norm(self.bias))

    @property
    def relative_bias(self) -> float:
        """``||E ghat - grad J|| / ||grad J||``."""
        return self.bias_norm / float(np.linalg.norm(self.gradient))

    @property
    def cosine(self) -> float:
        """The cosine between ``E ghat`` and ``grad J`` (NaN when either is zero)."""
        a, b = np.ravel(self.mean), np.ravel(self.gradient)
        den = np.linalg.norm(a) * np.linalg.norm(b)
        return float(a @ b / den) if den > 0 else float("nan")

    @property
    def shrinkage(self) -> float:
        """``1 - <E ghat, grad J> / ||grad J||^2``: the relative loss along the gradient."""
        g = np.ravel(self.gradient)
        return float(1.0 - np.ravel(self.mean) @ g / (g @ g))

    @property
    def prompt_shares(self) -> tuple:
        """``(rule, unbiased)`` per-prompt shares of ``||E ghat||^2`` (disjoint parameters)."""
        rule, unbiased = self.prompt_norms
        return rule / rule.sum(), unbiased / unbiased.sum()

    def _params(self):
        vals = [getattr(self, n) for n in SUMMARY_ROWS]
        return SUMMARY_ROWS, vals, [0.0] * len(vals), None
