"""The scaling law across a problem family: predicted G* against the best group size.

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``bandit``,
``figure``, ``lm``, ``lm_mc``, ``lm_noise``, ``lm_report``; this face re-exports what its users
need.
"""

from .study import (NAME, CLAIM, ETA0, FULL_ESTIMATE, LMPart, Settings, SETTINGS, SCHEMA, PARTS,
                    cells, cell, lm_cells, grid_argmin, read_step, steps_to_reach,
                    lm_checkpoint_table, lm_reach, lm_points, summaries, checks, report, plot,
                    EXPERIMENT)

__all__ = ["NAME", "CLAIM", "ETA0", "FULL_ESTIMATE", "LMPart", "Settings", "SETTINGS", "SCHEMA",
           "PARTS", "cells", "cell", "lm_cells", "grid_argmin", "read_step", "steps_to_reach",
           "lm_checkpoint_table", "lm_reach", "lm_points", "summaries", "checks", "report", "plot",
           "EXPERIMENT"]
