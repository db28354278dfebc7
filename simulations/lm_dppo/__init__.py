"""DPPO pruning inside the small transformer's GRPO loop: measured speed-up at equal accuracy.

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import CLAIM, EXPERIMENT, NAME, SCHEMA, SETTINGS, VARIANTS, Settings, cell, cells
from .analysis import CLOCKS, N_BOOT, Z_TOL, plot, rate_summary, report, run_summary
from grpo_theory.experiments import bootstrap_ci

__all__ = ["NAME", "CLAIM", "Z_TOL", "N_BOOT", "VARIANTS", "Settings", "SETTINGS", "SCHEMA",
           "CLOCKS", "cells", "cell", "bootstrap_ci", "run_summary", "rate_summary", "report",
           "plot", "EXPERIMENT"]
