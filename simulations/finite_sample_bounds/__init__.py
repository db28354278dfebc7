"""Claim 4 (Lemma 6): simulated E[Delta_n] stays below both finite-sample bounds.

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``); this face
re-exports what its users need.
"""

from .study import (NAME, CLAIM, Settings, SETTINGS, SCHEMA, cells, cell, bound_values, summary,
                    checks, report, plot, EXPERIMENT, ESTIMATORS)

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "cells", "cell", "bound_values",
           "summary", "checks", "report", "plot", "EXPERIMENT", "ESTIMATORS"]
