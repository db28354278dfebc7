"""A reward named on the command line (``advise --reward SPEC``), imported without letting a file
of the current folder stand in for an installed package.

``SPEC`` is ``path/to/file.py:function`` (that file, imported from its location: a path holding
a ``/`` or ending in ``.py``, relative to the current folder) or ``module:function`` (a dotted
name imported from the normal import path; when no installed module has that name, the file
``module.py`` (``a/b.py`` for ``a.b``) of the current folder, imported from its location).
``sys.path`` is never changed, so a file ``numpy.py`` or ``json.py`` next to the reward does not
replace the package of that name, for the reward's imports nor for the package's.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path


_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _from_file(path: Path, spec: str, name: str | None = None):
    """The module of the file ``path``, imported from that location (registered in
    ``sys.modules`` under ``name``, default a private name of its own)."""
    if not path.is_file():
        raise ValueError(f"reward {spec!r}: file {str(path)!r} does not exist")
    name = name or f"_grpo_theory_reward_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ValueError(f"reward {spec!r}: {str(path)!r} is not a Python file")
    mod = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = mod
    try:
        loader_spec.loader.exec_module(mod)
    except Exception as e:
        del sys.modules[name]
        raise ValueError(f"reward {spec!r}: importing {str(path)!r} failed "
                         f"({type(e).__name__}: {e})") from None
    return mod


def _installed(name: str):
    """The module spec of ``name`` on the normal import path (the current folder not added),
    or None."""
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a parent package that is missing or not a package
        return None


def import_reward(spec):
    """The callable named by ``spec`` (module docstring); one-line ``ValueError`` otherwise."""
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"reward must be 'module:function' or 'path/to/file.py:function', got "
                         f"{spec!r}")
    where, _, fn_name = spec.rpartition(":")
    if not where or not fn_name or not fn_name.isidentifier():
        raise ValueError(f"reward must be 'module:function' or 'path/to/file.py:function', got "
                         f"{spec!r}")
    if where.endswith(".py") or "/" in where or os.sep in where:
        mod = _from_file(Path(where).expanduser(), spec)
    elif not _DOTTED.fullmatch(where):
        raise ValueError(f"reward {spec!r}: {where!r} is neither a module name nor a .py file")
    elif _installed(where) is not None:
        try:
            mod = importlib.import_module(where)
        except Exception as e:
            raise ValueError(f"reward {spec!r}: cannot import module {where!r} "
                             f"({type(e).__name__}: {e})") from None
    else:  # searched after the installed modules: the current folder's file, by its location
        local = Path.cwd() / (where.replace(".", os.sep) + ".py")
        if not local.is_file():
            raise ValueError(f"reward {spec!r}: cannot import module {where!r} (not installed, "
                             f"and no {str(local)!r})")
        mod = sys.modules.get(where)
        if mod is None or getattr(mod, "__file__", None) != str(local):
            mod = _from_file(local, spec, name=where if "." not in where else None)
    fn = getattr(mod, fn_name, None)
    if fn is None:
        raise ValueError(f"reward {spec!r}: module {where!r} has no attribute {fn_name!r}")
    if not callable(fn):
        raise ValueError(f"reward {spec!r}: {fn_name!r} is not callable")
    return fn
