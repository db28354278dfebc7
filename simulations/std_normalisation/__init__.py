"""Claim 6 — std normalisation changes the objective (Proposition 13).

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import (NAME, CLAIM, Settings, SETTINGS, SCHEMA, std_bandit, arcsin_objective,
                    mean_update, fixed_point, cells, cell, summary, checks, report, plot,
                    EXPERIMENT)

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "std_bandit", "arcsin_objective",
           "mean_update", "fixed_point", "cells", "cell", "summary", "checks", "report", "plot",
           "EXPERIMENT"]
