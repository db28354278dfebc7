"""Claim 2 — optimality of the oracle among prompt-only baselines (Corollary 5).

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import (CLAIM, EXPERIMENT, NAME, SCHEMA, SETTINGS, Settings, a2_fails_bandit,
                    a2_holds_bandit, baseline_family, cell, cells, decomposition)
from .analysis import checks, plot, report, summary

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "a2_holds_bandit", "a2_fails_bandit",
           "baseline_family", "decomposition", "cells", "cell", "summary", "checks", "report",
           "plot", "EXPERIMENT"]
