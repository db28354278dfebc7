"""grpo-theory: the theory of GRPO as runnable, checked code.

Layout (each stage imports only from the ones above it):

* :mod:`grpo_theory.core` - the policy contracts and enumerable policies, sampling, the estimator
  registry with each estimator's closed form, exact and Monte Carlo MSE, U-statistics, the
  scaling-law constants;
* :mod:`grpo_theory.optim` - Algorithm 1 training and the optimisation theory (Lemma 6, Thm 8);
* :mod:`grpo_theory.companions` - credit assignment, length weighting, DPPO pruning, packing;
* :mod:`grpo_theory.problems` - named example problems used by drivers, notebooks and tests;
* :mod:`grpo_theory.allocation` - rollout rules: their exact audit and their training step;
* :mod:`grpo_theory.lm` - the small transformer, model families, the score-statistics budget,
  checkpoints and the training loops;
* :mod:`grpo_theory.advisor` - c1, c2, c3 and G* from rollouts; ``grpo-theory advise``;
* :mod:`grpo_theory.experiments` - result tables, figures and the ``grpo-theory`` command;
  :mod:`grpo_theory.torch` - PyTorch and TRL (the ``torch`` extra).

Importing the package is lazy (submodules load on first attribute access) and leaves JAX's global
configuration alone: exact routines run in float64 inside a scoped ``jax.enable_x64``.
"""

from __future__ import annotations

import importlib
import warnings

__version__ = "0.3.0"

# public name -> the face that lists it (one import path per name)
_ATTRS = {
    # core
    **dict.fromkeys(("DiscreteProblem", "SoftmaxBandit", "LinearSoftmaxBandit", "SequencePolicy",
                     "as_problem", "EnumerablePolicy", "GradientProblem", "sample_groups",
                     "sample_from_uniforms", "STD_PRESETS", "Estimator", "PromptContext",
                     "available_estimators", "compute_advantages", "get_estimator", "grpo_std",
                     "prompt_baseline", "register", "grpo_vectorized", "reinforce_baseline",
                     "ClosedForm", "MissingClosedForm", "enumerate_estimates",
                     "enumerated_moments", "exact_gradient", "exact_mse", "exact_prompt_mse",
                     "exact_prompt_mean_and_variance", "MCResult", "estimate_gradient",
                     "mc_estimates", "mc_mse", "GroupSizeOptimum", "ScalingConstants",
                     "budget_mse", "optimal_group_size", "scaling_constants", "noise_scale",
                     "NoiseScale", "leading_order_mse", "sigma_oracle", "Estimate", "z_value",
                     "ScoreStructure", "as_structure"), "core"),
    # the group-size advisor
    **dict.fromkeys(("estimate_scaling_constants", "estimate_from_rollouts",
                     "ScalingEstimate"), "advisor"),
    # training
    **dict.fromkeys(("TrainResult", "train_schedules", "TrainConfig", "make_train"), "optim"),
    "train": "optim.train",  # the function: grpo_theory.optim.train is its module
}

# the subpackages and modules reachable as attributes
_MODULES = {
    "core": "core", "optim": "optim", "companions": "companions", "lm": "lm",
    "problems": "problems", "experiments": "experiments", "advisor": "advisor",
    "allocation": "allocation",
}

# the flat module names of the layout before the subpackages: they still resolve, with a
# DeprecationWarning naming the module's place now
_DEPRECATED_MODULES = {
    "policies": "core.policies", "sampling": "core.sampling", "estimators": "core.estimators",
    "frameworks": "core.frameworks", "stats": "core.stats", "gram": "core.gram",
    "exact": "core.exact", "montecarlo": "core.montecarlo", "ustat": "core.ustat",
    "scaling": "core.scaling", "training": "optim.train", "optimization": "optim.theory",
    "credit": "companions.credit", "length_weighting": "companions.length_weighting",
    "dppo": "companions.dppo", "packing": "companions.packing",
}

__all__ = sorted(_ATTRS) + ["__version__"]


def __getattr__(name: str):
    if name in _ATTRS:
        value = getattr(importlib.import_module(f".{_ATTRS[name]}", __name__), name)
    elif name in _MODULES:
        value = importlib.import_module(f".{_MODULES[name]}", __name__)
    elif name in _DEPRECATED_MODULES:
        new = _DEPRECATED_MODULES[name]
        warnings.warn(f"grpo_theory.{name} is deprecated and will be removed in the next "
                      f"release; use grpo_theory.{new}", DeprecationWarning, stacklevel=2)
        return importlib.import_module(f".{new}", __name__)  # not cached: warns on every use
    else:
        raise AttributeError(f"module 'grpo_theory' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_ATTRS) | set(_MODULES))
