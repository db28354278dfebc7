"""Claim 2 — optimality of the oracle among prompt-only baselines (Corollary 5).

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import (NAME, CLAIM, Settings, SETTINGS, SCHEMA, a2_holds_bandit, a2_fails_bandit,
                    baseline_family, decomposition, cells, cell, summary, checks, report, plot,
                    EXPERIMENT)

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "a2_holds_bandit", "a2_fails_bandit",
           "baseline_family", "decomposition", "cells", "cell", "summary", "checks", "report",
           "plot", "EXPERIMENT"]
