"""The engine every claim uses: policies -> sampling -> estimators -> exact / Monte Carlo MSE ->
U-statistics -> scaling-law constants.

This ``__init__`` is the face of :mod:`grpo_theory.core`: ``__all__`` lists the public names;
the modules below it hold the code (``from grpo_theory.core import exact_mse``).

**The reward of this layer** is a table, not a function: a
:class:`~grpo_theory.core.problem.DiscreteProblem` carries ``reward_means`` (P, K), the mean
``mu(x, y) = E[Z | x, y]`` of the Bernoulli reward ``Z in {0, 1}`` of response ``y`` to prompt
``x``; sampling draws ``Z ~ Bernoulli(mu(x, y))`` (:class:`RewardTable` names the contract).
"""

from .problem import DiscreteProblem, RewardTable, as_problem
from .policy import EnumerablePolicy, GradientProblem, PolicyWrapper
from .policies import LinearSoftmaxBandit, SequencePolicy, SoftmaxBandit, n_sequences
from .sampling import sample_from_uniforms, sample_groups
from .closed_forms import (BASIS_PIECES, PIECES, ClosedForm, CrossPromptMean, GivenBaseline,
                           GroupMean, LeaveOneOut, MissingClosedForm, NoBaseline, OptimalBaseline,
                           OracleBaseline)
from .estimators import (CONTEXT_FIELDS, STD_PRESETS, Estimator, PooledForm, PromptContext,
                         available_estimators, batch_context, compute_advantages, get_estimator,
                         grpo_std, prompt_baseline, register)
from .framework_presets import grpo_vectorized, reinforce_baseline  # registers them
from .baselines import basis, pkpo, spo  # also registers jspo, norm_weighted, spo, pkpo, ...
from .history_baselines import at_state, dbb, ebpo, kae  # registers ebpo, dbb, kae
from .batch_exact import DESIGNS, BatchMoments, batch_moments, verl_proxy_audit
from .verl_estimators import gdpo, grpo_passk, whiten_tokens
from .frameworks import FRAMEWORK_OPTIONS, advantage_options, framework_table, preset
from .exact import (enumerate_estimates, enumerated_moments, exact_gradient, exact_mse,
                    exact_prompt_mean_and_variance, exact_prompt_mse)
from .gram import ExplicitScores, ScoreStructure, TabularScores, as_structure
from .montecarlo import MCResult, estimate_gradient, mc_estimates, mc_mse
from .stats import (Estimate, Result, ResultMixin, ScalarResultMixin, estimate_mean, t_value,
                    z_value)
from .ustat import (HoeffdingResult, PromptMoments, exact_mse_closed_form, hoeffding_exact,
                    hoeffding_mc, leading_order_mse, minibatch_mse, prompt_moments, sigma_oracle,
                    u_statistic)
from .scaling import (GroupSizeOptimum, ScalingConstants, budget_mse, optimal_group_size,
                      scaling_constants)
from .cross_prompt import CrossPromptPieces, basis_pieces
from .noise import NoiseScale, noise_scale
from .objective import exact_objective, maximise
from .rollouts import RolloutStatistics
from .rollout_rules import (Draw, ProblemSampler, RolloutRule, Sampler, Step, kept_weights,
                            loo_weights, mask_from_sizes)
from .estimators import masked_leave_one_out, per_response


# the names the layers above use beside the ones listed first (one import path: this face)
from .closed_forms import closed_form_of
from .exact import binary_advantages
from .montecarlo import summarize_squared_errors
from .noise import grpo_noise_scale
from .scaling import grid_argmin

__all__ = [
    # problems and policies: the two contracts, then the package's policies
    "DiscreteProblem", "as_problem", "RewardTable",
    "EnumerablePolicy", "GradientProblem", "PolicyWrapper",
    "SoftmaxBandit", "LinearSoftmaxBandit", "SequencePolicy", "n_sequences",
    # sampling
    "sample_groups", "sample_from_uniforms",
    # the estimator registry
    "Estimator", "PooledForm", "PromptContext", "register", "get_estimator", "available_estimators",
    "compute_advantages", "grpo_std", "prompt_baseline", "grpo_vectorized",
    "reinforce_baseline", "STD_PRESETS", "CONTEXT_FIELDS", "batch_context",
    # verl 0.9.1's own estimators (registered on import as <verl name>_verl)
    "grpo_passk", "gdpo", "whiten_tokens",
    # an estimator's closed forms (the open contract of the exact, advisor and theory routes)
    "ClosedForm", "MissingClosedForm", "PIECES", "NoBaseline", "OracleBaseline",
    "OptimalBaseline", "GivenBaseline", "LeaveOneOut", "GroupMean", "CrossPromptMean",
    "BASIS_PIECES",
    # framework conventions
    "preset", "advantage_options", "framework_table", "FRAMEWORK_OPTIONS",
    # exact and Monte Carlo MSE
    "exact_gradient", "exact_mse", "exact_prompt_mse", "exact_prompt_mean_and_variance",
    "enumerate_estimates", "enumerated_moments",
    # exact moments by count states: batch-coupled and per-response weighted estimators
    "batch_moments", "BatchMoments", "DESIGNS", "verl_proxy_audit", "pkpo", "spo",
    # the field's history and cross-prompt baselines (core/history_baselines.py, baselines.py)
    "basis", "ebpo", "dbb", "kae", "at_state",
    "MCResult", "mc_mse", "mc_estimates", "estimate_gradient",
    # score structures
    "ScoreStructure", "TabularScores", "ExplicitScores", "as_structure",
    # the result interface
    "Result", "ResultMixin", "ScalarResultMixin", "Estimate", "estimate_mean", "z_value",
    "t_value",
    # U-statistics
    "u_statistic", "HoeffdingResult", "hoeffding_exact", "hoeffding_mc", "PromptMoments",
    "prompt_moments", "minibatch_mse", "exact_mse_closed_form", "leading_order_mse",
    "sigma_oracle",
    # the scaling law
    "ScalingConstants", "scaling_constants", "GroupSizeOptimum", "optimal_group_size",
    "NoiseScale", "noise_scale",
    "budget_mse",
    # BASIS's exact MSE in closed form (core/cross_prompt.py)
    "CrossPromptPieces", "basis_pieces",
    # the exact objective J(theta) and the multi-start maximiser of sup J
    "exact_objective", "maximise",
    # a rollout batch's inner products (what the advisor's estimates read)
    "RolloutStatistics",
    # what a training loop and a rollout rule say to each other (core/rollout_rules.py)
    "RolloutRule", "Sampler", "Draw", "Step", "ProblemSampler", "kept_weights", "loo_weights",
    "masked_leave_one_out", "mask_from_sizes", "per_response",
]
__all__ += ["closed_form_of", "binary_advantages", "summarize_squared_errors", "grpo_noise_scale",
            "grid_argmin"]
