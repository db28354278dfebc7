"""The scaling law across a problem family: predicted G* against the best group size.

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``bandit``,
``figure``, ``lm``, ``lm_mc``, ``lm_noise``, ``lm_report``; this face re-exports what its users
need.
"""

from .study import (CLAIM, EXPERIMENT, FULL_ESTIMATE, NAME, PARTS, SCHEMA, SETTINGS, Settings,
                    cell, cells, checks, plot, report, summaries)
from .bandit import ETA0
from .lm import LMPart, lm_cells
from grpo_theory.core import grid_argmin
from .lm_report import lm_checkpoint_table, lm_points, lm_reach, read_step, steps_to_reach

__all__ = ["NAME", "CLAIM", "ETA0", "FULL_ESTIMATE", "LMPart", "Settings", "SETTINGS", "SCHEMA",
           "PARTS", "cells", "cell", "lm_cells", "grid_argmin", "read_step", "steps_to_reach",
           "lm_checkpoint_table", "lm_reach", "lm_points", "summaries", "checks", "report", "plot",
           "EXPERIMENT"]
