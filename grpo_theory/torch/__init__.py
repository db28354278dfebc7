"""The advisor for PyTorch / ``transformers`` models and a TRL ``GRPOTrainer`` callback.

Optional extra ``torch`` (``pip install -e ".[torch]"``: torch, transformers, accelerate, trl,
peft); ``import grpo_theory`` never imports this subpackage or torch.

* :func:`estimate_from_model`: c1, c2, c3, G* for a causal LM on given rollouts (O(D) memory,
  ghost norms), :func:`score_statistics` the inner products it uses;
* :func:`estimate_scaling_constants`: samples the rollouts with ``model.generate`` first;
* :class:`GroupSizeAdvisor` (:mod:`.callback`): a ``transformers.TrainerCallback`` for
  ``trl.GRPOTrainer`` that logs the estimate every K steps from the trainer's own rollouts.
"""

from __future__ import annotations

from .callback import GroupSizeAdvisor, trl_preset, trl_sequence_weighting
from .estimate import (estimate_from_model, estimate_scaling_constants, response_mask_from_eos,
                       score_statistics, sequence_log_probs)

__all__ = ["GroupSizeAdvisor", "trl_preset", "trl_sequence_weighting", "estimate_from_model", "estimate_scaling_constants", "response_mask_from_eos",
           "score_statistics", "sequence_log_probs"]
