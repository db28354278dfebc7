r"""Training at equal rollouts on the small transformer: does a rollout rule buy accuracy?

From the instruct warm-up policy (answer-only task, :mod:`grpo_theory.lm.warmup`), GRPO
(leave-one-out, Adam) under each rule of :mod:`grpo_theory.lm.training.allocation`, B prompts a
step, until every run has generated ``B G* steps`` responses (the fixed-G* rule's total):

* ``fixed``: G* responses a prompt, G* = the integer minimiser of ``c1 G + c2 + c3/(G - 1)``
  with c1, c2, c3 measured exactly at the starting policy (:func:`grpo_theory.lm.training.grpo.
  predicted_group_size`);
* ``dynamic_sampling`` (DAPO): G* a prompt, all-equal groups dropped and refilled (up to
  ``max_rounds`` rounds of B prompts);
* ``conformal_stopping`` (C-GRPO, qhat = 1) on ``grid``;
* ``knapsack`` (Knapsack RL with the exact pass rates): G* a prompt on average, sizes in
  ``[2, knapsack_cap G*]``;
* ``optimal`` (the MSE-optimal unbiased allocation: exact ``V`` and ``||s*||^2``, the previous
  step's ``E||s||^2``): G* a prompt on average, sizes in ``[2, knapsack_cap G*]``;
* ``fixed-8`` (TRL's default ``num_generations``) and ``scheduled-8``: the same N = B G*
  responses a step as ``fixed``, as N / G prompts of G = 8 (the allowed size nearest 8); the
  scheduled arm re-estimates G* every ``every`` steps with the advisor
  (:func:`grpo_theory.experiments.lm_support.advised_group_size`: sample-based c1, c3 with 95%
  intervals at the policy reached, ``sched_questions`` pool questions x ``sched_samples`` responses)
  and moves G by the rule of TRL's :class:`~grpo_theory.torch.GroupSizeScheduler`
  (:func:`grpo_theory.advisor.propose_group_size`, divisors of N with >= 3 prompts, hysteresis
  ``min_change``). Its estimates' responses are not counted as rollouts (the TRL callback estimates
  from the training rollouts; here they are extra samples).

Each run records the exact held-out accuracy (``mean_x pi(y*|x)`` over the evaluation
questions, no sampling noise) after every step and the responses generated; the comparison reads
each run's accuracy at fractions of the common rollout budget, with bootstrap CIs over seeds
and the difference to fixed G* (analysis.py). Cells (rule, seed) are written atomically and
skipped when present with the same configuration (resume).

    python -m grpo_theory.studies.allocation_lm --out results-full/allocation_lm
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

import grpo_theory
from grpo_theory import _validation as V
from grpo_theory.experiments import atomic_write_csv, atomic_write_text, study_cli as C
from grpo_theory.lm import lm_rule, train_with_rule

from .analysis import figure, report, summarise

RULES = ("fixed", "dynamic_sampling", "conformal_stopping", "knapsack", "optimal", "fixed-8",
         "scheduled-8")
#: train_with_rule's cap on a run's steps (a run may end there before the budget)
MAX_STEPS = 10_000

#: the arms whose step spends N = B G* responses as (B', G) with G from the allowed sizes
FIXED_BUDGET = ("fixed-8", "scheduled-8")


@dataclass(frozen=True)
class StudyConfig:
    """The study's settings (every row carries them as ``config``).

    Attributes:
        seeds: runs per rule.
        batch: prompts a step B.
        steps: the fixed-G* rule's steps; the rollout budget is ``batch * G* * steps``.
        lr: Adam's learning rate.
        n_pool, n_eval: training and held-out questions.
        gstar_samples: responses per question behind G*'s ``E||s||^2``.
        gstar: G* itself, when given (tests); otherwise predicted at the starting policy.
        max_rounds: DAPO's cap on generation rounds.
        grid: C-GRPO's budget grid.
        knapsack_cap: Knapsack's and the optimal allocation's largest group, as a multiple
            of G*.
        fractions: the budgets compared, as fractions of the common rollout budget.
        warmup: ``"quick"`` or ``"full"``, the warm-up configuration of the start policy.
        every: steps between the scheduled arm's estimates (also the chunk of every run).
        sched_questions, sched_samples: the scheduled arm's estimate (pool questions x
            responses each).
        min_change: the scheduler's hysteresis factor.
    """
    seeds: int = 32
    batch: int = 16
    steps: int = 40
    lr: float = 1e-3
    n_pool: int = 2000
    n_eval: int = 200
    gstar_samples: int = 16
    gstar: int | None = None
    max_rounds: int = 4
    grid: tuple = (2, 4, 8, 16)
    knapsack_cap: int = 4
    fractions: tuple = field(default=(0.25, 0.5, 0.75, 1.0))
    warmup: str = "quick"
    every: int = 5
    sched_questions: int = 128
    sched_samples: int = 8
    min_change: float = 1.25

    def __post_init__(self):
        for f in ("seeds", "batch", "steps", "n_pool", "n_eval", "gstar_samples", "max_rounds",
                  "knapsack_cap", "every", "sched_questions", "sched_samples"):
            V.integer(f, getattr(self, f), 1)
        if self.gstar is not None:
            V.integer("gstar", self.gstar, 2)
        V.real_scalar("lr", self.lr, positive=True)
        V.real_scalar("min_change", self.min_change, minimum=1.0)
        g = tuple(self.grid)
        if not g or any(int(x) != x or x < 2 for x in g) or any(b <= a for a, b in zip(g, g[1:])):
            raise ValueError(f"grid must be strictly increasing integers >= 2, got {g!r}")
        if self.warmup not in ("quick", "full"):
            raise ValueError(f"warmup must be 'quick' or 'full', got {self.warmup!r}")
        if not self.fractions or not all(0 < f <= 1 for f in self.fractions):
            raise ValueError(f"fractions must lie in (0, 1], got {self.fractions!r}")


def policy_hash(policy) -> str:
    """SHA-256 (16 hex digits) of the policy's parameters (shapes, dtypes and bytes): the
    cells and G* of one start policy are never reused for another."""
    import jax

    h = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(policy.params):
        a = np.ascontiguousarray(np.asarray(leaf))
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def read_cell(path, rule: str, seed: int, cfg_text: str, model: str, gstar: int,
              budget: int, every: int) -> pd.DataFrame:
    """The saved cell ``(rule, seed)`` when it is this configuration's finished run (steps
    0, 1, .. in order, whole chunks of ``every`` steps, the last reaching ``budget`` rollouts
    or :data:`MAX_STEPS`, this G* and start policy); else a
    ``ValueError`` saying why (damaged, truncated, another configuration or policy)."""
    df = C.read_csv(path, ("rule", "seed", "step", "rollouts", "accuracy", "G_star", "budget",
                           "config", "model_sha256"))
    if not (df["config"] == cfg_text).all():
        raise ValueError("another configuration")
    if not (df["model_sha256"] == model).all() or not (df["G_star"] == gstar).all():
        raise ValueError("another start policy or G*")
    n = len(df) - 1
    if (n < 1 or n % every or list(df["step"]) != list(range(len(df)))
            or not (df["rule"] == rule).all() or not (df["seed"] == seed).all()
            or not (df["budget"] == budget).all()
            or not (df["rollouts"].iloc[-1] >= budget or n >= MAX_STEPS)):
        raise ValueError(f"{len(df)} rows of {rule} seed {seed} that do not reach the budget of "
                         f"{budget} rollouts in order (truncated or damaged)")
    if not np.isfinite(pd.to_numeric(df["accuracy"], errors="coerce")).all():
        raise ValueError("the column 'accuracy' is not all finite numbers (damaged)")
    return df


def _read_gstar(path, cfg_text: str, model: str) -> dict:
    pred = C.read_json(path, ("config", "G_exact"))
    if pred["config"] != cfg_text or pred.get("model_sha256") != model:
        raise ValueError("another configuration or start policy")
    V.integer(f"{path}: the field 'G_exact'", pred["G_exact"], 2)
    return pred


def _warmup(cfg: StudyConfig):
    from grpo_theory.lm import QUICK_WARMUP, WarmupConfig

    return QUICK_WARMUP if cfg.warmup == "quick" else WarmupConfig()


def start_policy(cfg: StudyConfig):
    """The instruct warm-up policy of ``cfg.warmup`` (trained on first use, then cached)."""
    from grpo_theory.lm import study_policies

    return study_policies(_warmup(cfg))["instruct"][0]


def questions(cfg: StudyConfig):
    """``(pool, eval)``: the training pool and the held-out questions (disjoint seeds) of the
    warm-up's task distribution."""
    from grpo_theory.lm import eval_set, train_pool

    task = _warmup(cfg).task
    return train_pool(task, n=cfg.n_pool), eval_set(task).subset(np.arange(cfg.n_eval))


def _near_8(N: int) -> int:
    from grpo_theory.advisor import allowed_group_sizes

    return min(allowed_group_sizes(N), key=lambda g: (abs(np.log(g / 8)), g))


def rule_for(name: str, cfg: StudyConfig, gstar: int) -> tuple:
    """``(rule, B)``: the rule (:func:`~grpo_theory.lm.training.allocation.lm_rule`) of an arm at G*
    and its prompts a step."""
    if name in FIXED_BUDGET:
        G = _near_8(cfg.batch * gstar)
        return lm_rule("fixed", group_size=G), cfg.batch * gstar // G
    return {"fixed": lambda: lm_rule("fixed", group_size=gstar),
            "dynamic_sampling": lambda: lm_rule("dynamic_sampling", group_size=gstar,
                                                max_rounds=cfg.max_rounds),
            "conformal_stopping": lambda: lm_rule("conformal_stopping", grid=tuple(cfg.grid)),
            "knapsack": lambda: lm_rule("knapsack", rollouts=gstar,
                                        max_group=cfg.knapsack_cap * gstar),
            "optimal": lambda: lm_rule("optimal", rollouts=gstar,
                                       max_group=cfg.knapsack_cap * gstar)}[name](), cfg.batch


def scheduler(cfg: StudyConfig, pool, N: int, seed: int, log: list):
    """The scheduled arm's ``schedule`` callback (module doc); appends each estimate to ``log``."""
    from grpo_theory.advisor import allowed_group_sizes, propose_group_size
    from grpo_theory.experiments.lm_support import advised_group_size

    allowed = allowed_group_sizes(N)
    qs = pool.subset(np.arange(min(cfg.sched_questions, len(pool.text))))

    def schedule(step, pol, rule, B):
        est = advised_group_size(pol, qs, cfg.sched_samples, key=seed * 100_003 + step,
                                 chunk=256)
        rec = dict(recommended_G=float(est["G_exact"]) if est["c1_low"] > 0 else np.nan,
                   g_star_low=est["G_low"], g_star_high=est["G_high"])
        G = propose_group_size(rule.group_size, rec, allowed, cfg.min_change)
        log.append(dict(step=step, G=G, **rec))
        return lm_rule("fixed", group_size=G), N // G

    return schedule


def _changes(rule, log) -> int:
    """How many of the scheduled arm's estimates changed G (0 without a schedule)."""
    if not log:
        return 0
    gs = [rule.group_size] + [e["G"] for e in log]
    return int(sum(a != b for a, b in zip(gs, gs[1:])))


def run_cell(policy, pool, ev, cfg: StudyConfig, rule: str, seed: int, gstar: int,
             chunk_steps: int = 5) -> pd.DataFrame:
    """One run: a row per step (step 0 first) with the accuracy and the rollouts so far."""
    budget = cfg.batch * gstar * cfg.steps
    lm, B = rule_for(rule, cfg, gstar)
    log = []
    sched = (scheduler(cfg, pool, cfg.batch * gstar, seed, log) if rule == "scheduled-8"
             else None)
    r = train_with_rule(policy, pool, ev, lm, B, budget, cfg.lr, seed=seed,
                        chunk_steps=chunk_steps, schedule=sched)
    n = r["accuracy"].size
    nan = [np.nan]
    return pd.DataFrame(dict(
        rule=rule, seed=seed, step=np.arange(n), rollouts=r["rollouts"],
        accuracy=r["accuracy"], kept=np.concatenate([nan, r["kept"]]),
        reward=np.concatenate([nan, r["reward"]]), G=np.concatenate([nan, r["group"]]),
        B=np.concatenate([nan, r["batch"]]), changes=_changes(lm, log),
        G_star=gstar, budget=budget, config=json.dumps(asdict(cfg), sort_keys=True),
        version=grpo_theory.__version__))


def run_study(cfg: StudyConfig, out, rules=RULES, policy=None, progress: bool = True
              ) -> pd.DataFrame:
    """Every (rule, seed) cell (resumed from ``out/cells``), then ``runs.csv``, ``summary.csv``,
    ``gstar.json``, ``REPORT.md`` and ``accuracy.png`` under ``out``.

    Args:
        cfg: the settings.
        out: the output folder.
        rules: the rules run (names of :data:`RULES`; ``fixed`` is the reference).
        policy: the start policy (default: :func:`start_policy`).
        progress: a progress bar over the cells.

    Every run goes in chunks of ``cfg.every`` steps (the loop stops at the first chunk that
    reaches the budget).
    """
    from tqdm.auto import tqdm

    from grpo_theory._precision import float64
    from grpo_theory.lm import predicted_group_size

    bad = [r for r in rules if r not in RULES]
    if bad or "fixed" not in rules:
        raise ValueError(f"rules must be names of {RULES} including 'fixed', got {rules!r}")
    out = Path(out)
    t0 = time.time()
    policy = start_policy(cfg) if policy is None else policy
    pool, ev = questions(cfg)
    gpath = out / "gstar.json"
    cfg_text = json.dumps(asdict(cfg), sort_keys=True)
    model = policy_hash(policy)
    pred = C.reuse_or_recompute(gpath, lambda p: _read_gstar(p, cfg_text, model), "G*")
    if pred is None:
        if cfg.gstar is None:
            sub = pool.subset(np.arange(min(500, cfg.n_pool)))
            pred = float64(predicted_group_size)(policy, sub, cfg.gstar_samples, seed=0)
        else:
            pred = dict(G_exact=int(cfg.gstar))
        pred = dict(pred, config=cfg_text, model_sha256=model,
                    seconds=round(time.time() - t0, 2))
        atomic_write_text(gpath, json.dumps(pred, indent=1, sort_keys=True))
    gstar = int(pred["G_exact"])
    budget = cfg.batch * gstar * cfg.steps
    todo = [(r, s) for s in range(cfg.seeds) for r in rules]
    frames = []
    for rule, seed in tqdm(todo, desc="allocation-lm runs", disable=not progress):
        path = out / "cells" / f"{rule}-seed{seed}.csv"
        df = C.reuse_or_recompute(
            path, lambda p: read_cell(p, rule, seed, cfg_text, model, gstar, budget, cfg.every))
        if df is not None:
            frames.append(df)
            continue
        t = time.time()
        df = run_cell(policy, pool, ev, cfg, rule, seed, gstar, cfg.every)
        df["model_sha256"] = model
        df["wall_s"] = round(time.time() - t, 2)
        atomic_write_csv(path, df)
        frames.append(df)
    runs = pd.concat(frames, ignore_index=True)
    atomic_write_csv(out / "runs.csv", runs)
    summary = summarise(runs, cfg.fractions)
    atomic_write_csv(out / "summary.csv", summary)
    figure(runs, out / "accuracy.png")
    atomic_write_text(out / "REPORT.md", report(runs, summary, pred))
    return runs


def main(argv=None) -> int:
    """``python -m grpo_theory.studies.allocation_lm --out DIR [--seeds 32] [--steps 40] ...``
    (every failure one line, exit 2; ``GRPO_THEORY_DEBUG=1`` shows the traceback)."""
    return C.run_main("python -m grpo_theory.studies.allocation_lm", _main, argv)


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grpo_theory.studies.allocation_lm",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="results-full/allocation_lm")
    for f in ("seeds", "batch", "steps", "n_pool", "n_eval", "max_rounds", "every"):
        ap.add_argument("--" + f.replace("_", "-"), type=C.positive_int,
                        default=getattr(StudyConfig, f))
    ap.add_argument("--lr", type=C.positive_float, default=StudyConfig.lr)
    ap.add_argument("--warmup", choices=("quick", "full"), default=StudyConfig.warmup)
    a = ap.parse_args(argv)
    cfg = StudyConfig(seeds=a.seeds, batch=a.batch, steps=a.steps, n_pool=a.n_pool,
                      n_eval=a.n_eval, max_rounds=a.max_rounds, lr=a.lr, warmup=a.warmup,
                      every=a.every)
    run_study(cfg, a.out)
    print((Path(a.out) / "REPORT.md").read_text())
    return 0
