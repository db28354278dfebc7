"""The experiments the ``grpo-theory`` command knows, keyed by name.

Each entry is a module that defines an :class:`~grpo_theory.experiments.runner.Experiment`
(by convention ``EXPERIMENT``). Extra modules (your own studies) can be added with
``$GRPO_THEORY_EXPERIMENTS`` (comma-separated module names); they need only be importable.
"""

from __future__ import annotations

import importlib
import os

from .runner import Experiment

__all__ = ["MODULES", "experiments", "get", "EXTRA_ENV"]

MODULES = (
    "simulations.mse_table",
    "simulations.oracle_equivalence",
    "simulations.baseline_optimality",
    "simulations.scaling_law",
    "simulations.scaling_family",
    "simulations.finite_sample_bounds",
    "simulations.asymptotic_distribution",
    "simulations.std_normalisation",
    "simulations.credit_assignment",
    "simulations.dppo_pruning",
    "simulations.prompt_packing",
    "simulations.length_weighting",
    "simulations.practical_grpo",
    "simulations.lm_mse",
    "simulations.lm_groupsize",
    "simulations.lm_rank",
    "simulations.lm_dppo",
)
EXTRA_ENV = "GRPO_THEORY_EXPERIMENTS"


def _modules() -> list[str]:
    extra = [m.strip() for m in os.environ.get(EXTRA_ENV, "").split(",") if m.strip()]
    return list(MODULES) + extra


def experiments() -> dict[str, Experiment]:
    """``{name: Experiment}`` in report order."""
    found = {}
    for name in _modules():
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
