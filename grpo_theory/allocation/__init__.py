"""Rollout allocation: the exact theory of unequal and adaptive group sizes.

Rules (:mod:`.rules`) are small frozen values in a registry keyed by name, made by constructors
(:func:`fixed`, :func:`per_prompt`, :func:`pass_rate_allocation`, :func:`dynamic_sampling`,
:func:`conformal_stopping`, :func:`max_variance_subset`, :func:`successive_elimination`,
:func:`balanced_elimination`). :func:`audit` gives a rule's exact mean, bias, MSE, expected
rollouts and prompt weights by dynamic programming over count states (:mod:`.dp`);
:func:`enumerate_rule` (brute force over response sequences) and :func:`monte_carlo` are the
references it is tested against.
"""

from .auditor import audit, check_estimator
from .dp import NORMALISERS, PromptMoments, answer_agreement_moments, count_moments
from .reference import EnumeratedAudit, MonteCarloAudit, enumerate_rule, monte_carlo
from .result import AllocationAudit
from .rules import (FixedSize, PassRateRule, PerPromptSize, Rule, available_rules, fixed,
                    get_rule, pass_rate_allocation, pass_rate_rule, per_prompt, register_rule)
from ..core import Draw, Sampler, Step, loo_weights  # the loops' contract (core.rollout_rules)
from .adaptive import (ConformalStopping, DynamicSampling, MaxVarianceSubset,
                       SuccessiveElimination, balanced_elimination, conformal_stopping,
                       dynamic_sampling, max_variance_subset, successive_elimination)

__all__ = ["NORMALISERS", "audit", "check_estimator", "AllocationAudit", "PromptMoments",
           "count_moments", "answer_agreement_moments",
           "Rule", "FixedSize", "PerPromptSize", "DynamicSampling", "ConformalStopping",
           "MaxVarianceSubset", "SuccessiveElimination", "available_rules", "get_rule",
           "register_rule", "fixed", "per_prompt", "pass_rate_allocation", "dynamic_sampling",
           "conformal_stopping", "max_variance_subset", "successive_elimination",
           "balanced_elimination", "EnumeratedAudit", "enumerate_rule", "MonteCarloAudit",
           "monte_carlo", "PassRateRule", "pass_rate_rule", "Draw", "Sampler", "Step",
           "loo_weights"]

# the MSE-optimal unbiased allocation (greedy marginal allocation of per-prompt constants)
from .optimal import (Allocation, OptimalAllocation, PlugInResult, PromptConstants,  # noqa: E402
                      estimated_constants, greedy_allocation, optimal_allocation, optimal_rule,
                      plug_in_mse, prompt_constants, uniform_allocation)

__all__ += ["PromptConstants", "prompt_constants", "estimated_constants", "Allocation",
            "optimal_allocation", "uniform_allocation", "greedy_allocation", "plug_in_mse",
            "PlugInResult", "OptimalAllocation", "optimal_rule"]

# the same greedy step in JAX, for training loops (jit-able)
from .greedy import mse_gains, sizes_from_gains, unique_answer_constants  # noqa: E402

__all__ += ["sizes_from_gains", "mse_gains", "unique_answer_constants"]
