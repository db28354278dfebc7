"""Figure 5 / Table 2 analogue: the best group size under a fixed budget N = B G in GRPO training.

From the instruct policy (answer-only format, :mod:`grpo_theory.lm.training.grpo`), Algorithm 1 with
Adam at budgets N and group sizes G, several seeds; held-out accuracy (exact expected reward on the
evaluation questions) at several checkpoints; the best G per checkpoint and N with a bootstrap CI
over seeds; next to it G* = 1 + sqrt(c3/c1) predicted from c1, c3 measured at the starting policy
(Theorem 7). A ``train`` cell is one training run (N, G, replicate): its accuracy at every
checkpoint; a ``prediction`` cell is c1, c2, c3 and G* at the starting policy for one set of
questions. The report states where the prediction holds (G* inside the bootstrap CI of the best G)
and where it does not; PASS means every cell ran, the constants are valid (c1 > 0) and the
accuracies are probabilities, never that the curve has a particular shape.

Difficulty spread knob: ``TaskConfig.hard_fraction`` (share of two-digit questions; see
:mod:`grpo_theory.lm.task`). The main sweep uses the task's default; a smaller sweep (one budget,
fewer seeds) repeats the study with the *same* starting policy on training and evaluation
questions drawn at other hard fractions, and reports how the pass-rate spread, the predicted G*
and the empirical best G move with it. A third sweep runs the practical variant (``PRACTICAL``:
std-normalised advantages, clipped multi-epoch updates) at one budget next to Algorithm 1.
The starting policy is lm-mse's instruct checkpoint (same warm-up, same ``cache_dir()/lm``).

With ``--model PATH`` (``Settings.model``: a Hugging Face checkpoint directory) the starting
policy is that checkpoint: prompts are the questions as text in its tokenization (its chat
template when it has one), canonical responses the tokenized answer followed by its EOS
(:func:`grpo_theory.lm.training.grpo.task_tokens`); the reward inside the jitted loop is the
exact-token match of that canonical tokenization and the held-out accuracy is still the exact
``mean_x pi(y*|x)`` by teacher forcing. G* comes from the advisor's sample-based c1, c3 with 95%
intervals (:func:`grpo_theory.experiments.lm_support.advised.advised_group_size`, kind
``prediction_model``).

    grpo-theory lm-groupsize [--full] [--model PATH]
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from grpo_theory.experiments.progress import phase_lines
from grpo_theory.experiments import Cell, Experiment, key_seed
from grpo_theory._precision import float64
from grpo_theory.experiments.lm_support import advised_group_size
from grpo_theory.lm import (QUICK_WARMUP, TaskConfig, WarmupConfig, eval_set, model_policy,
                            predicted_group_size, study_policies, train_grpo, train_pool)
from grpo_theory.experiments.model_settings import ModelSettings
from grpo_theory.lm.checkpoints import model_path

from .analysis import (N_BOOT, bootstrap_best_g, plot, prediction, report, summary,
                       training_gate)

__all__ = ["NAME", "CLAIM", "N_BOOT", "PRACTICAL", "Sweep", "Settings", "SETTINGS", "SCHEMA",
           "cells", "cell", "bootstrap_best_g", "summary", "prediction", "training_gate",
           "report", "plot",
           "EXPERIMENT"]

NAME = "lm-groupsize"
CLAIM = ("GRPO training of the small transformer at fixed budget N = BG: best G per checkpoint "
         "with bootstrap CIs vs G* = 1 + sqrt(c3/c1) (Figure 5 / Table 2 analogue)")

#: the practical variant: std-normalised advantages, two clipped epochs per batch
PRACTICAL = dict(estimator="grpo_std", epochs=2, clip_eps=0.2)
#: Algorithm 1: leave-one-out advantages, one plain gradient step per batch
ALGORITHM_1 = dict(estimator="grpo", epochs=1, clip_eps=None)


@dataclass(frozen=True)
class Sweep:
    """A secondary sweep: budgets x group sizes x ``seeds`` replicates (``hard_fractions``: the
    difficulty knob's values; unused by the practical sweep)."""

    budgets: tuple
    group_sizes: tuple
    seeds: int
    hard_fractions: tuple = ()


@dataclass(frozen=True)
class Settings(ModelSettings):
    """The main sweep (budgets x group sizes x seeds) and the two extra sweeps.

    Attributes:
        warmup: the warm-up policies' configuration (:class:`~grpo_theory.lm.warmup.WarmupConfig`).
        budgets: responses per step N = B G of the main sweep.
        group_sizes: the group sizes G of the main sweep (each divides every budget).
        seeds: training runs per (budget, G).
        steps: Adam steps per run.
        checkpoints: the steps at which accuracy is measured.
        lr: Adam's learning rate.
        n_eval: evaluation questions the accuracy is measured on.
        n_pool: training questions the prompts are drawn from.
        gstar_samples: responses per question behind the predicted G*.
        knob: the difficulty-knob sweep (:class:`Sweep` with ``hard_fractions``).
        practical: the practical-GRPO sweep (:class:`Sweep`).

    The model options (``model``: the checkpoint to start from; None: the instruct warm-up
    policy) are :class:`~grpo_theory.experiments.model_settings.ModelSettings`'.
    """

    warmup: WarmupConfig
    budgets: tuple
    group_sizes: tuple
    seeds: int
    steps: int
    checkpoints: tuple
    lr: float
    n_eval: int
    n_pool: int
    gstar_samples: int
    knob: Sweep
    practical: Sweep


SETTINGS = {
    "quick": Settings(warmup=QUICK_WARMUP, budgets=(128,),
                      group_sizes=(4, 16, 64), seeds=8, steps=10, checkpoints=(5, 10), lr=1e-3,
                      n_eval=100, n_pool=2000, gstar_samples=16,
                      knob=Sweep(hard_fractions=(0.5,), budgets=(128,), group_sizes=(4, 64),
                                 seeds=1),
                      practical=Sweep(budgets=(128,), group_sizes=(4, 64), seeds=1)),
    "full": Settings(warmup=WarmupConfig(), budgets=(256, 512, 1024),
                     group_sizes=(2, 4, 8, 16, 32, 64, 128), seeds=5, steps=100,
                     checkpoints=(25, 50, 75, 100), lr=1e-3, n_eval=500, n_pool=20000,
                     gstar_samples=64,
                     knob=Sweep(hard_fractions=(0.0, 0.75), budgets=(512,),
                                group_sizes=(2, 4, 8, 16, 32, 64, 128), seeds=3),
                     practical=Sweep(budgets=(512,), group_sizes=(2, 4, 8, 16, 32, 64, 128),
                                     seeds=3)),
}

_TAG = dict(sweep="str", hard_fraction="float")
SCHEMA = {
    "train": dict(_TAG, N="int", G="int", B="int", run_seed="int", step="int", accuracy="float",
                  train_reward="float?", estimator="str", epochs="int", clip_eps="float?",
                  steps_per_s="float"),
    "prediction": dict(_TAG, c1="float", c2="float", c3="float", G_paper="float?",
                       G_continuous="float?", G_exact="int", J="float", V_q10="float",
                       V_median="float", V_q90="float", frac_V_below_5pct="float",
                       frac_V_above_95pct="float"),
}
#: G* of a Hugging Face checkpoint: the advisor's estimates with 95% intervals
SCHEMA["prediction_model"] = dict(
    SCHEMA["prediction"], c1_low="float", c1_high="float", c2_low="float", c2_high="float",
    c3_low="float", c3_high="float", G_low="float?", G_high="float?", n_samples="int")


def cells(s: Settings) -> list[Cell]:
    """The main sweep (G* prediction, then the runs seed-major, so an interrupted run holds
    complete G sweeps for the first seeds), the difficulty-knob sweep, the practical sweep.
    With ``s.model`` every configuration also holds the checkpoint's path (checked here)."""
    data = dict(warmup=s.warmup, n_eval=s.n_eval)
    if s.model is not None:
        data.update(model=model_path(s.model), model_chunk=s.model_chunk,
                    model_memory_budget=s.model_memory_budget, model_dtype=s.model_dtype,
                    model_pad_id=s.model_pad_id)
    pkind = "prediction" if s.model is None else "prediction_model"
    run = dict(data, n_pool=s.n_pool, steps=s.steps, checkpoints=tuple(s.checkpoints), lr=s.lr)

    def pred(sweep, h, prefix):
        return Cell(prefix + "predicted_gstar", dict(data, measure="prediction", sweep=sweep,
                                                     hard_fraction=h,
                                                     gstar_samples=s.gstar_samples),
                    kind=pkind)

    def runs(sweep, h, prefix, sw, variant):
        return [Cell(f"{prefix}N{n}_G{g}_seed{r}", dict(run, measure="train", sweep=sweep,
                                                        hard_fraction=h, N=n, G=g, run_seed=r,
                                                        **variant), kind="train")
                for r in range(sw.seeds) for n in sw.budgets for g in sw.group_sizes if g <= n]

    h0 = float(s.warmup.task.hard_fraction)
    main = Sweep(budgets=tuple(s.budgets), group_sizes=tuple(s.group_sizes), seeds=s.seeds)
    out = [pred("main", h0, "")] + runs("main", h0, "", main, ALGORITHM_1)
    for h in s.knob.hard_fractions:
        out += [pred("knob", float(h), f"hard{h:g}_")]
        out += runs("knob", float(h), f"hard{h:g}_", s.knob, ALGORITHM_1)
    out += runs("practical", h0, "practical_", s.practical, PRACTICAL)
    return out


@lru_cache(maxsize=4)
def _questions(task: TaskConfig, n_eval: int, n_pool: int | None):
    """Evaluation questions (the first ``n_eval``) and, if ``n_pool``, the training pool."""
    ev = eval_set(task).subset(np.arange(n_eval))
    return ev, (train_pool(task, n=n_pool) if n_pool else None)


@float64
def cell(config: dict, key) -> dict | list[dict]:
    """G* predicted at the starting policy (the instruct policy or ``config["model"]``), or one
    training run from it (rows per checkpoint)."""
    wcfg = config["warmup"]
    model = config.get("model")
    start = (study_policies(wcfg)["instruct"][0] if model is None else
             model_policy(model, config.get("model_dtype", "float32"),
                          config.get("model_pad_id")))
    task = dataclasses.replace(wcfg.task, hard_fraction=config["hard_fraction"])
    tag = dict(sweep=config["sweep"], hard_fraction=config["hard_fraction"])
    if config["measure"] == "prediction":
        questions, _ = _questions(task, config["n_eval"], None)
        if model is not None:
            p = advised_group_size(start, questions, config["gstar_samples"], key,
                                   chunk=config["model_chunk"],
                                   memory_budget=config.get("model_memory_budget"),
                                   stage=phase_lines(f"{NAME} model"))
        else:
            p = predicted_group_size(start, questions, config["gstar_samples"],
                                     seed=key_seed(key))
        return dict(p, **tag)
    questions, pool = _questions(task, config["n_eval"], config["n_pool"])
    variant = {k: config[k] for k in ("estimator", "epochs", "clip_eps")}
    n, g = config["N"], config["G"]
    t0 = time.perf_counter()
    rows = train_grpo(start, pool, questions, n, g, config["steps"], config["checkpoints"],
                      config["lr"], seed=key_seed(key), **variant)
    dt = time.perf_counter() - t0
    return [dict(r, N=n, G=g, B=n // g, run_seed=config["run_seed"],
                 steps_per_s=config["steps"] / dt, **tag, **variant) for r in rows]


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=61)
