r"""Does acting pay? At equal completions generated, TRL's fixed group size against the
:class:`~grpo_theory.torch.GroupSizeScheduler`, in real ``trl.GRPOTrainer`` runs on CPU.

Arms (``ARMS``), each run for every seed with the same initial model and prompts:

* ``fixed-8``: TRL's default ``num_generations=8`` and its own ``RepeatSampler``;
* ``scheduled-8``: starts at G = 8, the scheduler moves (B, G) at the same budget;
* ``fixed-3`` and ``scheduled-3``: the same from a small G = 3 (does the scheduler leave a
  G the data exclude?).

Every step generates ``budget`` completions (N = B G fixed), so reward against steps is reward
against completions generated. The advisor estimates every ``every`` steps in every arm (the
fixed arms log it without acting). One row per (arm, seed, step): the step's mean reward (TRL's
logged ``reward``, over the rollouts it trains on), G, and the advisor's estimate where one was
made. Cells (arm, seed) are written atomically and skipped when present (resume).

The claims are reported, not assumed: the paired differences of mean reward (over all steps,
and over the last quarter) between arms, with t intervals over seeds (analysis.py).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

import grpo_theory
from grpo_theory import _validation as V
from grpo_theory.experiments import atomic_write_csv, atomic_write_text, study_cli as C

from . import tiny
from .analysis import figure, report, summarise

ARMS = ("fixed-8", "scheduled-8", "fixed-3", "scheduled-3")


@dataclass(frozen=True)
class StudyConfig:
    """The study's settings (every row carries them as ``config``)."""
    seeds: int = 8
    steps: int = 30
    budget: int = 192           # completions per step, N = B G
    n_prompts: int = 256
    every: int = 2              # advisor estimates every 2 steps
    learning_rate: float = 1e-2
    max_completion_length: int = 5
    max_group_size: int = 32
    min_change: float = 1.25

    def __post_init__(self):
        for f in ("seeds", "steps", "budget", "n_prompts", "every", "max_completion_length",
                  "max_group_size"):
            V.integer(f, getattr(self, f), 1)
        V.real_scalar("learning_rate", self.learning_rate, positive=True)
        V.real_scalar("min_change", self.min_change, minimum=1.0)
        for G in (3, 8):
            if self.budget % G or self.budget // G > self.n_prompts:
                raise ValueError(f"budget {self.budget} must be a multiple of 3 and 8 with at "
                                 f"most n_prompts ({self.n_prompts}) prompts per batch")


def run_cell(cfg: StudyConfig, arm: str, seed: int) -> pd.DataFrame:
    """One training run: the per-step table of ``arm`` at ``seed`` (module docstring)."""
    import transformers
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_theory.torch import GroupSizeAdvisor, GroupSizeScheduler

    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    transformers.logging.set_verbosity_error()
    G = int(arm.split("-")[1])
    ds = Dataset.from_dict({"prompt": [[{"role": "user", "content": t}]
                                       for t in tiny.prompts(cfg.n_prompts)]})
    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(output_dir=tmp, report_to=[], use_cpu=True, bf16=False,
                          max_completion_length=cfg.max_completion_length, num_generations=G,
                          per_device_train_batch_size=cfg.budget, max_steps=cfg.steps,
                          logging_steps=1, save_strategy="no", learning_rate=cfg.learning_rate,
                          seed=int(seed), temperature=1.0, disable_tqdm=True)
        tr = GRPOTrainer(model=tiny.tiny_llama(seed), args=args,
                         reward_funcs=tiny.first_letter_reward, train_dataset=ds,
                         processing_class=tiny.tiny_tokenizer())
        for cb in (PrinterCallback, ProgressCallback):
            tr.remove_callback(cb)
        adv = GroupSizeAdvisor(tr, every=cfg.every)
        tr.add_callback(adv)
        sched = None
        if arm.startswith("scheduled"):
            sched = GroupSizeScheduler(tr, adv, min_change=cfg.min_change,
                                       max_group_size=cfg.max_group_size)
            tr.add_callback(sched)
        with warnings.catch_warnings():  # the unresolved-c1 warnings are in the table
            warnings.filterwarnings("ignore", message=r"step \d+: c1 is not resolved")
            tr.train()
    logs = [h for h in tr.state.log_history if "reward" in h]
    if len(logs) != cfg.steps:
        raise RuntimeError(f"{arm} seed {seed}: {len(logs)} logged steps, expected {cfg.steps}")
    est = {h["step"]: h for h in adv.history}
    rows = []
    for step, h in enumerate(logs, start=1):
        e = est.get(step, {})
        rows.append(dict(arm=arm, seed=int(seed), step=step, completions=step * cfg.budget,
                         G=int(h.get("scheduler/num_generations", G)), reward=float(h["reward"]),
                         c1=e.get("c1", np.nan), g_star_low=e.get("g_star_low", np.nan),
                         g_star_high=e.get("g_star_high", np.nan),
                         recommended_G=e.get("recommended_G", np.nan)))
    df = pd.DataFrame(rows)
    df["changes"] = 0 if sched is None else len(sched.changes)
    df["config"] = json.dumps(asdict(cfg), sort_keys=True)
    df["version"] = grpo_theory.__version__
    return df


def read_cell(path, arm: str, seed: int, steps: int, cfg_text: str) -> pd.DataFrame:
    """The saved cell ``(arm, seed)`` when it is this configuration's complete run: a row per
    step ``1 .. steps`` of this arm and seed with a finite reward; else a ``ValueError`` saying
    why (damaged, truncated, another configuration)."""
    df = C.read_csv(path, ("arm", "seed", "step", "reward", "config", "version"))
    if not (df["config"] == cfg_text).all():
        raise ValueError("another configuration")
    if (len(df) != steps or list(df["step"]) != list(range(1, steps + 1))
            or not (df["arm"] == arm).all() or not (df["seed"] == seed).all()):
        raise ValueError(f"{len(df)} rows, expected steps 1..{steps} of {arm} seed {seed} "
                         "(truncated or damaged)")
    if not np.isfinite(pd.to_numeric(df["reward"], errors="coerce")).all():
        raise ValueError("the column 'reward' is not all finite numbers (damaged)")
    return df


def run_cells(todo, cfg, steps: int, out, run_cell, desc: str, progress: bool = True) -> list:
    """The per-step tables of the (arm, seed) cells ``todo``: each read back from
    ``out/cells/<arm>-seed<seed>.csv`` when it holds ``steps`` rows of this ``cfg``, otherwise
    run (``run_cell(cfg, arm, seed)``), timed and written atomically."""
    from tqdm.auto import tqdm

    frames, cfg_text = [], json.dumps(asdict(cfg), sort_keys=True)
    for arm, seed in tqdm(todo, desc=desc, disable=not progress):
        path = Path(out) / "cells" / f"{arm}-seed{seed}.csv"
        df = C.reuse_or_recompute(path, lambda p: read_cell(p, arm, seed, steps, cfg_text))
        if df is not None:
            frames.append(df)
            continue
        t0 = time.time()
        df = run_cell(cfg, arm, seed)
        df["wall_s"] = round(time.time() - t0, 2)
        atomic_write_csv(path, df)
        frames.append(df)
    return frames


def run_study(cfg: StudyConfig, out, arms=ARMS, progress: bool = True) -> pd.DataFrame:
    """Every (arm, seed) cell (resumed from ``out/cells``), then ``runs.csv``, ``summary.csv``,
    ``REPORT.md`` and ``reward.png`` under ``out``."""
    out = Path(out)
    todo = [(a, s) for s in range(cfg.seeds) for a in arms]
    frames = run_cells(todo, cfg, cfg.steps, out, run_cell, "trl-scheduler runs", progress)
    runs = pd.concat(frames, ignore_index=True)
    atomic_write_csv(out / "runs.csv", runs)
    summary = summarise(runs)
    atomic_write_csv(out / "summary.csv", summary)
    figure(runs, out / "reward.png")
    atomic_write_text(out / "REPORT.md", report(runs, summary, cfg))
    return runs


def main(argv=None) -> int:
    """``python -m grpo_theory.studies.trl_scheduler --out DIR [--seeds 8] [--steps 40]``
    (every failure one line, exit 2; ``GRPO_THEORY_DEBUG=1`` shows the traceback)."""
    return C.run_main("python -m grpo_theory.studies.trl_scheduler", _main, argv)


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grpo_theory.studies.trl_scheduler",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="results-full/trl_scheduler")
    for f in ("seeds", "steps", "budget", "n_prompts", "every"):
        ap.add_argument("--" + f.replace("_", "-"), type=C.positive_int,
                        default=getattr(StudyConfig, f))
    a = ap.parse_args(argv)
    cfg = StudyConfig(seeds=a.seeds, steps=a.steps, budget=a.budget, n_prompts=a.n_prompts,
                      every=a.every)
    run_study(cfg, a.out)
    print((Path(a.out) / "REPORT.md").read_text())
    return 0
