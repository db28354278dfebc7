"""DPPO: random pruning with 1/q rescaling is unbiased; four negative controls are biased.

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import CLAIM, EXPERIMENT, NAME, SCHEMA, SETTINGS, Settings, cell, cells, report
from .analysis import EXACT_TOL, Z_TOL, plot, summary, trade_view

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "cells", "cell", "summary",
           "trade_view", "report", "plot", "EXPERIMENT", "EXACT_TOL", "Z_TOL"]
