"""Where expensive shared artefacts (language-model checkpoints) are cached, and under what key.

The experiment runner points :func:`cache_dir` at ``<out>/.cache`` while it runs a cell
(:func:`cache_context`), so the studies of one output folder share their checkpoints; the advisor
and user code read the same folder. An artefact's folder inside it is :func:`artefact_key`: its
configuration's tag together with everything else its numbers depend on, the floating-point
precision it is computed in (:func:`precision`), so a float32 and a float64 run of the same
configuration are two entries, never one that whichever ran first decides. This module sits
below every layer of the package.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import jax
import numpy as np


#: the floating-point precisions an artefact can be computed in
PRECISIONS = ("float32", "float64")

#: environment variable that overrides the cache folder everywhere
CACHE_ENV = "GRPO_THEORY_CACHE"

_CONTEXT: dict = {}


def cache_dir() -> Path:
    """Folder for expensive shared artefacts (checkpoints) of the running experiment.

    ``<out>/.cache`` when run by the runner; ``$GRPO_THEORY_CACHE`` overrides it; otherwise
    ``~/.cache/grpo-theory``.
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    if "cache_dir" in _CONTEXT:
        return Path(_CONTEXT["cache_dir"])
    return Path.home() / ".cache" / "grpo-theory"


@contextlib.contextmanager
def cache_context(cache):
    """Within the block, :func:`cache_dir` is ``cache`` (unless ``$GRPO_THEORY_CACHE`` is set;
    ``None`` leaves it unchanged)."""
    old = dict(_CONTEXT)
    if cache is not None:
        _CONTEXT["cache_dir"] = str(cache)
    try:
        yield
    finally:
        _CONTEXT.clear()
        _CONTEXT.update(old)


def precision() -> str:
    """The floating-point precision JAX computes in here and now: ``"float64"`` inside
    ``jax.enable_x64(True)`` (a study's ``@float64`` cell) or with x64 enabled globally, else
    ``"float32"``."""
    return str(jax.dtypes.canonicalize_dtype(np.float64))


def artefact_key(tag: str, dtype: str | None = None) -> str:
    """The cache key (a folder name) of an artefact: ``<tag>_<precision>``.

    Args:
        tag: the configuration's tag (every setting the artefact depends on, e.g.
            ``WarmupConfig.tag()``); letters, digits and ``._=+-`` only.
        dtype: the precision, ``"float32"`` or ``"float64"`` (default :func:`precision`,
            the one in effect when the artefact is made or read).

    Returns:
        The key, e.g. ``"d32L1h2_..._float64"``.
    """
    if not isinstance(tag, str) or not re.fullmatch(r"[A-Za-z0-9._=+-]+", tag):
        raise ValueError(f"tag must be a non-empty folder name of letters, digits and ._=+-, "
                         f"got {tag!r}")
    p = precision() if dtype is None else dtype
    if p not in PRECISIONS:
        raise ValueError(f"dtype must be one of {', '.join(PRECISIONS)}, got {p!r}")
    return f"{tag}_{p}"
