"""Local checkpoints as policies: a Hugging Face directory or a llama.cpp ``.gguf`` file.

* :mod:`.load`: the loader, the one place that decides what a path is
  (:func:`checkpoint_format`) and turns it into a policy (:func:`from_pretrained`,
  :func:`load_policy`, :func:`model_policy`);
* :mod:`.hf`: :class:`HFPolicy`, the policy of a loaded checkpoint (tunix's module);
* the checked readers: :mod:`.files` (``config.json``, safetensors shards, tokenizer, chat
  template of a directory), :mod:`.gguf` and :mod:`.gguf_layout` (a ``.gguf`` file),
  :mod:`.chat_template` (the Jinja chat template).

Nothing is downloaded. This ``__init__`` is the face of :mod:`grpo_theory.lm.checkpoints`:
``__all__`` lists its public names.
"""

from .files import SUPPORTED_MODEL_TYPES, read_config
from .gguf import read_gguf, read_gguf_config
from .hf import PROMPT_PAD, HFPolicy
from .load import (PACKAGE_MODELS, Checkpoint, check_model_options, checkpoint_format,
                   from_pretrained, load_checkpoint, load_policy, model_path, model_policy,
                   response_texts)

# the names the layers above use beside the ones listed first (one import path: this face)
from .load import absolute_path, warmup_files

__all__ = ["SUPPORTED_MODEL_TYPES", "read_config", "read_gguf", "read_gguf_config", "PROMPT_PAD",
           "HFPolicy", "PACKAGE_MODELS", "Checkpoint", "check_model_options",
           "checkpoint_format", "from_pretrained", "load_checkpoint", "load_policy",
           "model_path", "model_policy", "response_texts"]
__all__ += ["absolute_path", "warmup_files"]
