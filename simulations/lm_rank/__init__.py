"""Rank of the small transformer's group gradients (the credit-assignment companion's claim).

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import (NAME, CLAIM, FORMATS, ESTIMATOR, Z_TOL, IDENTITY_TOL, RANK2, RUN_POLICY, Run,
                    Settings, SETTINGS, SCHEMA, cells, cell, report, plot, EXPERIMENT)

__all__ = ["NAME", "CLAIM", "FORMATS", "ESTIMATOR", "Z_TOL", "IDENTITY_TOL", "RANK2", "RUN_POLICY",
           "Run", "Settings", "SETTINGS", "SCHEMA", "cells", "cell", "report", "plot",
           "EXPERIMENT"]
