"""Scoped float64: the exact routines run inside ``jax.enable_x64(True)``, nothing global.

Importing the package never changes JAX's configuration. Public functions of the exact and Monte
Carlo core are wrapped by :func:`float64`, which enters the scope for the duration of the call, so
their results are float64 whatever the caller's setting; code outside (a user's model, the
language-model policy) keeps the caller's default (float32 unless they enabled x64 themselves).
"""

from __future__ import annotations

import functools
import inspect

import jax

__all__ = ["float64", "scope_module"]


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


def _wrap_class(cls) -> None:
    for name, attr in list(vars(cls).items()):
        if name.startswith("__") and name not in ("__init__", "__call__"):
            continue
        if isinstance(attr, (staticmethod, classmethod)):
            setattr(cls, name, type(attr)(float64(attr.__func__)))
        elif isinstance(attr, property):
            setattr(cls, name, property(float64(attr.fget), attr.fset, attr.fdel, attr.__doc__))
        elif inspect.isfunction(attr):
            setattr(cls, name, float64(attr))


def scope_module(namespace: dict, names=None, classes=()) -> None:
    """Wrap the public functions ``names`` (default ``__all__``) and the methods of ``classes``.

    Called at the bottom of a module: ``scope_module(globals(), classes=(...))``. Functions that
    the module itself calls internally are looked up through its globals, so they are wrapped too
    (nesting a scope is free).
    """
    names = namespace.get("__all__", []) if names is None else names
    mod = namespace.get("__name__")
    for name in names:
        obj = namespace.get(name)
        if inspect.isclass(obj):
            if obj.__module__ == mod:
                _wrap_class(obj)
        elif inspect.isfunction(obj) and obj.__module__ == mod:
            namespace[name] = float64(obj)
    for cls in classes:
        _wrap_class(cls)
