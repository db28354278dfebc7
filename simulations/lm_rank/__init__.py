"""Rank of the small transformer's group gradients (the credit-assignment companion's claim).

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import (CLAIM, ESTIMATOR, EXPERIMENT, NAME, RUN_POLICY, SCHEMA, SETTINGS, Run,
                    Settings, cell, cells, report)
from .analysis import FORMATS, IDENTITY_TOL, RANK2, Z_TOL, plot

__all__ = ["NAME", "CLAIM", "FORMATS", "ESTIMATOR", "Z_TOL", "IDENTITY_TOL", "RANK2", "RUN_POLICY",
           "Run", "Settings", "SETTINGS", "SCHEMA", "cells", "cell", "report", "plot",
           "EXPERIMENT"]
