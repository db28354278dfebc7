r"""Rollout allocation: what the field's rollout rules do to GRPO's gradient, exactly, and the
MSE-optimal unbiased allocation.

For each member (the scaling-law bandit family at theta0 and theta*, and a two-prompt
difficulty mix) and each rule of :mod:`grpo_theory.allocation` at the member's uniform G*
(fixed G, VIP and sGPO pass-rate allocations, DAPO dynamic sampling, C-GRPO conformal stopping,
PODS max-variance subsets, Reinforce-Ada plain and balanced), :func:`grpo_theory.allocation.audit`
gives the exact bias, MSE, expected rollouts and prompt weights; the optimal allocation
(:mod:`grpo_theory.allocation.optimal`) is scored at the same expected rollouts. Monte Carlo
checks the audit; a plug-in run scores the optimal allocation chosen from noisy estimates; a
training run compares fixed G*, the optimal allocation, dynamic sampling and conformal
stopping at equal rollouts (:mod:`.training`).

PASS: greedy = brute force; alike prompts give G*; the optimal allocation is below uniform and
below every unbiased rule at matched rollouts; its MSE equals the auditor's; the rules fixed
before sampling are unbiased and the data-dependent ones biased; exact = Monte Carlo; every
training cell has a CI over >= 16 seeds.

    grpo-theory rollout-allocation [--quick|--full]
"""

from __future__ import annotations

from grpo_theory.experiments import Experiment
from grpo_theory._precision import float64

from . import cells as _cells
from .cells import SCHEMA, UNBIASED, cells, member_problem, member_rules
from .report import checks, plot, report, summaries
from .settings import SETTINGS, Settings

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "UNBIASED", "cells", "cell",
           "member_problem", "member_rules", "summaries", "checks", "report", "plot",
           "EXPERIMENT"]

NAME = "rollout-allocation"
CLAIM = ("adaptive rollout rules reweight and shrink GRPO's gradient; the greedy allocation is "
         "the MSE-optimal unbiased one at matched rollouts")

@float64
def cell(config: dict, key):
    """One cell (defined here: the runner imports the module that defines the cell function
    and finds the experiment in it)."""
    return _cells.cell(config, key)


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=60)
