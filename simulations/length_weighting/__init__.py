"""Length weighting f_alpha(L) = L^(alpha-1): exact bias, length sensitivity, training.

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import CLAIM, EXPERIMENT, NAME, SCHEMA, SETTINGS, Settings, cell, cells, report
from .analysis import checks, plot, training_summary

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "cells", "cell", "training_summary",
           "checks", "report", "plot", "EXPERIMENT"]
