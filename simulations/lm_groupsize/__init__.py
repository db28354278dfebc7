"""Figure 5 / Table 2 analogue: the best group size under a fixed budget N = B G in GRPO training.

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import (CLAIM, EXPERIMENT, NAME, PRACTICAL, SCHEMA, SETTINGS, Settings, Sweep, cell,
                    cells)
from .analysis import N_BOOT, bootstrap_best_g, plot, prediction, report, summary

__all__ = ["NAME", "CLAIM", "N_BOOT", "PRACTICAL", "Sweep", "Settings", "SETTINGS", "SCHEMA",
           "cells", "cell", "bootstrap_best_g", "summary", "prediction", "report", "plot",
           "EXPERIMENT"]
