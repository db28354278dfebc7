"""Baselines beyond the prompt: exact bias and MSE of cross-prompt and score-norm-weighted
baselines against leave-one-out.

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import (NAME, CLAIM, Settings, SETTINGS, SCHEMA, ESTIMATORS, HISTORY,
                    HISTORY_RIVALS, family_bandit,
                    each_design_brute_force, cells, cell, EXPERIMENT)
from .analysis import summary, checks, report, plot

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "ESTIMATORS", "HISTORY",
           "HISTORY_RIVALS", "family_bandit",
           "each_design_brute_force", "cells", "cell", "summary", "checks", "report", "plot",
           "EXPERIMENT"]
