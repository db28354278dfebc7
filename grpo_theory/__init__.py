"""grpo-theory: the theory of GRPO as runnable, checked code.

Float64 is switched on at import (``jax_enable_x64``): exact identities are tested to tight
tolerances and need it.
"""

import jax as _jax

_jax.config.update("jax_enable_x64", True)

from . import estimators, exact, montecarlo, policies, scaling, ustat  # noqa: E402
from .estimators import (  # noqa: E402
    STD_PRESETS, Estimator, PromptContext, available_estimators, compute_advantages,
    get_estimator, grpo_std, prompt_baseline, register,
)
from .exact import (  # noqa: E402
    enumerate_estimates, enumerated_moments, exact_gradient, exact_mse, exact_prompt_mse,
    exact_prompt_mean_and_variance,
)
from .montecarlo import MCResult, estimate_gradient, mc_estimates, mc_mse, sample_groups  # noqa: E402
from .policies import (  # noqa: E402
    DiscreteProblem, LinearSoftmaxBandit, SequencePolicy, SoftmaxBandit, as_problem,
)
from .scaling import (  # noqa: E402
    GroupSizeOptimum, ScalingConstants, budget_mse, optimal_group_size, scaling_constants,
)
from .ustat import leading_order_mse, sigma_oracle  # noqa: E402
from . import optimization  # noqa: E402  (issue 3, claims 4-5: Lemma 6, Theorem 8)
from . import dppo, packing  # noqa: E402  (issue 4.3: DPPO pruning, dense packing)

from . import training  # noqa: E402  (issue 3: Algorithm 1 training loop)
from .training import TrainResult, train, train_schedules  # noqa: E402

from . import credit, length_weighting  # noqa: E402  (issue 4.1-4.2)

__version__ = "0.1.0"
