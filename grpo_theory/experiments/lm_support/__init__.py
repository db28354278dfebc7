"""The language-model studies' library code (used by the studies only, not by the library).

* :mod:`.gradmse`: the gradient-MSE study of the small transformer (``lm-mse``);
* :mod:`.rank`: the rank of the G x G score Gram and the zero-share estimates (``lm-rank``,
  ``smollm2``);
* :mod:`.mixture` and :mod:`.mixture_mc`: the fixed-budget MSE with prompts drawn from a mixture
  (``scaling-family``);
* :mod:`.advised`: the advisor's sample-based c1, c2, c3 and G* on the arithmetic task
  (``lm-groupsize``, ``allocation_lm``).

This ``__init__`` is the face of :mod:`grpo_theory.experiments.lm_support`: ``__all__`` lists
its public names.
"""

from .gradmse import gradient_mse_study
from .rank import group_rank_table, numerical_rank, zero_share_unbiased
from .mixture import mixture_constants, mixture_objective
from .mixture_mc import mixture_mse_prediction
from .advised import advised_group_size

__all__ = ["gradient_mse_study", "group_rank_table", "numerical_rank", "zero_share_unbiased",
           "mixture_constants", "mixture_objective", "mixture_mse_prediction",
           "advised_group_size"]
