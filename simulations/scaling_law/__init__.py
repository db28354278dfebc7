"""Claim 3 — the group-size scaling law (Theorem 7) for the gradient MSE and for training.

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import CLAIM, EXPERIMENT, NAME, SCHEMA, SETTINGS, Settings, cell, cells, optimum
from grpo_theory.core import grid_argmin
from .analysis import checks, plot, report, summaries

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "optimum", "grid_argmin", "cells",
           "cell", "summaries", "checks", "report", "plot", "EXPERIMENT"]
