"""Explicit float64: the exact routines say so at their ``def`` with :func:`float64`.

Importing the package never changes JAX's configuration, and no module's globals are rewritten.
Each exact or Monte Carlo routine that needs float64 carries ``@float64`` at its definition; the
decorator enters ``jax.enable_x64(True)`` for the duration of the call, so its results are
float64 whatever the caller's setting. Everything else (a user's model, the language-model
policy, the runner) keeps the caller's setting: float32 unless the user enabled x64 with
``jax.config.update("jax_enable_x64", True)`` (or ``JAX_ENABLE_X64=1``) before any array is made.
A study whose cells need float64 decorates its ``cell`` function the same way.
"""

from __future__ import annotations

import functools

import jax


def float64(fn):
    """Decorator: run ``fn`` inside ``jax.enable_x64(True)`` (restored on exit, also on error)."""
    if getattr(fn, "__grpo_float64__", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with jax.enable_x64(True):
            return fn(*args, **kwargs)

    wrapper.__grpo_float64__ = True
    return wrapper
