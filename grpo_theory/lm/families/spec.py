r"""What a model family is to the package: one :class:`ModelSpec` per family.

A family (Qwen2, Llama, ...) is read from Hugging Face safetensors checkpoints and llama.cpp
GGUF files, run by tunix's JAX module (sampling, log-probabilities) and by a pure-JAX forward
written over a set of operations (the ghost norms, :mod:`grpo_theory.lm.budget.ghost`), and budgeted
by the activation bytes of one sequence (:func:`grpo_theory.lm.budget.memory.ghost_row_bytes`). A
:class:`ModelSpec` holds each of these once; the loaders (:mod:`grpo_theory.lm.checkpoints.load`,
:mod:`grpo_theory.lm.checkpoints.gguf`, :mod:`grpo_theory.lm.checkpoints.files`), the memory model
and the ghost code read it (:mod:`grpo_theory.lm.families` is the registry).

The checked architecture ``arch`` is a dict with the keys of :attr:`ModelSpec.config_fields`;
every tensor is one :class:`TensorSpec` (its Hugging Face name, GGUF name, torch-layout shape,
place in tunix's parameter dict and the layout change on the way).

This module also holds the helpers a family's config check uses (JSON fields checked with
messages naming the file and the field) and the import of the optional ``hf`` extra.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any, Callable


_INSTALL = 'pip install -e ".[hf]"  (google-tunix, safetensors, tokenizers, gguf)'


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a checkpoint.

    Attributes:
        hf: the Hugging Face safetensors name (``model.layers.0.self_attn.q_proj.weight``).
        gguf: the llama.cpp GGUF name (``blk.0.attn_q.weight``).
        shape: its shape in the torch layout (``Linear`` weights (out, in)), as both files
            store it.
        path: its place in tunix's parameter dict (``("layers", 0, "attn", "q_proj", "w")``).
        to_tunix: the torch-layout array to tunix's layout (None: unchanged).
    """

    hf: str
    gguf: str
    shape: tuple
    path: tuple
    to_tunix: Callable | None = None


@dataclass(frozen=True)
class ModelSpec:
    """Everything the package knows of one model family.

    Attributes:
        name: registry key (``"qwen2"``).
        model_types: ``model_type`` values of ``config.json`` this family reads.
        gguf_architectures: ``general.architecture`` values of GGUF files it reads.
        config_fields: the keys of the checked architecture dict (``check_config``'s result).
        arch_key_fields: the keys the pure forward reads (static, hashable: a jit key).
        check_config: ``(config.json dict, source) -> arch``, every field checked (a
            ValueError naming ``source`` and the field).
        tensors: ``arch -> {hf name: TensorSpec}``, exactly the checkpoint's tensors.
        gguf_flags: ``set of GGUF tensor names -> {"tied": bool, "qkv_bias": bool}`` (the
            architecture flags a GGUF file states by which tensors it holds).
        gguf_to_hf: ``GGUF name -> Hugging Face name or None`` (``blk.{i}.*`` included).
        from_gguf: ``(hf name, float32 array, arch) -> array`` in the Hugging Face layout
            (undoes llama.cpp's converter, e.g. its q/k row permutation).
        activation_bytes: ``(arch, seq_len, response_len, dtype_bytes) -> bytes`` one
            sequence adds to the ghost-norm pass.
        forward: ``(arch dict, params, tokens, ops, rows) -> logits``: the pure-JAX forward
            over the operations ``ops`` (``embed``, ``lin``, ``scale``, ``bias``,
            ``tied_head``; :mod:`grpo_theory.lm.budget.ghost`), on tunix's parameter dict.
        tunix_model: ``(arch, dtype) -> (graphdef, abstract params, zero biases)``: tunix's
            module (absent q/k/v biases as constant zeros, not parameters).
    """

    name: str
    model_types: tuple
    gguf_architectures: tuple
    config_fields: tuple
    arch_key_fields: tuple
    check_config: Callable[[dict, str], dict]
    tensors: Callable[[dict], dict]
    gguf_flags: Callable[[set], dict]
    gguf_to_hf: Callable[[str], Any]
    from_gguf: Callable
    activation_bytes: Callable[[dict, int, int, int], int]
    forward: Callable
    tunix_model: Callable

    def arch_key(self, arch: dict) -> tuple:
        """The fields of ``arch`` the forward reads, as a hashable tuple of (key, value)."""
        return tuple((k, arch[k]) for k in self.arch_key_fields)


def need_extra(module: str, what: str = "reading checkpoints"):
    """Import an optional dependency of the ``hf`` extra, or a ValueError saying how to install it.

    Args:
        module: the module to import.
        what: the task that needs it, for the message.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"{what} needs {module!r}, which is not installed ({e}); install the "
                         f"optional extra: {_INSTALL}") from None


@contextlib.contextmanager
def quiet_tunix():
    """Silence tunix's and flax's own deprecation warnings (tunix 0.1.7 uses APIs that flax 0.12
    deprecates: ``.value``, ``sharding=``, ``jax.experimental.shard_map``; nothing a user of
    this package can act on)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"(tunix|flax)\.")
        yield


def json_kind(v) -> str:
    """The JSON type name of a parsed value (``"object"``, ``"array"``, ``"number"``...)."""
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
            float: "number", type(None): "null"}.get(type(v), type(v).__name__)


def int_field(c: dict, key: str, source: str, minimum: int = 1, default=None, name=None):
    """``c[key]`` as an int >= minimum (JSON integers only: no bool, float or string);
    ``default`` when absent or null; messages call it ``name`` (default ``key``)."""
    v = c.get(key)
    name = key if name is None else name
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ValueError(f"{source}: {name} must be an integer >= {minimum}, got {v!r} "
                         f"(JSON {json_kind(v)})")
    if v < minimum:
        raise ValueError(f"{source}: {name} must be an integer >= {minimum}, got {v}")
    return int(v)


def positive_real(v, key: str, source: str) -> float:
    """``v`` as a finite float > 0 (a JSON number), else a ValueError naming ``key``."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ValueError(f"{source}: {key} must be a positive number, got {v!r} "
                         f"(JSON {json_kind(v)})")
    v = float(v)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{source}: {key} must be a finite number > 0, got {v!r}")
    return v


def bool_field(c: dict, key: str, source: str, default: bool) -> bool:
    """``c[key]`` as a JSON boolean; ``default`` when absent or null."""
    v = c.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ValueError(f"{source}: {key} must be true or false, got {v!r} "
                         f"(JSON {json_kind(v)})")
    return v


#: the Hugging Face ``config.json`` names :func:`check_sizes` reads (GGUF metadata is mapped to
#: them)
SIZE_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "vocab_size", "num_key_value_heads", "head_dim", "max_position_embeddings",
               "rope_theta", "rms_norm_eps")


def check_sizes(raw: dict, source: str, keys: dict | None = None) -> dict:
    """The sizes, rotary base and norm epsilon of an architecture, checked: the one set of
    rules for ``config.json`` and GGUF metadata alike.

    Checks: ``hidden_size``, ``intermediate_size``, ``num_hidden_layers``,
    ``num_attention_heads``, ``vocab_size`` present and integers >= 1;
    ``num_key_value_heads`` (default: the query heads), ``head_dim`` and
    ``max_position_embeddings`` integers >= 1 when given; the query heads a multiple of the
    key/value heads; without ``head_dim``, ``hidden_size`` a multiple of the query heads; the
    head dimension even (rotary pairs); ``rope_theta`` (default 10000) and ``rms_norm_eps``
    (default 1e-6) finite and > 0.

    Args:
        raw: :data:`SIZE_FIELDS` name -> value (absent: the default; a null integer is
            absent, a null real is refused).
        source: the file, for messages.
        keys: name -> the key it was read from (GGUF metadata), named in messages after the
            field; None for ``config.json``.

    Returns:
        dict with ``n_layers``, ``vocab_size``, ``d_model``, ``d_ff``, ``n_heads``,
        ``n_kv_heads``, ``head_dim``, ``rope_theta``, ``norm_eps``, ``max_length`` (None when
        absent).
    """
    keys = keys or {}
    label = lambda k: f"{k} (metadata {keys[k]!r})" if k in keys else k  # noqa: E731
    req = SIZE_FIELDS[:5]
    missing = [label(k) for k in req if raw.get(k) is None]
    if missing:
        raise ValueError(f"{source} lacks {', '.join(missing)}")
    d, f, n_layers, h, vocab = (int_field(raw, k, source, name=label(k)) for k in req)
    kv = int_field(raw, "num_key_value_heads", source, default=h,
                   name=label("num_key_value_heads"))
    if h % kv:
        raise ValueError(f"{source}: {label('num_attention_heads')} {h} is not a multiple of "
                         f"{label('num_key_value_heads')} {kv}")
    hd = int_field(raw, "head_dim", source, name=label("head_dim"))
    said = label("head_dim")
    if hd is None:
        if d % h:
            raise ValueError(f"{source}: {label('hidden_size')} {d} is not a multiple of "
                             f"{label('num_attention_heads')} {h} (and no head_dim is given)")
        hd, said = d // h, f"{label('hidden_size')} / {label('num_attention_heads')}"
    if hd % 2:
        raise ValueError(f"{source}: the head dimension {hd} ({said}) must be even for rotary "
                         f"embeddings")
    theta = positive_real(raw.get("rope_theta", 10000.0), label("rope_theta"), source)
    eps = positive_real(raw.get("rms_norm_eps", 1e-6), label("rms_norm_eps"), source)
    return {"n_layers": n_layers, "vocab_size": vocab, "d_model": d, "d_ff": f, "n_heads": h,
            "n_kv_heads": kv, "head_dim": hd, "rope_theta": theta, "norm_eps": eps,
            "max_length": int_field(raw, "max_position_embeddings", source,
                                    name=label("max_position_embeddings"))}
