"""Claim 6 — std normalisation changes the objective (Proposition 13).

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import (CLAIM, EXPERIMENT, NAME, SCHEMA, SETTINGS, Settings, arcsin_objective, cell,
                    cells, fixed_point, mean_update, std_bandit)
from .analysis import checks, plot, report, summary

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "std_bandit", "arcsin_objective",
           "mean_update", "fixed_point", "cells", "cell", "summary", "checks", "report", "plot",
           "EXPERIMENT"]
