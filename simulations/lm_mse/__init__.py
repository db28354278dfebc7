"""Figure 4 analogue on a small transformer: gradient MSE of vanilla / grpo / oracle vs G.

The study's modules: ``study`` (settings, sweep, cell function, the ``EXPERIMENT``), ``analysis``
(summaries, checks, report, figure); this face re-exports what its users need.
"""

from .study import (NAME, CLAIM, FORMATS, Z_TOL, REL_TOL, Settings, SETTINGS, SCHEMA, cells, cell,
                    policies, model_path, model_policy, response_texts, MODEL_DTYPES,
                    check_model_options, phase_lines, model_cell, policy_accuracies,
                    accuracy_order, checks, report, plot, EXPERIMENT)

__all__ = ["NAME", "CLAIM", "FORMATS", "Z_TOL", "REL_TOL", "Settings", "SETTINGS", "SCHEMA",
           "cells", "cell", "policies", "model_path", "model_policy", "response_texts",
           "MODEL_DTYPES", "check_model_options", "phase_lines", "model_cell", "policy_accuracies",
           "accuracy_order", "checks", "report", "plot", "EXPERIMENT"]
