"""The advisor's study on a real pretrained model: SmolLM2-135M-Instruct on arithmetic.

Not a registered experiment (the model file is a download, which a fresh clone lacks); it runs
as a module::

    python -m grpo_theory.studies.smollm2 --model FILE --out DIR [...]

The study's modules: ``study`` (the two phases, their configuration and the command line),
``tasks`` (prompt families and pass rates), ``analysis`` (tables, figure and REPORT.md);
``measured`` (the gradient MSE against G measured from independent groups, next to the
advisor's prediction: ``python -m grpo_theory.studies.smollm2.measured``), its statistics
``measured_stats`` and its tables ``measured_report``.
"""

from .tasks import CANDIDATES, candidate_questions, choose_task, sample_pass_rates
from .study import StudyConfig, main, run_study
from .analysis import budget_table, figure, mse_table, report, zero_variance_table

__all__ = ["CANDIDATES", "StudyConfig", "candidate_questions", "sample_pass_rates",
           "choose_task", "zero_variance_table", "mse_table", "budget_table", "run_study",
           "figure", "report", "main"]
