r"""A policy from what a command line names: a package model, a checkpoint file or directory.

:func:`load_policy` turns a model spec into an :class:`~grpo_theory.lm.policy.LMPolicy`
(the package's warm-up checkpoints by name, a package ``.npz`` checkpoint, a Hugging Face
checkpoint directory or a llama.cpp ``.gguf`` file, :func:`grpo_theory.lm.hf.from_pretrained`),
with the :class:`~grpo_theory.lm.options.ModelOptions` that apply to loading (``dtype``,
``pad_id``). Callers then use the policy's contract only (its class docstring), never its type.
:func:`is_checkpoint` is the one test of "is this path a checkpoint".
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .._cache import cache_dir as default_cache_dir
from .options import ModelOptions
from .policy import LMPolicy

__all__ = ["PACKAGE_MODELS", "is_checkpoint", "load_policy", "warmup_files"]

#: names of the package's warm-up checkpoints (:mod:`grpo_theory.lm.warmup`)
PACKAGE_MODELS = ("base", "instruct", "icl")


def is_checkpoint(path) -> bool:
    """Whether ``path`` (a str or path-like) names a Hugging Face checkpoint: a directory, or
    a ``.gguf`` file (``~`` expanded; nothing else is read)."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    p = Path(path).expanduser()
    return p.is_dir() or (p.is_file() and p.suffix.lower() == ".gguf")


def _warmup_config(warmup):
    from .warmup import QUICK_WARMUP, WarmupConfig

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

    from .model import ModelConfig, init_params, make_apply, make_sampler

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
    from .warmup import checkpoint_files

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
        options: the :class:`~grpo_theory.lm.options.ModelOptions`; ``dtype``, ``pad_id`` and
            ``pad_embedding`` apply to a checkpoint (:func:`grpo_theory.lm.hf.from_pretrained`) only.
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
    checkpoint = is_checkpoint(p)
    if not checkpoint and options.checkpoint_only:
        got = ", ".join(f"{k}={v!r}" for k, v in options.checkpoint_only.items())
        raise ValueError(f"pad_id, pad_embedding and dtype apply to Hugging Face checkpoints "
                         f"(a directory or a .gguf file) only (the package's models use their "
                         f"own PAD and float32); model {str(spec)!r} is not one, got {got}")
    if str(spec) in PACKAGE_MODELS:
        from .warmup import cached_policies

        folder = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "lm"
        pols = cached_policies(folder, _warmup_config(warmup),
                               log=log if log is not None else (lambda m: None))[0]
        return pols[str(spec)][0]
    if p.is_file() and p.suffix == ".npz":
        return _package_checkpoint(p)
    if checkpoint:
        from .hf import from_pretrained

        return from_pretrained(p, dtype=options.dtype or "float32", pad_id=options.pad_id,
                               pad_embedding=options.pad_embedding or "frozen")
    raise ValueError(f"model {str(spec)!r} is neither one of {', '.join(PACKAGE_MODELS)}, a "
                     f"package checkpoint (.npz), a Hugging Face checkpoint directory nor a "
                     f".gguf file")
