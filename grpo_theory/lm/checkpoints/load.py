r"""Loading a model: a local checkpoint (a Hugging Face directory or a llama.cpp ``.gguf``
file) as an :class:`~grpo_theory.lm.checkpoints.hf.HFPolicy`, or whatever a command line names.

* :func:`checkpoint_format`: the one test of "is this path a checkpoint, and which kind"
  (``"directory"`` or ``"gguf"``);
* :func:`load_checkpoint` reads everything :func:`from_pretrained` builds a policy from: the
  checked architecture (:func:`~grpo_theory.lm.checkpoints.files.read_config`: the family's
  :attr:`~grpo_theory.lm.families.spec.ModelSpec.check_config`), tunix's module and its
  parameter dict filled from the tensors the family lists
  (:attr:`~grpo_theory.lm.families.spec.ModelSpec.tensors`: Hugging Face names, shapes, layout
  changes), the special ids, the tokenizer and the chat template. Every family-specific fact is
  read from the family's spec (:mod:`grpo_theory.lm.families`); the checked file readers are
  :mod:`grpo_theory.lm.checkpoints.files` and :mod:`grpo_theory.lm.checkpoints.gguf`;
* :func:`from_pretrained`: the :class:`~grpo_theory.lm.checkpoints.hf.HFPolicy` of a checkpoint;
* :func:`load_policy` turns a model spec into an :class:`~grpo_theory.lm.policy.LMPolicy` (the
  package's warm-up checkpoints by name, a package ``.npz`` checkpoint, a checkpoint directory
  or ``.gguf`` file), with the :class:`~grpo_theory.lm.budget.options.ModelOptions` that apply
  to loading (``dtype``, ``pad_id``). Callers then use the policy's contract only (its class
  docstring), never its type;
* the LM studies' ``--model PATH`` (``lm-mse``, ``lm-groupsize``, ``lm-rank``):
  :func:`check_model_options` (the model options of a study's ``Settings``: ``model_chunk``,
  ``model_memory_budget``, ``model_dtype`` among
  :data:`~grpo_theory.lm.budget.options.MODEL_DTYPES`, ``model_pad_id``), :func:`absolute_path`
  and :func:`model_path` (the checked absolute path), :func:`model_policy` (the policy, loaded
  once per process) and :func:`response_texts` (decoded responses cut at the first EOS, what
  :func:`grpo_theory.lm.task.reward_answer_text` reads).

Nothing is downloaded.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from ... import _validation as V
from ..._cache import cache_dir as default_cache_dir
from ..._validation import eos_ids as _eos_ids
from .. import families
from ..budget.options import MODEL_DTYPES, ModelOptions, check_pad_embedding
from ..policy import LMPolicy
from . import files as io
from . import gguf as _gguf
from .chat_template import check_template
from .gguf import read_gguf_config
from .hf import HFPolicy, hf_policy


def checkpoint_format(path) -> str | None:
    """What a local path holds: ``"gguf"`` (a file whose name ends in ``.gguf``, any case),
    ``"directory"`` (a directory: a Hugging Face checkpoint when it holds one), or None (neither,
    or not a str or path-like). ``~`` is expanded; nothing is read."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    p = Path(path).expanduser()
    if p.is_file() and p.name.lower().endswith(".gguf"):
        return "gguf"
    return "directory" if p.is_dir() else None


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


def _load_params(path: str, arch: dict, abstract: dict, dtype) -> dict:
    """tunix's parameter dict (``abstract``'s structure) filled from the safetensors shards."""
    specs = families.family(arch["model_type"]).tensors(arch)
    shapes = {k: t.shape for k, t in specs.items()}
    flat = {}
    for f in io.shards(path):
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
    family's tunix module (:attr:`~grpo_theory.lm.families.spec.ModelSpec.tunix_model`)."""
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


def _dtype(dtype):
    """A jnp dtype among :data:`DTYPES` (a name or a dtype)."""
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        return DTYPES[dtype]
    if jnp.dtype(dtype) not in [jnp.dtype(d) for d in DTYPES.values()]:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return dtype


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
        path, dtype, eos_ids, pad_id: as :func:`from_pretrained`.

    Returns:
        A :class:`Checkpoint`.

    Raises:
        ValueError: as :func:`from_pretrained`.
    """
    dtype = _dtype(dtype)
    if checkpoint_format(path) == "gguf":
        return _from_gguf(path, dtype, eos_ids, pad_id)
    path = io.checkpoint_dir(path)
    arch = io.read_config(path)
    gen = io.read_json(path, "generation_config.json", required=False) or {}
    eos_ids, pad_id = _special_ids(arch, eos_ids, pad_id,
                                   gen.get("eos_token_id", arch["eos_ids"]),
                                   gen.get("pad_token_id", arch["pad_id"]), path)
    tok_file = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(tok_file):
        io.read_json(path, "tokenizer.json")  # raises the missing-file error
    io.shards(path)  # missing weight files before the (slow) tunix import
    tokenizer = io.read_tokenizer(tok_file)
    n_tok = tokenizer.get_vocab_size(with_added_tokens=True)
    if n_tok > arch["vocab_size"]:
        raise ValueError(f"tokenizer.json of {path!r} has {n_tok} tokens, more than "
                         f"config.json's vocab_size = {arch['vocab_size']} (the embedding rows)")
    template = io.read_chat_template(path)
    io.check_headers(path, arch)  # every tensor config.json implies, before the model is built
    graphdef, abstract, zero = tunix_model(arch, dtype)
    params = _load_params(path, arch, abstract, dtype)
    return Checkpoint(arch, params, graphdef, zero, eos_ids, pad_id, dtype, tokenizer, path,
                      template)


def from_pretrained(path, *, dtype="float32", temperature: float = 1.0, eos_ids=None,
                    pad_id: int | None = None, pad_embedding: str = "frozen") -> HFPolicy:
    """Load a local checkpoint of the Qwen2 / Qwen2.5 / Llama family as a policy.

    Args:
        path: the checkpoint directory in the Hugging Face layout (config.json, tokenizer.json,
            model.safetensors or model.safetensors.index.json + shards, optional
            generation_config.json), or a ``.gguf`` file
            (:func:`grpo_theory.lm.checkpoints.gguf.read_gguf`: weights dequantised to float32,
            tokenizer, special ids and chat template from the file).
        dtype: parameter and compute dtype: "float32" (default), "bfloat16" or "float16".
        temperature: sampling and log-prob temperature > 0.
        eos_ids: id(s) that end a response; default: ``eos_token_id`` of generation_config.json,
            else of config.json (GGUF: ``tokenizer.ggml.eos_token_id``).
        pad_id: the id written after a sampled response's EOS; default: ``pad_token_id`` of
            generation_config.json, else of config.json (GGUF:
            ``tokenizer.ggml.padding_token_id``), else the first EOS id. Prompts are padded
            with :data:`~grpo_theory.lm.checkpoints.hf.PROMPT_PAD`, never with ``pad_id``.
        pad_embedding: the gradient of the pad token's input-embedding row
            (:data:`~grpo_theory.lm.budget.options.PAD_EMBEDDINGS`): "frozen" (default; what
            transformers trains: ``nn.Embedding(padding_idx=config.pad_token_id)`` gives the row
            no gradient through the lookup, a tied head still trains it) or "trained" (the
            exact gradient of the log-likelihood in every parameter). The row is
            ``pad_token_id`` of config.json (GGUF: ``tokenizer.ggml.padding_token_id``), not
            ``pad_id``; with none, every row is trained under either choice. Kept as
            ``policy.config["frozen_row"]`` (None when no row is frozen).

    Returns:
        An :class:`HFPolicy` (an :class:`~grpo_theory.lm.policy.LMPolicy`) whose ``params``
        are exactly the checkpoint's tensors.

    Raises:
        ValueError: a missing directory or file, an unsupported ``model_type`` or feature, a
            missing or mis-shaped tensor, no EOS id anywhere, a malformed GGUF file (naming the
            file and the field or tensor), or the optional extra not installed.
    """
    frozen = check_pad_embedding(pad_embedding) == "frozen"
    ck = load_checkpoint(path, dtype=dtype, eos_ids=eos_ids, pad_id=pad_id)
    arch = dict(ck.arch, frozen_row=ck.arch["pad_id"] if frozen else None)
    return hf_policy(arch, ck.params, ck.graphdef, ck.zero_biases, ck.eos_ids, ck.pad_id,
                     ck.dtype, temperature, ck.tokenizer, ck.source, ck.chat_template)


#: names of the package's warm-up checkpoints (:mod:`grpo_theory.lm.warmup`)
PACKAGE_MODELS = ("base", "instruct", "icl")


def _warmup_config(warmup):
    from ..warmup import QUICK_WARMUP, WarmupConfig

    if warmup in (None, "full"):
        return WarmupConfig()
    if warmup == "quick":
        return QUICK_WARMUP
    if not isinstance(warmup, WarmupConfig):
        raise ValueError(f"warmup must be 'quick', 'full' or a WarmupConfig, got {warmup!r}")
    return warmup


def _read_npz(p: Path):
    """The arrays ``flat`` and the parsed ``meta`` of a package checkpoint file; a one-line
    ``ValueError`` naming the file when it is not a ``.npz`` holding them."""
    try:
        f = np.load(p, allow_pickle=False)
    except Exception as e:  # not a zip, a pickle, truncated...
        raise ValueError(f"model {str(p)!r}: not a package .npz checkpoint "
                         f"({type(e).__name__}: {' '.join(str(e).split())})") from None
    if not isinstance(f, np.lib.npyio.NpzFile):
        raise ValueError(f"model {str(p)!r}: not a package .npz checkpoint (a single .npy "
                         f"array, not an archive of 'flat' and 'meta')")
    with f:
        for key in ("flat", "meta"):
            if key not in f.files:
                raise ValueError(f"model {str(p)!r}: the .npz has no array {key!r} (a package "
                                 f"checkpoint holds 'flat' and 'meta'; it holds {f.files})")
        try:
            flat, meta = f["flat"], f["meta"]
        except Exception as e:  # a damaged member
            raise ValueError(f"model {str(p)!r}: cannot read its arrays ({type(e).__name__}: "
                             f"{' '.join(str(e).split())})") from None
    try:
        meta = json.loads(str(meta)) if meta.shape == () else None
    except json.JSONDecodeError:
        meta = None
    if not isinstance(meta, dict):
        raise ValueError(f"model {str(p)!r}: array 'meta' must hold a JSON object (the "
                         f"checkpoint's metadata)")
    return flat, meta


def _package_checkpoint(p: Path) -> LMPolicy:
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    from ..model import ModelConfig, init_params, make_apply, make_sampler

    flat, meta = _read_npz(p)
    c = meta.get("config", {})
    try:
        cfg = ModelConfig(d_model=int(c["d_model"]), n_layers=int(c["n_layers"]),
                          n_heads=int(c["n_heads"]))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"model {str(p)!r}: the checkpoint's metadata has no warm-up "
                         f"config (d_model, n_layers, n_heads)") from None
    want, unravel = ravel_pytree(init_params(jax.random.PRNGKey(0), cfg))
    if flat.dtype.kind != "f" or flat.shape != want.shape:
        raise ValueError(f"model {str(p)!r}: array 'flat' must be {want.shape} floats for its "
                         f"config (d_model={cfg.d_model}, n_layers={cfg.n_layers}, n_heads="
                         f"{cfg.n_heads}), got {flat.shape} {flat.dtype}")
    if not np.all(np.isfinite(flat)):
        raise ValueError(f"model {str(p)!r}: array 'flat' holds NaN or inf")
    params = unravel(jnp.asarray(flat, jnp.float32))
    return LMPolicy(params, make_apply(cfg), make_sampler(cfg))


def warmup_files(cache_dir=None, warmup=None) -> list:
    """The checkpoint files of the package models of ``warmup`` (as :func:`load_policy`
    names them) under ``cache_dir`` (default ``cache_dir()/lm``); all present = no training."""
    from ..warmup import checkpoint_files

    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "lm"
    return checkpoint_files(folder, _warmup_config(warmup))


def load_policy(spec, options: ModelOptions | None = None, *, cache_dir=None,
                warmup=None, log=None) -> LMPolicy:
    """The policy named by ``spec``.

    Args:
        spec: ``"base"``, ``"instruct"`` or ``"icl"`` (the package's warm-up checkpoints under
            ``cache_dir``, trained there on first use), a package checkpoint file (``.npz`` of
            :func:`grpo_theory.lm.warmup.save_checkpoint` whose metadata holds the warm-up
            configuration), a Hugging Face checkpoint directory, a llama.cpp ``.gguf`` file,
            or an ``LMPolicy`` (returned as it is).
        options: the :class:`~grpo_theory.lm.budget.options.ModelOptions`; ``dtype``, ``pad_id`` and
            ``pad_embedding`` apply to a checkpoint
            (:func:`grpo_theory.lm.checkpoints.load.from_pretrained`) only.
        cache_dir: folder of the warm-up cache (default ``cache_dir()/lm`` of the runner).
        warmup: ``"full"`` (default), ``"quick"`` (the tiny warm-up of the ``lm-mse`` quick
            setting) or a :class:`~grpo_theory.lm.warmup.WarmupConfig`.
        log: ``log(line)`` receives the warm-up's training lines (``"[warmup base] step
            50/1500 loss ..."``) when a package model is trained; default silent.

    Returns:
        An :class:`~grpo_theory.lm.policy.LMPolicy`.

    Raises:
        ValueError: a spec that names nothing of the above, or ``dtype``/``pad_id`` given for
            a package model.
    """
    options = ModelOptions() if options is None else options
    if not isinstance(options, ModelOptions):
        raise ValueError(f"options must be a ModelOptions, got {type(options).__name__}")
    if isinstance(spec, LMPolicy):
        return spec
    if not isinstance(spec, (str, os.PathLike)):
        raise ValueError(f"model must be a name, a path or an LMPolicy, got {type(spec).__name__}")
    p = Path(spec).expanduser()
    checkpoint = checkpoint_format(p) is not None
    if not checkpoint and options.checkpoint_only:
        got = ", ".join(f"{k}={v!r}" for k, v in options.checkpoint_only.items())
        raise ValueError(f"pad_id, pad_embedding and dtype apply to Hugging Face checkpoints "
                         f"(a directory or a .gguf file) only (the package's models use their "
                         f"own PAD and float32); model {str(spec)!r} is not one, got {got}")
    if str(spec) in PACKAGE_MODELS:
        from ..warmup import cached_policies

        folder = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "lm"
        pols = cached_policies(folder, _warmup_config(warmup),
                               log=log if log is not None else (lambda m: None))[0]
        return pols[str(spec)][0]
    if p.is_file() and p.suffix == ".npz":
        return _package_checkpoint(p)
    if checkpoint:
        return from_pretrained(p, dtype=options.dtype or "float32", pad_id=options.pad_id,
                               pad_embedding=options.pad_embedding or "frozen")
    raise ValueError(f"model {str(spec)!r} is neither one of {', '.join(PACKAGE_MODELS)}, a "
                     f"package checkpoint (.npz), a Hugging Face checkpoint directory nor a "
                     f".gguf file")


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
    kind = checkpoint_format(p)
    if kind == "gguf":
        read_gguf_config(p)
        return p
    if kind is None:
        raise ValueError(f"model {p!r} is neither a directory nor a .gguf file: --model needs "
                         "a local Hugging Face checkpoint directory (config.json, "
                         "tokenizer.json, *.safetensors) or a llama.cpp .gguf file; nothing is "
                         "downloaded")
    io.read_config(p)
    return p


@lru_cache(maxsize=2)
def model_policy(path: str, dtype: str = "float32", pad_id: int | None = None):
    """The :class:`~grpo_theory.lm.checkpoints.hf.HFPolicy` of a checkpoint directory in ``dtype``
    with padding id ``pad_id`` (None: the checkpoint's), loaded once per process (its compiled
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
