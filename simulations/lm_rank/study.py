"""Rank of the small transformer's group gradients (the credit-assignment companion's claim).

Claim (companion paper, Nemotron-4B, G = 2, 4, 8): the G x D matrix of per-response gradient
contributions ``A_g s_g`` has effective rank about 2 whatever G. Here, for the small
transformer's base, instruct and icl policies (:mod:`grpo_theory.lm.warmup`) in the answer-only
and trace formats: a cell is one (policy, format); every evaluation question gets ``n_reps``
groups of ``G_max`` sampled responses, the G-groups are their nested prefixes, advantages are
std-normalised (``grpo_std``, the credit-assignment driver's convention), and every rank measure
comes from the G x G score Gram (:mod:`grpo_theory.experiments.lm_support.rank`; all ~D parameters).
Per G: entropy effective rank and #components for 90% of the energy (mean and 95% CI over groups
with mixed rewards), next to the policy's sequence entropy ``-E log pi(y|x)`` (Monte Carlo); the
share of zero-advantage groups against ``mean_x [V^G + (1 - V)^G]`` (answer-only: exact ``V =
pi(y*|x)``; trace: unbiased U-statistic from ``n_ref`` independent reference responses).

Along a GRPO run (kind ``run``): Algorithm 1 (Adam, ``grpo_std`` advantages) from the instruct
policy in the answer-only format (the format :func:`grpo_theory.lm.training.grpo.train_grpo`
trains); at step 0 and every checkpoint the same measurements, one row per (step, G), with the exact
held-out accuracy ``J`` and the pass-rate spread ``mean_x V(1 - V)``: as the policy sharpens, its
entropy falls, ``V(x)`` moves to 0 or 1 and the share of zero-advantage groups grows.

PASS when in every cell and G (i) the binary identity ``(1/G) sum A_g s_g = c(k,G)(s+ - s-)``
holds on the model's real scores (relative squared residual <= 1e-8), (ii) the class-aggregate
matrix has numerical rank <= 2 and ``rank diag(A) S`` never exceeds the number of distinct
responses, (iii) the observed zero-advantage share lies within 4 standard errors of its
prediction (answer-only: the exact Bernoulli standard error under the claim; trace: the
standard error over questions of observed minus predicted share, which carries the noise of the
reference responses that estimate the prediction as well as the groups'); the same three along
the GRPO run. Where "rank about 2" (entropy rank <= 2.5) holds is reported, not gated: it is the
measurement.

With ``--model PATH`` (``Settings.model``: a Hugging Face checkpoint directory, stored as an
absolute path) the one policy is the checkpoint (``policy = "model"``) in the answer-only format
only: prompts and canonical exact-token answers ``y*(x)`` from
:func:`grpo_theory.lm.training.grpo.task_tokens` (its chat template when it has one), responses of
``len y*`` tokens, reward 1 iff the response is ``y*`` (so ``V = pi(y*|x)`` exactly, by teacher
forcing), the same Gram measurements over all the checkpoint's parameters and the same three
checks. The trace format needs the package's character tokenizer and is not run for a model.
The GRPO run (``Settings.run``) starts from the checkpoint.

    grpo-theory lm-rank [--full] [--model PATH]
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from grpo_theory.companions import RANK_FIELDS
from grpo_theory.experiments import Cell, Experiment, key_seed
from grpo_theory._precision import float64
from grpo_theory.lm.budget import (format_bytes, out_of_memory_as_value_error, resolve_chunk,
                                   score_memory)
from grpo_theory.lm.training import task_tokens
from grpo_theory.lm import (QUICK_WARMUP, RESPONSE_LEN, WarmupConfig, encode_prompts, eval_set,
                            model_policy, reward, study_policies, target_responses, train_grpo,
                            train_pool)
from grpo_theory.experiments.model_settings import ModelSettings
from grpo_theory.experiments.progress import phase_lines
from grpo_theory.lm.checkpoints import model_path
from grpo_theory.lm.budget.memory import chunk_bytes
from grpo_theory.experiments.lm_support import group_rank_table, zero_share_unbiased
from grpo_theory.experiments.lm_support.rank import group_score_grams, zero_share_difference

from . import analysis as _report
from .analysis import FORMATS, IDENTITY_TOL, RANK2, Z_TOL, plot


__all__ = ["NAME", "CLAIM", "FORMATS", "ESTIMATOR", "Z_TOL", "IDENTITY_TOL", "RANK2",
           "RUN_POLICY", "Run", "Settings", "SETTINGS", "SCHEMA", "cells", "cell", "report",
           "plot", "EXPERIMENT"]

NAME = "lm-rank"
CLAIM = ("small transformer: effective rank of the G x D per-response gradient matrix vs G "
         "(the 'rank about 2' claim), with the zero-advantage share vs V^G + (1-V)^G")
ESTIMATOR = "grpo_std"
CELL_ORDER = (("base", "answer"), ("instruct", "answer"), ("icl", "answer"),
              ("base", "trace"), ("instruct", "trace"), ("icl", "trace"))
#: the GRPO run starts from this policy (answer-only prompts without in-context shots)
RUN_POLICY = "instruct"


@dataclass(frozen=True)
class Run:
    """GRPO along which the ranks are measured: ``steps`` Adam steps at rate ``lr`` with
    ``budget = B * group_size`` responses per step from a training pool of ``n_pool`` questions;
    measurements at step 0 and at ``checkpoints`` (and ``steps``)."""

    group_size: int
    budget: int
    steps: int
    checkpoints: tuple
    lr: float
    n_pool: int

    def __post_init__(self):
        if self.group_size < 2 or self.budget % self.group_size:
            raise ValueError(f"group_size must be >= 2 and divide budget={self.budget}, "
                             f"got {self.group_size!r}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps!r}")
        if not all(0 < c <= self.steps for c in self.checkpoints):
            raise ValueError(f"checkpoints must lie in (0, steps={self.steps}], "
                             f"got {self.checkpoints!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if self.n_pool < 1:
            raise ValueError(f"n_pool must be >= 1, got {self.n_pool!r}")


@dataclass(frozen=True)
class Settings(ModelSettings):
    """One cell per (policy, format), or one per checkpoint of a GRPO run or of ``model``.

    Attributes:
        warmup: the warm-up policies' configuration (:class:`~grpo_theory.lm.warmup.WarmupConfig`).
        n_questions: evaluation questions per cell (at most 500).
        group_sizes: the group sizes G measured (nested prefixes of groups of
            ``max(group_sizes)``).
        n_reps: groups of ``max(group_sizes)`` responses per question.
        n_ref: reference responses per question for the zero-advantage share (trace format:
            ``V^G + (1-V)^G`` estimated without bias); at least ``max(group_sizes)``.
        chunk: per-sample scores held at a time.
        pairs: the (policy, format) cells, among :data:`CELL_ORDER`.
        run: the GRPO run measured at its checkpoints (:class:`Run`; None: no run).

    The model options are :class:`~grpo_theory.experiments.model_settings.ModelSettings`'; with
    ``model`` the checkpoint runs in the answer-only format (``pairs`` unused) and
    ``model_chunk`` holds at least one group of ``max(group_sizes)`` scores.
    """

    warmup: WarmupConfig
    n_questions: int
    group_sizes: tuple
    n_reps: int
    n_ref: int
    chunk: int
    pairs: tuple = CELL_ORDER
    run: Run | None = None

    def __post_init__(self):
        super().__post_init__()
        if not 1 <= self.n_questions <= 500:
            raise ValueError(f"n_questions must lie in [1, 500], got {self.n_questions!r}")
        if not self.group_sizes or min(self.group_sizes) < 2:
            raise ValueError(f"group_sizes must be >= 2, got {self.group_sizes!r}")
        if self.n_reps < 1:
            raise ValueError(f"n_reps must be >= 1, got {self.n_reps!r}")
        if self.n_ref < max(self.group_sizes):
            raise ValueError(f"n_ref must be >= max(group_sizes), got {self.n_ref!r}")
        bad = [p for p in self.pairs if tuple(p) not in CELL_ORDER]
        if bad or not self.pairs:
            raise ValueError(f"pairs must be (policy, format) pairs among {CELL_ORDER}, "
                             f"got {self.pairs!r}")
        if self.run is not None and not isinstance(self.run, Run):
            raise ValueError(f"run must be a Run or None, got {self.run!r}")


SETTINGS = {
    # quick: lm-mse's tiny warm-up (shared checkpoint cache), G up to 16; a 120-step GRPO run
    "quick": Settings(warmup=QUICK_WARMUP, n_questions=32, group_sizes=(2, 4, 8, 16),
                      n_reps=4, n_ref=64, chunk=256,
                      run=Run(group_size=8, budget=64, steps=120, checkpoints=(30, 60, 120),
                              lr=5e-3, n_pool=2000)),
    # full: GRPO at lm-groupsize's full rate (1e-3; 3e-3 collapsed the accuracy in a pilot)
    "full": Settings(warmup=WarmupConfig(), n_questions=100,
                     group_sizes=(2, 4, 8, 16, 32, 64), n_reps=2, n_ref=128, chunk=256,
                     run=Run(group_size=8, budget=256, steps=200, checkpoints=(25, 50, 100, 200),
                             lr=1e-3, n_pool=20000)),
}

_RANK = {f"{f}{se}": "float?" for f in RANK_FIELDS for se in ("", "_se")}
SCHEMA = {
    "table": dict(policy="str", fmt="str", G="int", n_groups="int", n_mixed="int",
                  zero_obs="float", zero_pred="float", zero_se="float", zero_z="float",
                  class_n="int?", excess="int?", distinct="float?", identity="float?",
                  entropy="float", entropy_se="float", J="float", exact_V="bool", dim="int",
                  **_RANK),
}
#: the GRPO run: the table's columns at every checkpoint ``step`` (train_reward: mean training
#: reward since the previous checkpoint, missing at step 0; V_var = mean_x V(1 - V))
SCHEMA["run"] = dict(SCHEMA["table"], step="int", V_var="float", train_G="int", train_N="int",
                     train_reward="float?")


def cells(s: Settings) -> list[Cell]:
    """One cell per (policy, format) of ``s.pairs``, in ``CELL_ORDER``; then the GRPO run.
    With ``s.model``: the checkpoint's answer-only cell ``model_answer``, then the GRPO run
    from it (the checkpoint is checked here, before any cell runs)."""
    meas = dict(warmup=s.warmup, n_questions=s.n_questions, group_sizes=tuple(s.group_sizes),
                n_reps=s.n_reps, n_ref=s.n_ref, chunk=s.chunk)
    if s.model is not None:
        meas = dict(meas, model=model_path(s.model), policy="model", fmt="answer",
                    model_chunk=s.model_chunk, model_memory_budget=s.model_memory_budget,
                    model_dtype=s.model_dtype, model_pad_id=s.model_pad_id)
        return [Cell("model_answer", meas)] + (
            [] if s.run is None else [Cell("run_model_answer", dict(meas, run=s.run),
                                           kind="run")])
    want = {tuple(p) for p in s.pairs}
    out = [Cell(f"{p}_{f}", dict(meas, policy=p, fmt=f)) for p, f in CELL_ORDER if (p, f) in want]
    if s.run is not None:
        out.append(Cell(f"run_{RUN_POLICY}_answer",
                        dict(meas, policy=RUN_POLICY, fmt="answer", run=s.run), kind="run"))
    return out


def _model_chunk(pol, config: dict, gmax: int, n_items: int) -> int:
    """A checkpoint's chunk: ``model_chunk``, else the largest that fits in
    ``model_memory_budget`` (:func:`~grpo_theory.lm.budget.options.resolve_chunk`); the
    group Gram matrices hold whole groups, so a ``ValueError`` naming ``--memory-budget`` when
    the budget does not fit one group of ``gmax`` scores."""
    if config.get("model_chunk") is not None:
        return max(int(config["model_chunk"]), gmax)
    budget = config.get("model_memory_budget")
    chunk = resolve_chunk(pol, None, n_items, budget)
    if chunk < gmax:
        d, b = score_memory(pol)
        raise ValueError(f"--memory-budget: one group of {gmax} per-sample scores of a "
                         f"{d:,}-parameter model needs about "
                         f"{format_bytes(chunk_bytes(d, gmax, dtype_bytes=b))}, more than the "
                         f"budget allows; raise --memory-budget or use --dtype bfloat16")
    return chunk


def _measure(pol, icl: bool, q, config: dict, key) -> tuple[list[dict], np.ndarray]:
    """Rank measures, zero-advantage share and entropy for every G at the policy ``pol`` on the
    questions ``q`` (format ``config["fmt"]``); also the per-question pass rates ``V``.
    A Hugging Face checkpoint (``config["model"]``): prompts and canonical answers from
    :func:`~grpo_theory.lm.training.grpo.task_tokens`, responses of the canonical answers'
    length."""
    fmt = config["fmt"]
    b, gmax, reps = len(q), max(config["group_sizes"]), config["n_reps"]
    if "model" in config:
        x, canon = task_tokens(pol, q)
        rlen = canon.shape[1]
    else:
        x = encode_prompts(q, fmt, icl)
        canon = target_responses(q, fmt) if fmt == "answer" else None
        rlen = RESPONSE_LEN[fmt]
    k_ref, k_smp = jax.random.split(key)
    # a checkpoint's cell samples for minutes: its blocks as progress lines (the package's
    # small model samples in well under a second, silently)
    lines = phase_lines(f"{NAME} model") if "model" in config else None

    def blocks(phase):
        return None if lines is None else (lambda done, total: lines(phase, done, total))

    if fmt == "answer":  # exact V = pi(y*|x)
        V = np.exp(np.asarray(pol.log_probs(x, canon), np.float64))
        n_ref = None
    else:  # independent reference sample: unbiased V^G + (1-V)^G
        n_ref = config["n_ref"]
        yr = pol.sample_blocked(k_ref, np.repeat(x, n_ref, 0), rlen,
                                progress=blocks("reference sampling"))
        kref = np.asarray(reward(fmt, yr, np.repeat(q.answer, n_ref)), np.float64)
        kref = kref.reshape(b, n_ref).sum(1)
        V = kref / n_ref
    xs = np.tile(x, (reps, 1))  # group (rep, question) -> row rep * b + question
    y = pol.sample_blocked(k_smp, np.repeat(xs, gmax, 0), rlen, progress=blocks("sampling"))
    z = np.asarray(reward(fmt, y, np.repeat(np.tile(q.answer, reps), gmax),
                          None if canon is None else np.repeat(np.tile(canon, (reps, 1)),
                                                               gmax, 0)),
                   np.float64).reshape(b * reps, gmax)
    lp = np.asarray(pol.log_probs(np.repeat(xs, gmax, 0), y), np.float64)
    chunk = config["chunk"] if "model" not in config else _model_chunk(pol, config, gmax,
                                                                       b * reps * gmax)
    with out_of_memory_as_value_error(f"the per-sample scores (groups of {gmax}, chunk {chunk})"):
        K = group_score_grams(pol, xs, y.reshape(b * reps, gmax, -1), chunk=chunk)
    rows = group_rank_table(K, z, y.reshape(b * reps, gmax, -1), config["group_sizes"],
                            ESTIMATOR)
    out = []
    for r in rows:
        G = r["G"]
        qx = (V**G + (1 - V) ** G) if n_ref is None else zero_share_unbiased(kref, n_ref, G)
        zero = np.all(z[:, :G] == z[:, :1], axis=1).astype(float)
        diff = zero_share_difference(zero.reshape(reps, b), qx, exact=n_ref is None)
        out.append(dict(r, policy=config["policy"], fmt=fmt, zero_pred=float(qx.mean()),
                        zero_se=diff.se, zero_z=diff.zscore(0.0),
                        entropy=float(-lp.mean()),
                        entropy_se=float(lp.std(ddof=1) / np.sqrt(lp.size)),
                        J=float(V.mean()), exact_V=n_ref is None, dim=pol.dim))
    return out, V


@float64
def cell(config: dict, key) -> list[dict]:
    """One (policy, format): rank measures, zero-advantage share and entropy for every G; or
    (``config["run"]``) the same at step 0 and every checkpoint of a GRPO run; the policy is
    a warm-up policy or (``config["model"]``) a Hugging Face checkpoint."""
    wcfg = config["warmup"]
    if "model" in config:
        pol, icl = model_policy(config["model"], config.get("model_dtype", "float32"),
                                config.get("model_pad_id")), False
    else:
        pol, icl = study_policies(wcfg)[config["policy"]]
    q = eval_set(wcfg.task).subset(np.arange(config["n_questions"]))
    if "run" not in config:
        return _measure(pol, icl, q, config, key)[0]
    run, out = config["run"], []
    k_train, k_meas = jax.random.split(key)

    def measure(step, policy):  # the same measurement key at every step (paired comparison)
        rows, V = _measure(policy, icl, q, config, k_meas)
        out.extend(dict(r, step=int(step), V_var=float(np.mean(V * (1 - V)))) for r in rows)

    trained = train_grpo(pol, train_pool(wcfg.task, n=run.n_pool), q, run.budget,
                         run.group_size, run.steps, run.checkpoints, run.lr,
                         seed=key_seed(k_train), estimator=ESTIMATOR, on_checkpoint=measure)
    reward_at = {r["step"]: r["train_reward"] for r in trained}
    return [dict(r, train_G=run.group_size, train_N=run.budget,
                 train_reward=reward_at[r["step"]]) for r in out]


def report(tables, s):
    """The section (:func:`._lm_rank_report.report`), naming this driver's ESTIMATOR."""
    return _report.report(tables, s, estimator=ESTIMATOR)


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=62)
