"""Where expensive shared artefacts (language-model checkpoints) are cached.

The experiment runner points :func:`cache_dir` at ``<out>/.cache`` while it runs a cell
(:func:`cache_context`), so the studies of one output folder share their checkpoints; the advisor
and user code read the same folder. This module sits below every layer of the package.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["cache_dir", "cache_context", "CACHE_ENV"]

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
