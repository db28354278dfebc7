"""Experiment infrastructure: settings, cells and checks, the validated cell store, executors,
progress, the reports' shared statistics and tables, and the ``grpo-theory`` command.

This ``__init__`` is the face of :mod:`grpo_theory.experiments`: ``__all__`` lists the public
names. Its statistics (:mod:`.stats`: bootstraps, Spearman, markdown tables for the reports) are
not the result interface of the estimates, which is :mod:`grpo_theory.core.stats`. The command
line lives in :mod:`.cli` (``grpo-theory``, :func:`grpo_theory.experiments.cli.main`) and the
registry of studies in :mod:`.registry` (``registry.experiments()``); neither is imported here,
so a study that imports the runner loads no command-line code. The names load on first
access, so the command line starts without JAX. The LM studies' library code (gradient MSE,
the score Gram's rank, the mixture MSE, the advisor on the arithmetic task) is
:mod:`.lm_support`, not imported here either.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the face as static tools (griffe, the docs, type checkers) read it
    from .checks import VERDICTS, Check, Section, check
    from .executors import DaskExecutor, open_executor
    from .paired import mean_ci, paired_squared_errors
    from .progress import CellProgress
    from .runner import (Cell, Experiment, InProcessExecutor, RunResult, Tables, cell_key,
                         collect, is_timing, key_seed, last_run, report_section, run_experiment,
                         run_experiments)
    from .stats import (ArgminBootstrap, SpearmanResult, bootstrap_argmin, bootstrap_ci,
                        bootstrap_ratio_ci, interval_from_freq, markdown_table,
                        minimum_detectable_effect, ratio_ci, spearman)
    from .store import (CellSchemaError, CellStore, atomic_write_csv, atomic_write_text,
                        check_out_dir)

# public name -> module that defines it; loaded on first access (PEP 562), so that importing
# the command line (`grpo-theory --help`) loads neither JAX nor pandas
_ATTRS = {
    **dict.fromkeys(("Cell", "Experiment", "InProcessExecutor", "RunResult", "Tables", "cell_key",
                     "collect", "is_timing", "key_seed", "last_run", "report_section",
                     "run_experiment", "run_experiments"), "runner"),
    **dict.fromkeys(("VERDICTS", "Check", "Section", "check"), "checks"),
    **dict.fromkeys(("CellSchemaError", "CellStore", "atomic_write_csv", "atomic_write_text",
                     "check_out_dir"), "store"),
    **dict.fromkeys(("DaskExecutor", "open_executor"), "executors"),
    "CellProgress": "progress",
    **dict.fromkeys(("mean_ci", "paired_squared_errors"), "paired"),
    **dict.fromkeys(("ArgminBootstrap", "SpearmanResult", "bootstrap_argmin", "bootstrap_ci",
                     "bootstrap_ratio_ci", "interval_from_freq", "markdown_table", "ratio_ci",
                     "spearman", "minimum_detectable_effect"), "stats"),
}

__all__ = [
    # experiments, cells, checks and runs
    "Experiment", "Cell", "Check", "check", "VERDICTS", "Section", "Tables", "RunResult",
    "run_experiment", "run_experiments", "collect", "last_run", "report_section", "is_timing",
    "cell_key", "key_seed",
    # the validated cell store
    "CellStore", "CellSchemaError", "atomic_write_text", "atomic_write_csv", "check_out_dir",
    # executors and progress
    "InProcessExecutor", "DaskExecutor", "open_executor", "CellProgress",
    # the reports' statistics and tables
    "ArgminBootstrap", "bootstrap_argmin", "interval_from_freq", "bootstrap_ci",
    "bootstrap_ratio_ci", "ratio_ci", "SpearmanResult", "spearman", "markdown_table",
    "minimum_detectable_effect",
    # paired Monte Carlo of several estimators on the same groups (the studies' shared code)
    "paired_squared_errors", "mean_ci",
]


def __getattr__(name: str):
    if name in _ATTRS:
        value = getattr(importlib.import_module(f".{_ATTRS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_ATTRS))
