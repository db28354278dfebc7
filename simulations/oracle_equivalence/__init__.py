"""Claim 1 — oracle equivalence of GRPO's gradient (Theorem 2, Proposition 3, Corollary 4).

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``); this face
re-exports what its users need.
"""

from .study import (NAME, CLAIM, ESTIMATORS, Settings, SETTINGS, SCHEMA, cells, cell, n_reps_for,
                    slope_fit, summary, report, plot, EXPERIMENT)

__all__ = ["NAME", "CLAIM", "ESTIMATORS", "Settings", "SETTINGS", "SCHEMA", "cells", "cell",
           "n_reps_for", "slope_fit", "summary", "report", "plot", "EXPERIMENT"]
