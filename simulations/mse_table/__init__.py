"""Exact vs Monte Carlo MSE of the four main estimators over G (the core engine).

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``); this face
re-exports what its users need.
"""

from .study import (NAME, CLAIM, Settings, SETTINGS, SCHEMA, cells, cell, report, plot, EXPERIMENT)

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "cells", "cell", "report", "plot",
           "EXPERIMENT"]
