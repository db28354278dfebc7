"""Practical GRPO (Appendix A): Lemma 11 and Theorem 12 on an enumerable sequence policy.

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import CLAIM, EXPERIMENT, NAME, SCHEMA, SETTINGS, Settings, cell, cells, setup
from .analysis import plot, report, summary

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "cells", "cell", "report", "plot",
           "EXPERIMENT", "setup", "summary"]
