"""Checks of the torch route's inputs: the model is a causal LM on a real device, the prompts are
left-padded, the rewards are a finite real array; each a one-line ``ValueError`` naming the
argument."""

from __future__ import annotations

import numpy as np
import torch

from grpo_theory import _validation as V

#: the attribute a RolloutAllocator marks its trainer with (a GroupSizeAdvisor made later
#: refuses that trainer: its groups have unequal sizes)
ALLOCATOR_MARK = "_grpo_theory_rollout_allocator"

#: the range ``torch.manual_seed`` accepts
SEED_MIN, SEED_MAX = 0, 2 ** 64 - 1


def _causal_names():
    # transformers' own table of the causal-LM class of each model type (the classes
    # AutoModelForCausalLM builds), and of the masked-LM ones (encoder families)
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES)

    return set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()), set(MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def check_causal(model):
    """Refuse a ``transformers`` model that is not a causal LM.

    The fact used: the model's class (a PEFT wrapper's base model) is one of
    ``transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``' classes (what
    ``AutoModelForCausalLM`` builds) or its name ends in ``ForCausalLM``; for an encoder family
    (its ``config.model_type`` has a masked-LM class, e.g. BERT's ``BertLMHeadModel``) the
    ``config.is_decoder`` flag, which switches on the causal attention mask, must also be set.
    A plain ``torch.nn.Module`` (not a ``transformers.PreTrainedModel``) is taken as it is.
    """
    try:
        from transformers import PreTrainedModel
    except ImportError:  # pragma: no cover - transformers is part of the torch extra
        return
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not isinstance(base, PreTrainedModel):
        return
    causal, encoders = _causal_names()
    name = type(base).__name__
    cfg = getattr(base, "config", None)
    if not (name in causal or name.endswith("ForCausalLM")):
        raise ValueError(f"model must be a causal language model (a *ForCausalLM of "
                         f"transformers), got {name}: the scores are those of "
                         f"log pi(y|x) = sum_t log p(y_t | x, y_<t)")
    if getattr(cfg, "model_type", None) in encoders and not getattr(cfg, "is_decoder", False):
        raise ValueError(f"model ({name}) has config.is_decoder=False: its attention is not "
                         f"causal; build it with is_decoder=True")


def check_device(params):
    """Refuse parameters on the meta device (they hold no values)."""
    devs = {p.device for p in params}
    if any(d.type == "meta" for d in devs):
        raise ValueError("model has parameters on the meta device (no values): load its "
                         "weights (e.g. to_empty() then load_state_dict, or from_pretrained "
                         "without device_map='meta') before estimating")


def check_left_padded(mask):
    """Refuse a (rows, P) 0/1 ``prompt_mask`` with a 0 after a 1 in a row (right padding)."""
    after = torch.cumsum(mask, dim=1) > 0
    bad = (after & (mask == 0)).any(dim=1)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"prompt_mask row {row} has a 0 after a 1: the prompts must be "
                         f"left-padded (padding first, then the prompt tokens)")


def real_rewards(name, value, shape=None):
    """A finite float64 array of ``shape`` (a torch tensor is detached and moved to the CPU)."""
    if isinstance(value, torch.Tensor):
        if value.is_complex():
            raise ValueError(f"{name} must be real, got dtype {value.dtype}")
        value = value.detach().to("cpu", torch.float64).numpy()
    arr = V.finite_array(name, value)
    if shape is not None and arr.shape != tuple(shape):
        if arr.size == int(np.prod(shape)) and len(shape) == 1:
            return arr.reshape(shape)
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {arr.shape}")
    return arr


def seed(value):
    """A ``torch.manual_seed`` seed: an integer in [0, 2**64 - 1]."""
    return V.integer("seed", value, SEED_MIN, SEED_MAX)
