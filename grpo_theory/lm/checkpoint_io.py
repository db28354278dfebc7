r"""Checked readers of the files of a local checkpoint (shared by the checkpoint loaders).

Every reader turns every failure into a ``ValueError`` that names the file and, where there is
one, the field or tensor:

* :func:`read_json`: a JSON file that must hold an object (``config.json``,
  ``generation_config.json``, ``tokenizer_config.json``, ``model.safetensors.index.json``);
* :func:`check_config`: the architecture of a Hugging Face ``config.json`` (every size a
  positive integer, ``rms_norm_eps > 0``, ``rope_theta > 0``, the sizes consistent with each
  other);
* :func:`shard_names`: the shard list of ``model.safetensors.index.json`` (each shard a plain
  file name inside the checkpoint directory: no path separator, no ``..``, not absolute; a
  symlinked file inside the directory, as in the Hugging Face cache layout, is allowed);
* :func:`read_tensors`: tensors of one safetensors file, the library's errors wrapped with the
  file's name, each tensor checked finite (:func:`check_finite`, one reduction per tensor) and
  checked against the shape that ``config.json`` implies (:func:`tensor_shapes`);
* :func:`read_tokenizer`: ``tokenizer.json``, the ``tokenizers`` library's errors wrapped.

safetensors and tokenizers are imported on first use (the optional extra ``hf``).
"""

from __future__ import annotations

import importlib
import json
import math
import numbers
import os

import numpy as np

from .policy import _eos_ids

__all__ = ["read_json", "check_config", "shard_names", "tensor_shapes", "check_finite",
           "check_shape", "read_tensors", "read_tokenizer", "SUPPORTED_MODEL_TYPES"]

SUPPORTED_MODEL_TYPES = ("qwen2", "llama")
_INSTALL = 'pip install -e ".[hf]"  (google-tunix, safetensors, tokenizers, gguf)'
_REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "vocab_size")


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



def read_json(path: str, name: str, required: bool = True):
    """The JSON object (a dict) of file ``name`` in directory ``path``.

    Args:
        path: the checkpoint directory.
        name: the file name (e.g. ``"config.json"``).
        required: raise when the file is absent (else return None).

    Returns:
        The parsed dict, or None for an absent optional file.

    Raises:
        ValueError: absent (when required), unreadable, not valid JSON, or not a JSON object.
    """
    f = os.path.join(path, name)
    if not os.path.isfile(f):
        if required:
            raise ValueError(f"checkpoint directory {path!r} has no {name}: a Hugging Face "
                             f"checkpoint needs config.json, tokenizer.json and "
                             f"model.safetensors (or model.safetensors.index.json with its "
                             f"shards); nothing is downloaded")
        return None
    try:
        with open(f, encoding="utf-8") as fh:
            out = json.load(fh)
    except json.JSONDecodeError as e:
        raise ValueError(f"{f} is not valid JSON: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{f} cannot be read as UTF-8 text: {e}") from None
    if not isinstance(out, dict):
        raise ValueError(f"{f} must hold a JSON object ({{...}}), got a JSON "
                         f"{_json_kind(out)}")
    return out


def _json_kind(v) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
            float: "number", type(None): "null"}.get(type(v), type(v).__name__)


def _int_field(c: dict, key: str, source: str, minimum: int = 1, default=None):
    """``c[key]`` as an int >= minimum (JSON integers only: no bool, float or string)."""
    v = c.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ValueError(f"{source}: {key} must be an integer >= {minimum}, got {v!r} "
                         f"(JSON {_json_kind(v)})")
    if v < minimum:
        raise ValueError(f"{source}: {key} must be an integer >= {minimum}, got {v}")
    return int(v)


def _positive_real(v, key: str, source: str) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ValueError(f"{source}: {key} must be a positive number, got {v!r} "
                         f"(JSON {_json_kind(v)})")
    v = float(v)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{source}: {key} must be a finite number > 0, got {v!r}")
    return v


def _bool_field(c: dict, key: str, source: str, default: bool) -> bool:
    v = c.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ValueError(f"{source}: {key} must be true or false, got {v!r} "
                         f"(JSON {_json_kind(v)})")
    return v


def check_config(c, source: str) -> dict:
    """The checked architecture of a Hugging Face ``config.json`` (Qwen2 / Qwen2.5 / Llama).

    Checks: ``model_type`` in :data:`SUPPORTED_MODEL_TYPES`; ``hidden_size``,
    ``intermediate_size``, ``num_hidden_layers``, ``num_attention_heads``, ``vocab_size``
    present and positive integers, ``num_key_value_heads``, ``head_dim``,
    ``max_position_embeddings`` positive integers when given; ``num_attention_heads`` a multiple
    of ``num_key_value_heads``; ``head_dim`` even (rotary pairs) and, when absent,
    ``hidden_size`` divisible by ``num_attention_heads``; ``rms_norm_eps > 0`` and
    ``rope_theta > 0`` finite; boolean flags booleans; ``eos_token_id`` / ``pad_token_id`` ids in
    ``[0, vocab_size)``; no feature the computation lacks (``rope_scaling``, sliding windows,
    MLP biases, an activation other than SiLU).

    Args:
        c: the parsed ``config.json``.
        source: how to name the file in messages (e.g. ``"config.json of '/ckpt'"``).

    Returns:
        dict with ``model_type``, ``n_layers``, ``vocab_size``, ``d_model``, ``d_ff``,
        ``n_heads``, ``n_kv_heads``, ``head_dim``, ``rope_theta``, ``norm_eps``, ``tied``,
        ``qkv_bias``, ``max_length`` (None when absent), ``eos_ids`` and ``pad_id`` (None when
        absent).

    Raises:
        ValueError: naming ``source`` and the field.
    """
    if not isinstance(c, dict):
        raise ValueError(f"{source} must be a JSON object, got a JSON {_json_kind(c)}")
    mt = c.get("model_type")
    if mt not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"{source} has model_type {mt!r}; supported: "
                         f"{', '.join(SUPPORTED_MODEL_TYPES)} (Qwen2, Qwen2.5, Llama)")
    missing = [k for k in _REQUIRED if c.get(k) is None]
    if missing:
        raise ValueError(f"{source} lacks {', '.join(missing)}")
    rope = c.get("rope_parameters")
    if rope is None:
        rope = {}
    if not isinstance(rope, dict):
        raise ValueError(f"{source}: rope_parameters must be an object, got {rope!r}")
    if c.get("rope_scaling") or rope.get("rope_type", "default") != "default":
        raise ValueError(f"{source} sets rope_scaling {c.get('rope_scaling') or rope!r}; only "
                         f"plain rotary embeddings (rope_scaling null) are supported")
    if _bool_field(c, "use_sliding_window", source, False):
        raise ValueError(f"{source} sets use_sliding_window: true; only full attention is "
                         f"supported")
    if _bool_field(c, "mlp_bias", source, False):
        raise ValueError(f"{source} sets mlp_bias: true; only bias-free MLPs are supported")
    act = c.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"{source} has hidden_act {act!r}; only 'silu' (SwiGLU) is supported")
    d, f, n_layers, h, vocab = (_int_field(c, k, source) for k in _REQUIRED)
    kv = _int_field(c, "num_key_value_heads", source, default=h)
    if h % kv:
        raise ValueError(f"{source}: num_attention_heads {h} is not a multiple of "
                         f"num_key_value_heads {kv}")
    hd = _int_field(c, "head_dim", source)
    if hd is None:
        if d % h:
            raise ValueError(f"{source}: hidden_size {d} is not a multiple of "
                             f"num_attention_heads {h} (and no head_dim is given)")
        hd = d // h
    if hd % 2:
        raise ValueError(f"{source}: the head dimension {hd} (head_dim, or hidden_size / "
                         f"num_attention_heads) must be even for rotary embeddings")
    theta = rope.get("rope_theta", c.get("rope_theta", 10000.0))
    theta = _positive_real(theta, "rope_theta", source)
    eps = _positive_real(c.get("rms_norm_eps", 1e-6), "rms_norm_eps", source)
    eos = c.get("eos_token_id")
    if eos is not None:
        try:
            eos = _eos_ids(eos)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{source}: eos_token_id must be a token id or a non-empty list "
                             f"of ids in [0, {vocab}), got {eos!r} ({e})") from None
        bad = [e for e in eos if e >= vocab]
        if bad:
            raise ValueError(f"{source}: eos_token_id {bad[0]} is outside [0, vocab_size = "
                             f"{vocab})")
    pad = _int_field(c, "pad_token_id", source, minimum=0)
    if pad is not None and pad >= vocab:
        raise ValueError(f"{source}: pad_token_id {pad} is outside [0, vocab_size = {vocab})")
    return {
        "model_type": mt, "n_layers": n_layers, "vocab_size": vocab, "d_model": d, "d_ff": f,
        "n_heads": h, "n_kv_heads": kv, "head_dim": hd, "rope_theta": theta, "norm_eps": eps,
        "tied": _bool_field(c, "tie_word_embeddings", source, False),
        "qkv_bias": mt == "qwen2" or _bool_field(c, "attention_bias", source, False),
        "max_length": _int_field(c, "max_position_embeddings", source),
        "eos_ids": eos, "pad_id": pad,
    }


def tensor_shapes(arch: dict) -> dict:
    """The shape of every Hugging Face tensor (torch layout, ``Linear`` weights (out, in)) that
    an architecture of :func:`check_config` implies, q/k/v biases included."""
    d, f, v = arch["d_model"], arch["d_ff"], arch["vocab_size"]
    h, kv, hd = arch["n_heads"], arch["n_kv_heads"], arch["head_dim"]
    out = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,),
           "lm_head.weight": (v, d)}
    for i in range(arch["n_layers"]):
        a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        out.update({a + "q_proj.weight": (h * hd, d), a + "k_proj.weight": (kv * hd, d),
                    a + "v_proj.weight": (kv * hd, d), a + "o_proj.weight": (d, h * hd),
                    a + "q_proj.bias": (h * hd,), a + "k_proj.bias": (kv * hd,),
                    a + "v_proj.bias": (kv * hd,), m + "gate_proj.weight": (f, d),
                    m + "up_proj.weight": (f, d), m + "down_proj.weight": (d, f),
                    f"model.layers.{i}.input_layernorm.weight": (d,),
                    f"model.layers.{i}.post_attention_layernorm.weight": (d,)})
    return out


def shard_names(index: dict, source: str, directory: str) -> list[str]:
    """The sorted, distinct shard file names of a ``model.safetensors.index.json``.

    Each shard must be a plain file name (no ``/`` or ``\\``, not ``.`` or ``..``, not
    absolute, no NUL) of a file in ``directory``; the file itself may be a symlink (the Hugging
    Face cache links snapshot files to blobs elsewhere), the name may not lead outside.

    Args:
        index: the parsed index; source: its name for messages; directory: the checkpoint.

    Returns:
        list of file names (not paths).

    Raises:
        ValueError: no ``weight_map`` object, a non-string tensor or shard name, a shard name
            that is a path, or a listed shard that is not a file of ``directory``.
    """
    wm = index.get("weight_map")
    if not isinstance(wm, dict) or not wm:
        raise ValueError(f"{source} has no weight_map (an object tensor name -> shard file)")
    names = set()
    for k, fn in wm.items():
        if not isinstance(fn, str) or not fn:
            raise ValueError(f"{source}: weight_map[{k!r}] must be a shard file name, got "
                             f"{fn!r}")
        if (fn in (".", "..") or "/" in fn or "\\" in fn or os.sep in fn or "\0" in fn
                or os.path.isabs(fn) or (os.altsep and os.altsep in fn)):
            raise ValueError(f"{source}: weight_map[{k!r}] = {fn!r} is not a plain file name "
                             f"inside the checkpoint directory (no path separators, '..' or "
                             f"absolute paths: a checkpoint never reads files outside its "
                             f"directory)")
        names.add(fn)
    files = sorted(names)
    absent = [fn for fn in files if not os.path.isfile(os.path.join(directory, fn))]
    if absent:
        raise ValueError(f"checkpoint {directory!r} lacks shard(s) {', '.join(absent)} listed "
                         f"in model.safetensors.index.json")
    return files


def check_finite(name: str, array, source: str) -> None:
    """Refuse a tensor with a NaN or inf entry (one reduction; the count only on failure).

    Args:
        name: the tensor's name; array: its values (NumPy, bfloat16 included); source: the file.
    """
    a = np.asarray(array)
    if a.dtype.kind in "biu":
        return
    if not bool(np.isfinite(a).all()):
        bad = int(a.size - np.count_nonzero(np.isfinite(a)))
        raise ValueError(f"tensor {name} in {source} has {bad} non-finite entr"
                         f"{'y' if bad == 1 else 'ies'} (NaN or inf) of {a.size}: the "
                         f"checkpoint is damaged")


def check_shape(name: str, array, expected, source: str) -> None:
    """Refuse a tensor whose shape differs from the one ``config.json`` implies."""
    if expected is not None and tuple(np.shape(array)) != tuple(expected):
        raise ValueError(f"tensor {name} in {source} has shape {tuple(np.shape(array))}, "
                         f"expected {tuple(expected)} from config.json (hidden_size, "
                         f"intermediate_size, vocab_size, head counts and head_dim must agree "
                         f"with the tensors)")


def read_tensors(file: str, wanted, shapes: dict | None = None, source: str | None = None):
    """The tensors of one safetensors file whose names are in ``wanted``, checked.

    Args:
        file: the ``.safetensors`` path.
        wanted: a container of tensor names to read (others are skipped unread).
        shapes: expected shapes by name (:func:`tensor_shapes`), or None.
        source: how to name the file (default: its base name and directory).

    Returns:
        dict name -> NumPy array (each finite and of its expected shape).

    Raises:
        ValueError: the library cannot read the file (truncated, empty, garbage, an
            unsupported dtype), a non-finite entry, or a wrong shape, naming the file and
            tensor.
    """
    safetensors = need_extra("safetensors")
    source = source or f"{os.path.basename(file)} of checkpoint {os.path.dirname(file)!r}"
    out = {}
    name = None
    try:
        with safetensors.safe_open(file, framework="numpy") as sf:
            for name in sf.keys():
                if name in wanted:
                    out[name] = sf.get_tensor(name)
    except Exception as e:  # SafetensorError, OSError, numpy's unsupported dtypes
        what = f" (tensor {name})" if name is not None else ""
        raise ValueError(f"{source} is not a readable safetensors file{what}: "
                         f"{type(e).__name__}: {e}") from None
    for name, w in out.items():
        check_shape(name, w, (shapes or {}).get(name), source)
        check_finite(name, w, source)
    return out


def read_tokenizer(file: str):
    """A ``tokenizers.Tokenizer`` from ``tokenizer.json``, the library's errors wrapped.

    Raises:
        ValueError: the file is not a tokenizer the library can build (corrupt, incomplete,
            truncated JSON), naming the file.
    """
    tokenizers = need_extra("tokenizers")
    try:
        return tokenizers.Tokenizer.from_file(file)
    except Exception as e:  # tokenizers raises a bare Exception
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"{file} is not a tokenizer the tokenizers library can read: "
                         f"{msg}") from None
