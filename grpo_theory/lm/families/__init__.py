"""Model families: what one checkpoint architecture is, written once per family.

A family is a :class:`ModelSpec` (:mod:`.spec`: its config fields, tensor names and shapes,
layout changes, tunix module, pure forward and memory model); :mod:`.qwen2` holds the Qwen2 /
Llama family; :mod:`.registry` keys the families by name, ``config.json`` ``model_type`` and GGUF
``general.architecture``. Every checkpoint reader, the memory model and the ghost-norm code look
a family up here; a new architecture is one new module beside :mod:`.qwen2` and one
:func:`register` call (``docs/adding-an-architecture.md``).

This ``__init__`` is the face of :mod:`grpo_theory.lm.families`: ``__all__`` lists its public
names.
"""

from .spec import ModelSpec, TensorSpec
from .qwen2 import LLAMA, QWEN2
from .registry import (FAMILIES, family, family_of_arch, family_of_gguf, gguf_architectures,
                       model_types, register)

__all__ = ["ModelSpec", "TensorSpec", "QWEN2", "LLAMA", "FAMILIES", "register", "family",
           "family_of_gguf", "family_of_arch", "model_types", "gguf_architectures"]
