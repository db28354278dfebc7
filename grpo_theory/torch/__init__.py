"""The advisor for PyTorch / ``transformers`` models and a TRL ``GRPOTrainer`` callback.

Optional extra ``torch`` (``pip install -e ".[torch]"``: torch, transformers, accelerate, trl,
peft); ``import grpo_theory`` never imports this subpackage or torch.

This ``__init__`` is the face of :mod:`grpo_theory.torch`: ``__all__`` lists the public names.

* :func:`estimate_from_torch_rollouts`: c1, c2, c3, G* for a causal LM on given rollouts (O(D)
  memory, ghost norms), :func:`score_statistics` the inner products it uses;
* :func:`estimate_from_torch_model`: samples the rollouts with the model's ``generate`` first;
* :class:`GroupSizeAdvisor` (:mod:`.callback`): a ``transformers.TrainerCallback`` for
  ``trl.GRPOTrainer`` that logs the estimate every K steps from the trainer's own rollouts;
* :class:`GroupSizeScheduler` (:mod:`.scheduler`): a second callback that changes TRL's group
  size at a fixed budget from the advisor's estimates (a re-chunking sampler,
  :class:`ReChunkingSampler`; :func:`propose_group_size` its rule);
* :class:`RolloutAllocator` (:mod:`.allocator`): a per-prompt group size G_i in TRL through its
  largest-G layout with masking, the sizes from a :class:`SizeRule` (:class:`PassRateSizes`,
  :class:`UniformSizes`, :class:`FunctionSizes`).
* :func:`grouped_variance_metrics` (:mod:`.verl_metrics`): a verl batch's grouped, unbiased
  gradient noise and signal in logit space, beside verl's ``variance_proxy/*`` metrics
  (:func:`grouped_variance` on plain tensors). The verl plug-in is
  :mod:`grpo_theory.torch.verl_plugin` (imported by verl, not here).

**The reward of this layer** is TRL's reward-function convention,
``reward(prompts, completions) -> rewards`` on text (:class:`CompletionReward`);
``estimate_from_torch_rollouts`` takes the (m, n) rewards themselves.

``estimate_from_model`` and ``estimate_scaling_constants`` are the previous release's names of
the two estimates: they still work and emit a ``DeprecationWarning`` naming the new one.

**GPU memory.** The estimates run JAX beside torch. JAX's default on a GPU takes 75% of its
memory when its first array is made; importing this subpackage sets
``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (allocation on demand) unless the variable is already
set, so JAX never holds memory the trainer needs. It takes effect when JAX first starts its
GPU backend: set the variable yourself before using JAX on the GPU in the same process.
"""

from __future__ import annotations

import os

# before JAX starts a GPU backend (it reads the variable then): allocate on demand
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from .callback import (LOGGED, GroupSizeAdvisor, trl_preset,  # noqa: E402
                       trl_sequence_weighting)
from .estimate import (CompletionReward, estimate_from_torch_model,  # noqa: E402
                       estimate_from_torch_rollouts, response_mask_from_eos, score_statistics,
                       sequence_log_probs)
from .estimate import estimate_from_model, estimate_scaling_constants  # noqa: F401,E402
from .allocator import (FunctionSizes, PassRateSizes, RolloutAllocator,  # noqa: E402
                        RuleSizes, SizeRule, UniformSizes)
from .scheduler import GroupSizeScheduler, ReChunkingSampler  # noqa: E402
from .verl_metrics import grouped_variance, grouped_variance_metrics  # noqa: E402
# the scheduler's rule, pure and torch-free, lives with the advisor
from grpo_theory.advisor import allowed_group_sizes, propose_group_size  # noqa: E402

__all__ = ["estimate_from_torch_rollouts", "estimate_from_torch_model", "CompletionReward",
           "score_statistics", "sequence_log_probs", "response_mask_from_eos",
           "GroupSizeAdvisor", "trl_preset", "trl_sequence_weighting", "LOGGED",
           "GroupSizeScheduler", "ReChunkingSampler", "allowed_group_sizes", "propose_group_size",
           "RolloutAllocator", "SizeRule", "UniformSizes", "PassRateSizes", "FunctionSizes",
           "RuleSizes",
           "grouped_variance", "grouped_variance_metrics"]
