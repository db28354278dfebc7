"""Figure 4 analogue on a small transformer: gradient MSE of vanilla / grpo / oracle vs G.

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import (CLAIM, EXPERIMENT, NAME, SCHEMA, SETTINGS, Settings, cell, cells, model_cell,
                    policy_accuracies)
from .analysis import FORMATS, REL_TOL, Z_TOL, accuracy_order, checks, plot, report
from grpo_theory.lm import model_policy, study_policies as policies
from grpo_theory.lm.checkpoints import check_model_options, model_path, response_texts
from grpo_theory.lm.budget import MODEL_DTYPES
from grpo_theory.experiments.progress import phase_lines

__all__ = ["NAME", "CLAIM", "FORMATS", "Z_TOL", "REL_TOL", "Settings", "SETTINGS", "SCHEMA",
           "cells", "cell", "policies", "model_path", "model_policy", "response_texts",
           "MODEL_DTYPES", "check_model_options", "phase_lines", "model_cell", "policy_accuracies",
           "accuracy_order", "checks", "report", "plot", "EXPERIMENT"]
