"""The experiments the ``grpo-theory`` command knows, keyed by name.

Studies register themselves: every entry point of the group ``grpo_theory.studies`` names a
module that defines an :class:`~grpo_theory.experiments.runner.Experiment` (by convention
``EXPERIMENT``). The package's own drivers (the ``simulations/`` folder, installed as
``grpo_theory.studies``) are declared in its ``pyproject.toml``; another package adds its studies
the same way, in its own ``pyproject.toml``:

.. code-block:: toml

    [project.entry-points."grpo_theory.studies"]
    my-study = "my_package.my_study"

Modules can also be named in ``$GRPO_THEORY_EXPERIMENTS`` (comma-separated; they need only be
importable). The library itself imports no study.
"""

from __future__ import annotations

import importlib
import os
from importlib.metadata import entry_points


#: the entry-point group through which studies register
GROUP = "grpo_theory.studies"
EXTRA_ENV = "GRPO_THEORY_EXPERIMENTS"


def modules() -> list[str]:
    """The study modules: the entry points of :data:`GROUP`, then ``$GRPO_THEORY_EXPERIMENTS``."""
    registered = sorted({ep.value.split(":")[0] for ep in entry_points(group=GROUP)})
    extra = [m.strip() for m in os.environ.get(EXTRA_ENV, "").split(",") if m.strip()]
    return registered + [m for m in extra if m not in registered]


def names() -> list[str]:
    """The experiments' names without importing the registered studies: the entry points'
    names of :data:`GROUP`, then the experiments of the ``$GRPO_THEORY_EXPERIMENTS`` modules
    (imported; they name no entry point)."""
    eps = entry_points(group=GROUP)
    found = sorted({ep.name for ep in eps})
    registered = {ep.value.split(":")[0] for ep in eps}
    extra = [m for m in modules() if m not in registered]
    if not extra:
        return found
    from .runner import Experiment

    for mod in extra:
        for v in vars(importlib.import_module(mod)).values():
            if isinstance(v, Experiment) and v.name not in found:
                found.append(v.name)
    return found


def experiments() -> dict:
    """``{name: Experiment}`` in report order."""
    from .runner import Experiment

    found = {}
    for name in modules():
        mod = importlib.import_module(name)
        exps = [v for v in vars(mod).values() if isinstance(v, Experiment)]
        if not exps:
            raise ValueError(f"module {name} defines no Experiment")
        for e in exps:
            found[e.name] = e
    return dict(sorted(found.items(), key=lambda kv: (kv[1].order, kv[0])))


def get(name: str) -> Experiment:
    """The experiment called ``name``; a ``ValueError`` listing the known names otherwise."""
    exps = experiments()
    if name not in exps:
        raise ValueError(f"unknown experiment {name!r}; known: {', '.join(exps)}")
    return exps[name]
