"""Credit assignment and the rank-2 structure of GRPO gradients (arXiv 2606.29238).

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import (CLAIM, EXPERIMENT, NAME, SCHEMA, SETTINGS, Settings, cell, cells,
                    control_policy, mlp_policy)
from .analysis import checks, plot, report

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "cells", "cell", "mlp_policy",
           "control_policy", "checks", "report", "plot", "EXPERIMENT"]
