"""Algorithm 1 training and the optimisation theory (Lemma 6, Theorem 8).

This ``__init__`` is the face of :mod:`grpo_theory.optim`: ``__all__`` lists the public names.
Algorithm 1's one-call entry point, the function ``train``, is ``grpo_theory.train`` (and
``grpo_theory.optim.train.train``); the name ``train`` inside this package stays the module
:mod:`grpo_theory.optim.train`, so ``from grpo_theory.optim import train as T`` keeps working.

Rewards are those of the core (:class:`grpo_theory.core.RewardTable`: a problem's Bernoulli
reward means); the Gaussian bandit of :mod:`.theory` draws Gaussian rewards around its means.
"""

from .train_types import TrainConfig, TrainResult
from .train import make_train, train_batch, train_schedules
from .objective import max_objective
from .schedules import SCHEDULES, schedule, step_sizes
from .theory import (AsymptoticPrediction, Constants, GaussianBandit, asymptotic_prediction,
                     gaussian_bandit, gradient_covariance, gradient_mse, lemma6_constant_bound,
                     lemma6_decreasing_bound, lemma6_recursion, limiting_covariance,
                     mc_gradient_moments, problem_constants, sample_gradient, sup_mse)
from .chi2_mixture import (chi2_weights, lyapunov_covariance, mixture_cdf, mixture_quantile,
                           sample_mixture)
from .clipped import clipped_surrogate, multi_epoch_update

# the names the layers above use beside the ones listed first (one import path: this face)
from .train import seed_keys

__all__ = [
    # Algorithm 1 (one compiled loop)
    "TrainConfig", "TrainResult", "make_train", "train_batch", "train_schedules",
    "max_objective", "step_sizes", "schedule", "SCHEDULES",
    # the optimisation theory on the Gaussian bandit (Lemma 6, Theorem 8)
    "GaussianBandit", "gaussian_bandit", "Constants", "problem_constants",
    "gradient_covariance", "gradient_mse", "limiting_covariance", "sup_mse", "sample_gradient",
    "mc_gradient_moments", "lemma6_constant_bound", "lemma6_recursion",
    "lemma6_decreasing_bound", "lyapunov_covariance", "AsymptoticPrediction",
    "asymptotic_prediction", "chi2_weights", "mixture_cdf", "mixture_quantile",
    "sample_mixture",
    # the clipped multi-epoch surrogate
    "clipped_surrogate", "multi_epoch_update",
]
__all__ += ["seed_keys"]
