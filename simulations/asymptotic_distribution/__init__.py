"""Claim 5 (Theorem 8, Corollaries 9-10): n Delta_n -> sum_k w_k chi^2_1, weights from the

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import (CLAIM, EXPERIMENT, NAME, RUNS, SCHEMA, SETTINGS, Settings, cell, cells, checks,
                    group_sweep, predictions)
from .analysis import KS_ACCEPT, Z_TOL, analyse, plot, report, slopes

__all__ = ["NAME", "CLAIM", "RUNS", "Settings", "SETTINGS", "SCHEMA", "cells", "cell",
           "predictions", "group_sweep", "analyse", "slopes", "checks", "report", "plot",
           "EXPERIMENT", "KS_ACCEPT", "Z_TOL"]
