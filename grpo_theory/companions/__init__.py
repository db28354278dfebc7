"""The companion papers: credit assignment, length weighting, DPPO pruning, dense packing and
practical GRPO (Appendix A).

This ``__init__`` is the face of :mod:`grpo_theory.companions`: ``__all__`` lists the public
names; :mod:`.credit`, :mod:`.length_weighting`, :mod:`.dppo`, :mod:`.packing` and
:mod:`.practical` hold the code (and their less used helpers).

Rewards are those of the core (:class:`grpo_theory.core.RewardTable`: a problem's Bernoulli
reward means), except the toy language model of :mod:`.packing`, which has no reward.
"""

from .mlp_policy import MLPSequencePolicy
from .credit import (baseline_comparison, binary_scalar, class_plane_energy,
                     group_gradient, rank_measures, rank_study, score_reward_correlation,
                     sequence_level_gradient, token_advantages, token_level_gradient,
                     train_grpo_records, zero_advantage_probability, zero_group_fraction)
from .length_weighting import (AGGREGATION_MODES, TRL_LOSS_TYPES, alpha_sweep, bias_metrics,
                               conditional_advantages, enumerate_expected_gradient,
                               exact_expected_gradient, expected_flow, length_sensitivity,
                               length_weights, mode_alpha, surrogate_gradient,
                               train_length_weighted)
from .dppo import (KeepScheme, added_variance, exact_pruned_mse, exact_pruning_expectation,
                   full_estimate, mc_pruned_mse, pruned_estimate, response_lengths)
from .packing import (Packing, naive_batching, pack, pack_tokens, segment_causal_attention,
                      unpack_tokens)
from .practical import (ExactMoments, ResponseTerms, decomposition, exact_moments,
                        mc_squared_errors, practical_group_gradient, response_terms,
                        target_gradient)

# the names the layers above use beside the ones listed first (one import path: this face)
from .credit import RANK_FIELDS, rank_measures_from_gram
from .dppo import masked_advantages

__all__ = [
    # credit assignment: token- vs sequence-level gradients, the rank of group gradients
    "token_level_gradient", "sequence_level_gradient", "token_advantages", "group_gradient",
    "binary_scalar", "rank_measures", "class_plane_energy", "MLPSequencePolicy", "rank_study",
    "zero_advantage_probability", "zero_group_fraction", "baseline_comparison",
    "train_grpo_records", "score_reward_correlation",
    # length weighting of the token losses
    "length_weights", "AGGREGATION_MODES", "TRL_LOSS_TYPES", "mode_alpha",
    "conditional_advantages", "exact_expected_gradient", "enumerate_expected_gradient",
    "surrogate_gradient", "bias_metrics", "length_sensitivity", "alpha_sweep",
    "train_length_weighted", "expected_flow",
    # DPPO pruning
    "KeepScheme", "full_estimate", "pruned_estimate", "added_variance",
    "exact_pruning_expectation", "exact_pruned_mse", "mc_pruned_mse", "response_lengths",
    # dense packing
    "Packing", "pack", "naive_batching", "pack_tokens", "unpack_tokens",
    "segment_causal_attention",
    # practical GRPO (Appendix A)
    "ResponseTerms", "response_terms", "practical_group_gradient", "ExactMoments",
    "exact_moments", "target_gradient", "decomposition", "mc_squared_errors",
]
__all__ += ["RANK_FIELDS", "rank_measures_from_gram", "masked_advantages"]
