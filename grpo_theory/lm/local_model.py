r"""A local Hugging Face checkpoint or llama.cpp ``.gguf`` file as a study's policy.

The LM studies (``lm-mse``, ``lm-groupsize``, ``lm-rank``) take ``--model PATH``; this module
holds what they share about it, written once:

* :data:`MODEL_DTYPES` and :func:`check_model_options`: the model options of a study's
  ``Settings`` (``model_chunk``, ``model_memory_budget``, ``model_dtype``, ``model_pad_id``);
* :func:`absolute_path` and :func:`model_path`: the checked absolute path (a supported
  architecture; nothing is downloaded);
* :func:`model_policy`: the :class:`~grpo_theory.lm.hf.HFPolicy`, loaded once per process;
* :func:`response_texts`: decoded responses cut at the first EOS (what
  :func:`grpo_theory.lm.task.reward_answer_text` reads).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from .gguf import read_gguf_config
from .hf import from_pretrained, read_config

__all__ = ["MODEL_DTYPES", "check_model_options", "absolute_path", "model_path", "model_policy",
           "response_texts"]

#: dtypes a Hugging Face checkpoint can be run in (``--dtype``)
MODEL_DTYPES = ("float32", "bfloat16")


def check_model_options(s) -> None:
    """Check the model options of a Settings: ``model_chunk`` and ``model_memory_budget`` (an
    integer >= 1 or None), ``model_dtype`` (:data:`MODEL_DTYPES`), ``model_pad_id`` (an
    integer >= 0 or None); a ``ValueError`` naming the field otherwise."""
    for name in ("model_chunk", "model_memory_budget"):
        v = getattr(s, name, None)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{name} must be an integer >= 1 or None, got {v!r}")
    if getattr(s, "model_dtype", "float32") not in MODEL_DTYPES:
        raise ValueError(f"model_dtype must be one of {', '.join(MODEL_DTYPES)}, got "
                         f"{s.model_dtype!r}")
    v = getattr(s, "model_pad_id", None)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
        raise ValueError(f"model_pad_id must be an integer >= 0 or None, got {v!r}")


def absolute_path(path) -> str:
    """``path`` (a str or path-like, not empty) made absolute, ``~`` expanded; a ``ValueError``
    otherwise."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"model must be a checkpoint directory path (str), got {path!r}")
    return str(Path(path).expanduser().resolve())


def model_path(path) -> str:
    """The absolute path of a Hugging Face checkpoint directory or a llama.cpp ``.gguf`` file,
    checked (the architecture is a supported one; nothing is downloaded).

    Raises:
        ValueError: naming the path, when it is neither.
    """
    p = absolute_path(path)
    if os.path.isfile(p) and p.lower().endswith(".gguf"):
        read_gguf_config(p)
        return p
    if not os.path.isdir(p):
        raise ValueError(f"model {p!r} is neither a directory nor a .gguf file: --model needs "
                         "a local Hugging Face checkpoint directory (config.json, "
                         "tokenizer.json, *.safetensors) or a llama.cpp .gguf file; nothing is "
                         "downloaded")
    read_config(p)
    return p


@lru_cache(maxsize=2)
def model_policy(path: str, dtype: str = "float32", pad_id: int | None = None):
    """The :class:`~grpo_theory.lm.hf.HFPolicy` of a checkpoint directory in ``dtype`` with
    padding id ``pad_id`` (None: the checkpoint's), loaded once per process (its compiled
    functions are then shared by every cell)."""
    return from_pretrained(model_path(path), dtype=dtype, pad_id=pad_id)


def response_texts(policy, responses) -> list[str]:
    """Decoded responses of a Hugging Face policy, each cut before its first EOS (special
    tokens dropped): what :func:`grpo_theory.lm.task.reward_answer_text` reads."""
    out = []
    for row in np.asarray(responses).tolist():
        cut = next((j for j, t in enumerate(row) if t in policy.eos_ids), len(row))
        out.append(policy.tokenizer.decode(row[:cut], skip_special_tokens=True))
    return out
