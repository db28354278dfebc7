r"""The statistics of sampled rollouts that the scaling-constant estimators read, as one record.

For m prompts ``x_a`` with n responses ``y_ai`` each, rewards ``Z_ai`` and scores
``s_ai = grad_theta log pi(y_ai | x_a)``, the unbiased estimates of c1, c2, c3 (the main paper,
Theorem 7; :func:`grpo_theory.advisor.estimate_from_rollouts`) need only

* the rewards ``Z`` (m, n) and the squared norms ``q_ai = ||s_ai||^2`` (m, n);
* the per-prompt ("group") norms ``||ghat_a||^2`` (m,) of ``ghat_a = (1/n) sum_i Z_ai s_ai``;
* the dot products ``<ghat_a, S>`` (m,) with ``S = sum_b ghat_b``.

Every route that computes them (the JAX policies, :mod:`grpo_theory.lm.budget.statistics`; PyTorch
models, :mod:`grpo_theory.torch`; given scores) returns a :class:`RolloutStatistics`, and the
estimators accept it.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np


@dataclass(frozen=True)
class RolloutStatistics:
    r"""Rewards and score inner products of m prompts x n responses (a JAX pytree).

    Attributes:
        rewards: (m, n) rewards ``Z_ai``.
        sq_norms: (m, n) squared score norms ``||s_ai||^2``.
        mean_sq: (m,) group norms ``||ghat_a||^2``, ``ghat_a = (1/n) sum_i Z_ai s_ai``.
        mean_dot: (m,) ``<ghat_a, S>``, ``S = sum_b ghat_b`` (so ``sum_a mean_dot_a =
            ||S||^2``).
        responses: the (m, n, R) sampled token ids they came from, or None.
        n_params: D, the number of score coordinates (static), or None.
        chunk: sequences per block of the pass that computed them (static), or None.

    The array fields are the pytree's leaves, ``n_params`` and ``chunk`` its static data.
    Shapes are checked by the estimators that read the record
    (:func:`grpo_theory.advisor.estimate_from_rollouts`), not here, so the record can carry
    tracers.
    """

    rewards: object
    sq_norms: object
    mean_sq: object
    mean_dot: object
    responses: object = None
    n_params: int | None = None
    chunk: int | None = None

    @property
    def n_prompts(self) -> int:
        """m, the number of prompts."""
        return int(np.shape(self.rewards)[0])

    @property
    def n_samples(self) -> int:
        """n, the number of responses per prompt."""
        return int(np.shape(self.rewards)[1])

    def as_dict(self) -> dict:
        """The fields that are set (not None), by name (e.g. for ``numpy.savez``)."""
        return {k: getattr(self, k) for k in _FIELDS if getattr(self, k) is not None}


_DATA = ("rewards", "sq_norms", "mean_sq", "mean_dot", "responses")
_FIELDS = _DATA + ("n_params", "chunk")
jax.tree_util.register_dataclass(RolloutStatistics, data_fields=list(_DATA),
                                 meta_fields=["n_params", "chunk"])
