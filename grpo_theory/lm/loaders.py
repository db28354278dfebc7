"""Loading a local checkpoint: a Hugging Face directory or a llama.cpp ``.gguf`` file.

:func:`load_checkpoint` reads everything :func:`grpo_theory.lm.hf.from_pretrained` builds a
policy from: the checked architecture (:func:`read_config`: the family's
:attr:`~grpo_theory.lm.spec.ModelSpec.check_config`), tunix's module and its parameter dict
filled from the tensors the family lists (:attr:`~grpo_theory.lm.spec.ModelSpec.tensors`: Hugging
Face names, shapes, layout changes), the special ids, the tokenizer and the chat template.
Every family-specific fact is read from the family's spec (:mod:`grpo_theory.lm.families`);
the checked file readers are :mod:`grpo_theory.lm.checkpoint_io` and :mod:`grpo_theory.lm.gguf`.
Nothing is downloaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from . import checkpoint_io as io
from .chat_template import check_template
from .spec import json_kind
from . import families
from . import gguf as _gguf
from .._validation import eos_ids as _eos_ids

__all__ = ["Checkpoint", "load_checkpoint", "read_config", "hf_names", "shards", "check_headers",
           "tunix_model",
           "params_from_arrays", "is_gguf", "DTYPES"]

#: the parameter and compute dtypes a checkpoint may be loaded in
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: ``arch`` (checked), ``params`` (exactly its tensors, tunix's
    layout), tunix's ``graphdef`` and ``zero_biases`` (absent q/k/v biases as constants),
    ``eos_ids``, ``pad_id``, ``dtype``, ``tokenizer``, ``source`` (the path) and
    ``chat_template`` (or None)."""

    arch: dict
    params: dict
    graphdef: Any
    zero_biases: tuple
    eos_ids: tuple
    pad_id: int
    dtype: Any
    tokenizer: Any
    source: str
    chat_template: str | None


def _checkpoint_dir(path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path must be a checkpoint directory (str or os.PathLike), got "
                         f"{type(path).__name__}")
    path = os.path.expanduser(os.fspath(path))
    if not os.path.isdir(path):
        raise ValueError(f"path {path!r} is not a directory: from_pretrained needs a local "
                         f"Hugging Face checkpoint directory (config.json, tokenizer.json, "
                         f"*.safetensors); nothing is downloaded")
    return path


def read_config(path) -> dict:
    """The checked architecture of a checkpoint directory's ``config.json``.

    Args:
        path: the checkpoint directory.

    Returns:
        dict with ``model_type``, ``n_layers``, ``vocab_size``, ``d_model``, ``d_ff``,
        ``n_heads``, ``n_kv_heads``, ``head_dim``, ``rope_theta``, ``norm_eps``, ``tied``,
        ``qkv_bias``, ``max_length`` (``max_position_embeddings`` or None) and ``eos_ids``,
        ``pad_id`` as written in ``config.json`` (None when absent).

    Raises:
        ValueError: missing directory or config.json, a file that is not a JSON object, a
            ``model_type`` no registered family reads, a missing or invalid field (sizes
            positive integers, ``rms_norm_eps`` and ``rope_theta`` finite and > 0, the head
            counts consistent; :func:`.checkpoint_io.check_config`), or a feature the
            computation does not implement (``rope_scaling``, sliding windows, MLP biases,
            non-SiLU). The message names the file and the field.
    """
    path = _checkpoint_dir(path)
    return io.check_config(io.read_json(path, "config.json"), f"config.json of {path!r}")


def hf_names(arch: dict) -> dict:
    """HF tensor name -> (path in tunix's parameter dict, transform of the HF array or None),
    from the family's :attr:`~grpo_theory.lm.spec.ModelSpec.tensors`."""
    return {k: (t.path, t.to_tunix)
            for k, t in families.family(arch["model_type"]).tensors(arch).items()}


def shards(path: str) -> list[str]:
    """The safetensors files of the checkpoint: those the index lists (plain file names inside
    ``path``, all present; :func:`.checkpoint_io.shard_names`), else ``model.safetensors``."""
    index = io.read_json(path, "model.safetensors.index.json", required=False)
    if index is not None:
        src = f"model.safetensors.index.json of {path!r}"
        return [os.path.join(path, f) for f in io.shard_names(index, src, path)]
    single = os.path.join(path, "model.safetensors")
    if os.path.isfile(single):
        return [single]
    raise ValueError(f"checkpoint directory {path!r} has no model.safetensors and no "
                     f"model.safetensors.index.json (weights must be safetensors; nothing is "
                     f"downloaded)")


def _fill(abstract: dict, flat: dict, dtype, source: str, origin: str) -> dict:
    """``abstract``'s structure with the arrays of ``flat`` (path -> (name, array)), each of
    the abstract leaf's shape and finite after the cast to ``dtype``; a leaf without an array
    (a constant zero bias) is zeros."""

    def fill(node, prefix):
        if isinstance(node, dict):
            return {k: fill(v, prefix + (k,)) for k, v in node.items()}
        if prefix not in flat:
            return jnp.zeros(node.shape, dtype)
        name, arr = flat[prefix]
        if tuple(arr.shape) != tuple(node.shape):
            raise ValueError(f"tensor {name} of checkpoint {source!r} has shape "
                             f"{tuple(arr.shape)} after conversion, expected "
                             f"{tuple(node.shape)}{origin}")
        with np.errstate(over="ignore"):  # an overflow is refused below, naming the tensor
            x = jnp.asarray(np.asarray(arr), dtype)
        if jnp.dtype(dtype) != jnp.float32 and not bool(jnp.isfinite(x).all()):
            bad = int(x.size - int(jnp.isfinite(x).sum()))
            raise ValueError(f"tensor {name} of checkpoint {source!r} is finite in the file but "
                             f"{bad} of its {x.size} entries overflow to inf in "
                             f"dtype={jnp.dtype(dtype).name!r} (the dtype option; load it with "
                             f"dtype='float32')")
        return x

    return fill(abstract, ())


def check_headers(path: str, arch: dict) -> None:
    """Every tensor ``config.json`` implies, present with its shape in the shards' headers,
    checked before the model is built (headers only, no tensor data read).

    A layer count beyond what the shards hold is caught here, without enumerating the layers
    the file lacks: at most as many layers are listed as the shards have tensors, plus one.

    Raises:
        ValueError: naming the first missing tensor(s), or a tensor of the wrong shape.
    """
    found = {}
    for f in shards(path):
        found.update({k: (shape, f) for k, shape in io.header_shapes(f).items()})
    spec = families.family(arch["model_type"])
    listed = dict(arch, n_layers=min(arch["n_layers"], len(found) + 1))
    specs = spec.tensors(listed)
    missing = [k for k in specs if k not in found]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ValueError(f"checkpoint {path!r} lacks tensor(s) {', '.join(missing[:5])}{more} "
                         f"required by its config.json ({arch['model_type']}, "
                         f"num_hidden_layers = {arch['n_layers']}, "
                         f"tie_word_embeddings={arch['tied']}; read from the safetensors "
                         f"headers before the model is built)")
    for k, t in specs.items():
        shape, f = found[k]
        io.check_shape(k, shape, t.shape, io.shard_source(f))


def _load_params(path: str, arch: dict, abstract: dict, dtype) -> dict:
    """tunix's parameter dict (``abstract``'s structure) filled from the safetensors shards."""
    specs = families.family(arch["model_type"]).tensors(arch)
    shapes = {k: t.shape for k, t in specs.items()}
    flat = {}
    for f in shards(path):
        # wrapped library errors, the HF shape config.json implies, finite (one reduction each)
        for k, w in io.read_tensors(f, specs, shapes).items():
            t = specs[k]
            flat[t.path] = (k, t.to_tunix(w) if t.to_tunix is not None else w)
    missing = [k for k, t in specs.items() if t.path not in flat]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ValueError(f"checkpoint {path!r} lacks tensor(s) {', '.join(missing[:5])}{more} "
                         f"required by its config.json ({arch['model_type']}, "
                         f"{arch['n_layers']} layers, tie_word_embeddings={arch['tied']})")
    return _fill(abstract, flat, dtype, path, " from config.json")


def tunix_model(arch: dict, dtype):
    """(graphdef, abstract parameter dict without absent biases, zero-bias paths) of the
    family's tunix module (:attr:`~grpo_theory.lm.spec.ModelSpec.tunix_model`)."""
    return families.family(arch["model_type"]).tunix_model(arch, dtype)


def params_from_arrays(source: str, arch: dict, abstract: dict, dtype, arrays: dict) -> dict:
    """tunix's parameter dict (``abstract``'s structure) from HF-named NumPy arrays (torch
    layout), converted as the family's tensors say; exactly the tensors they list."""
    specs = families.family(arch["model_type"]).tensors(arch)
    missing = [k for k in specs if k not in arrays]
    extra = [k for k in arrays if k not in specs]
    if missing or extra:
        raise ValueError(f"checkpoint {source!r}: tensors missing {missing[:5]}, unexpected "
                         f"{extra[:5]} for its architecture ({arch['model_type']}, "
                         f"{arch['n_layers']} layers, tied={arch['tied']})")
    flat = {t.path: (k, t.to_tunix(arrays[k]) if t.to_tunix is not None else arrays[k])
            for k, t in specs.items()}
    return _fill(abstract, flat, dtype, source, "")


def _read_chat_template(path: str) -> str | None:
    """``chat_template`` of tokenizer_config.json (or chat_template.jinja), else None; a list
    of named templates gives the one named ``default``. The template must be UTF-8 text, a
    string (or such a list) and compile (:func:`.chat_template.check_template`)."""
    f = os.path.join(path, "chat_template.jinja")
    if os.path.isfile(f):
        try:
            with open(f, encoding="utf-8") as fh:
                t = fh.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"{f}: the chat template cannot be read as UTF-8 text "
                             f"({type(e).__name__}: {e})") from None
        return check_template(t or None, f"{f}: the chat template")
    where = f"tokenizer_config.json of {path!r}: chat_template"
    t = (io.read_json(path, "tokenizer_config.json", required=False) or {}).get("chat_template")
    if isinstance(t, list):
        t = next((d.get("template") for d in t if isinstance(d, dict)
                  and d.get("name") == "default"), None)
        where += "[name = 'default']"
    if t is not None and not isinstance(t, str):
        raise ValueError(f"{where} must be a string (or a list of named templates), got a "
                         f"JSON {json_kind(t)}")
    return check_template(t or None, where)


def _dtype(dtype):
    """A jnp dtype among :data:`DTYPES` (a name or a dtype)."""
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        return DTYPES[dtype]
    if jnp.dtype(dtype) not in [jnp.dtype(d) for d in DTYPES.values()]:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return dtype


def is_gguf(path) -> bool:
    """Whether ``path`` names a ``.gguf`` file (by its suffix)."""
    return isinstance(path, (str, os.PathLike)) and os.fspath(path).lower().endswith(".gguf")


def _special_ids(arch: dict, eos_ids, pad_id, eos_default, pad_default, source: str):
    """Checked (eos_ids tuple, pad_id): the arguments, else the checkpoint's defaults."""
    if eos_ids is None:
        eos_ids = eos_default
        if eos_ids is None:
            raise ValueError(f"checkpoint {source!r} gives no eos_token_id; pass eos_ids=")
    eos_ids = _eos_ids(eos_ids)
    if pad_id is None:
        pad_id = eos_ids[0] if pad_default is None else pad_default
    pad_id = V.integer("pad_id", pad_id, 0, arch["vocab_size"] - 1)
    for e in eos_ids:
        V.integer("eos_ids", e, 0, arch["vocab_size"] - 1)
    return eos_ids, pad_id


def _from_gguf(path, dtype, eos_ids, pad_id) -> Checkpoint:
    ck = _gguf.read_gguf(path)
    arch = ck["config"]
    eos_ids, pad_id = _special_ids(arch, eos_ids, pad_id, arch["eos_ids"], arch["pad_id"],
                                   ck["path"])
    graphdef, abstract, zero = tunix_model(arch, dtype)
    params = params_from_arrays(ck["path"], arch, abstract, dtype, ck["tensors"])
    template = check_template(ck["chat_template"],
                              f"GGUF file {ck['path']!r}: metadata 'tokenizer.chat_template'")
    return Checkpoint(arch, params, graphdef, zero, eos_ids, pad_id, dtype, ck["tokenizer"],
                      ck["path"], template)


def load_checkpoint(path, *, dtype="float32", eos_ids=None, pad_id=None) -> Checkpoint:
    """Read a checkpoint directory (Hugging Face layout) or a ``.gguf`` file.

    Args:
        path, dtype, eos_ids, pad_id: as :func:`grpo_theory.lm.hf.from_pretrained`.

    Returns:
        A :class:`Checkpoint`.

    Raises:
        ValueError: as :func:`grpo_theory.lm.hf.from_pretrained`.
    """
    dtype = _dtype(dtype)
    if is_gguf(path):
        return _from_gguf(path, dtype, eos_ids, pad_id)
    path = _checkpoint_dir(path)
    arch = read_config(path)
    gen = io.read_json(path, "generation_config.json", required=False) or {}
    eos_ids, pad_id = _special_ids(arch, eos_ids, pad_id,
                                   gen.get("eos_token_id", arch["eos_ids"]),
                                   gen.get("pad_token_id", arch["pad_id"]), path)
    tok_file = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(tok_file):
        io.read_json(path, "tokenizer.json")  # raises the missing-file error
    shards(path)  # missing weight files before the (slow) tunix import
    tokenizer = io.read_tokenizer(tok_file)
    n_tok = tokenizer.get_vocab_size(with_added_tokens=True)
    if n_tok > arch["vocab_size"]:
        raise ValueError(f"tokenizer.json of {path!r} has {n_tok} tokens, more than "
                         f"config.json's vocab_size = {arch['vocab_size']} (the embedding rows)")
    template = _read_chat_template(path)
    check_headers(path, arch)  # every tensor config.json implies, before the model is built
    graphdef, abstract, zero = tunix_model(arch, dtype)
    params = _load_params(path, arch, abstract, dtype)
    return Checkpoint(arch, params, graphdef, zero, eos_ids, pad_id, dtype, tokenizer, path,
                      template)
