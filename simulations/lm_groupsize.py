"""Figure 5 / Table 2 analogue: the best group size under a fixed budget N = B G in GRPO training.

From the instruct policy (answer-only format, :mod:`grpo_theory.lm.grpo`), Algorithm 1 with Adam
at budgets N and group sizes G, several seeds; held-out accuracy (exact expected reward on the
evaluation questions) at several checkpoints; the best G per checkpoint and N with a bootstrap
CI over seeds; next to it G* = 1 + sqrt(c3/c1) predicted from c1, c3 measured at the starting
policy (Theorem 7). A ``train`` cell is one training run (N, G, replicate): its accuracy at every
checkpoint; a ``prediction`` cell is c1, c2, c3 and G* at the starting policy for one set of
questions. The report states where the prediction holds (G* inside the bootstrap CI of the best
G) and where it does not; PASS means every cell ran, the constants are valid (c1 > 0) and the
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
(:func:`grpo_theory.lm.grpo.task_tokens`); the reward inside the jitted loop is the exact-token
match of that canonical tokenization and the held-out accuracy is still the exact
``mean_x pi(y*|x)`` by teacher forcing. G* comes from the advisor's sample-based c1, c3 with
95% intervals (:func:`grpo_theory.advisor.lm_task.advised_group_size`, kind ``prediction_model``).

    grpo-theory lm-groupsize [--full] [--model PATH]
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from grpo_theory.core.stats import z_value
from grpo_theory.plotting import plt, save_figure
from grpo_theory.experiments.runner import Cell, Experiment, Section, check, key_seed, float64
from grpo_theory.experiments.stats import bootstrap_argmin
from grpo_theory.advisor.lm_task import advised_group_size
from grpo_theory.lm.grpo import predicted_group_size, train_grpo
from grpo_theory.lm.task import TaskConfig, eval_set, train_pool
from grpo_theory.experiments.progress import phase_lines
from grpo_theory.lm.local_model import (absolute_path, check_model_options, model_path,
                                        model_policy)
from grpo_theory.lm.warmup import QUICK_WARMUP, WarmupConfig

from .lm_mse import policies

__all__ = ["NAME", "CLAIM", "N_BOOT", "PRACTICAL", "Sweep", "Settings", "SETTINGS", "SCHEMA",
           "cells", "cell", "bootstrap_best_g", "summary", "prediction", "report", "plot",
           "EXPERIMENT"]

NAME = "lm-groupsize"
CLAIM = ("GRPO training of the small transformer at fixed budget N = BG: best G per checkpoint "
         "with bootstrap CIs vs G* = 1 + sqrt(c3/c1) (Figure 5 / Table 2 analogue)")
N_BOOT = 2000

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
class Settings:
    """The main sweep (budgets x group sizes x ``seeds``, ``steps`` Adam steps at rate ``lr``,
    accuracy on ``n_eval`` questions at ``checkpoints``; training prompts from a pool of
    ``n_pool``; G* from ``gstar_samples`` responses per question) and the two extra sweeps.
    ``model``: a Hugging Face checkpoint directory to start from (absolute path; None: the
    instruct warm-up policy), ``model_chunk`` its per-sample scores held at once (None: the
    largest that fits in ``model_memory_budget`` bytes, None: half the available memory),
    ``model_dtype`` and ``model_pad_id`` as in :class:`.lm_mse.Settings`."""

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
    model: str | None = None
    model_chunk: int | None = None
    model_memory_budget: int | None = None
    model_dtype: str = "float32"
    model_pad_id: int | None = None

    def __post_init__(self):
        check_model_options(self)
        if self.model is not None:
            object.__setattr__(self, "model", absolute_path(self.model))


SETTINGS = {
    "quick": Settings(warmup=QUICK_WARMUP, budgets=(128,),
                      group_sizes=(4, 16, 64), seeds=2, steps=10, checkpoints=(5, 10), lr=1e-3,
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
    start = (policies(wcfg)["instruct"][0] if model is None else
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


def bootstrap_best_g(acc: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """The best G's distribution when seeds are resampled within each G
    (:func:`grpo_theory.experiments.stats.bootstrap_argmin` of the negated accuracies: ties to
    the smallest G, percentile interval on the ordered G).

    Args:
        acc: accuracies, rows G, columns seeds.
        n_boot: bootstrap resamples.
        seed: the resampling's NumPy seed.

    Returns:
        ``best`` (argmax of the mean), ``lo``/``hi`` (the 95% percentile interval of the
        resampled argmax), ``p_best`` (share of the most frequent argmax) and ``support``.
    """
    b = bootstrap_argmin({int(g): -acc.loc[g].to_numpy(np.float64) for g in acc.index},
                         n_boot=n_boot, seed=seed)
    return dict(best=int(b.best), lo=int(b.lo), hi=int(b.hi), p_best=b.p_best,
                support={int(g): f for g, f in b.support.items()})


def summary(train: pd.DataFrame, sweep: str = "main") -> pd.DataFrame:
    """Best G per (hard fraction, N, checkpoint) of one sweep of the ``train`` table, with a
    bootstrap CI over seeds (step 0, the starting policy, is left out)."""
    tr = train[(train.step > 0) & (train.sweep == sweep)]
    out = []
    for (h, n, step), d in tr.groupby(["hard_fraction", "N", "step"]):
        acc = d.pivot_table(index="G", columns="run_seed", values="accuracy")
        acc = acc.dropna(axis=1)
        if acc.shape[1] == 0:
            continue
        bs = bootstrap_best_g(acc, seed=int(n) + int(step))
        out.append(dict(hard_fraction=float(h), N=int(n), step=int(step), seeds=int(acc.shape[1]),
                        **{k: v for k, v in bs.items() if k != "support"},
                        support=bs["support"],
                        mean_by_G={int(g): float(a) for g, a in acc.mean(axis=1).round(4).items()}))
    return pd.DataFrame(out)


def prediction(pred: pd.DataFrame, sweep: str = "main", hard=None) -> pd.Series:
    """The G* prediction row of ``sweep`` (and of hard fraction ``hard`` when given)."""
    p = pred[pred.sweep == sweep]
    if hard is not None:
        p = p[np.isclose(p.hard_fraction, hard)]
    return p.iloc[0]


def _start_lines(pred, s: Settings) -> str:
    """The first paragraph: the starting policy and its constants (with intervals for a
    model, whose constants are the advisor's estimates)."""
    if s.model is None:
        return (f"Start: instruct policy, exact held-out accuracy {pred.J:.3f} (hard fraction "
                f"{pred.hard_fraction:g}). Measured there: c1 = {pred.c1:.4g}, c2 = "
                f"{pred.c2:.4g}, c3 = {pred.c3:.4g}; predicted G* = 1 + sqrt(c3/c1) = "
                f"{pred.G_continuous:.1f} (paper's form sqrt(c3/c1) = {pred.G_paper:.1f}; "
                f"integer argmin {int(pred.G_exact)}).")
    return (f"Start: the checkpoint `{s.model}`, exact held-out accuracy {pred.J:.3f} "
            f"(hard fraction {pred.hard_fraction:g}; text prompts in its tokenization, reward "
            "= exact-token match of the answer's canonical tokenization followed by EOS). "
            f"Advisor's estimates there ({int(pred.n_samples)} responses per question, 95% "
            f"intervals): c1 = {pred.c1:.4g} [{pred.c1_low:.4g}, {pred.c1_high:.4g}], c2 = "
            f"{pred.c2:.4g} [{pred.c2_low:.4g}, {pred.c2_high:.4g}], c3 = {pred.c3:.4g} "
            f"[{pred.c3_low:.4g}, {pred.c3_high:.4g}]; predicted G* = 1 + sqrt(c3/c1) = "
            f"{pred.G_continuous:.1f} [{pred.G_low:.1f}, {pred.G_high:.1f}] (integer argmin "
            f"{int(pred.G_exact)}).")


def report(tables, s: Settings) -> Section:
    tr_all = tables["train"]
    pr = tables["prediction" if s.model is None else "prediction_model"]
    pred = prediction(pr)
    sm = summary(tr_all)
    tr = tr_all[tr_all.sweep == "main"]
    gs = sorted(int(g) for g in tr.G.unique())
    lines = [f"Setting `{tr_all.setting.iloc[0]}`. " + _start_lines(pred, s),
             "", "| N | step | seeds | mean accuracy by G (" + ", ".join(map(str, gs)) + ") | "
             "best G | 95% bootstrap CI | P(best) | G* (integer) inside CI |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sm.itertuples():
        accs = " ".join(f"{r.mean_by_G.get(g, float('nan')):.3f}" for g in gs)
        inside = r.lo <= pred.G_exact <= r.hi
        lines.append(f"| {r.N} | {r.step} | {r.seeds} | {accs} | {r.best} | [{r.lo}, {r.hi}] | "
                     f"{r.p_best:.2f} | {'yes' if inside else 'no'} |")
    held = [r.lo <= pred.G_exact <= r.hi for r in sm.itertuples()]
    lines += ["", f"The predicted integer G* = {int(pred.G_exact)} lies inside the bootstrap CI "
              f"of the best G in {sum(held)} of {len(held)} (N, checkpoint) rows."]
    sps = tr.groupby("N").steps_per_s.mean()
    lines += ["", "Training speed (steps/s, mean over runs): " +
              ", ".join(f"N={int(n)}: {v:.2f}" for n, v in sps.items()) + ".", "",
              "Paper: Figure 5 (GSM8K, N = 1024) best G* = 32 at every checkpoint but the "
              "first; Table 2 (MATH) best G = 64, 64, 128 for N = 1024, 2048, 4096." +
              (" Rows with one seed have a one-point bootstrap CI (no seed variability "
               "measured)." if (sm.seeds == 1).any() else "") +
              f" The grid starts at G = {gs[0]}: a predicted G* at or below it can only be "
              "checked from one side."]
    lines += _knob_lines(tr_all, pr, sm)
    lines += _practical_lines(tr_all, sm)
    lines += ["", "![](lm_groupsize.png)"]
    ckpts = sorted({int(c) for c in s.checkpoints if 0 < c <= s.steps} | {s.steps})
    want = {(int(n), c) for n in s.budgets if min(s.group_sizes) <= n for c in ckpts}
    got = set(zip(sm.N, sm.step)) if len(sm) else set()
    checks = [
        check("c1 > 0 at the starting policy, so G* = 1 + sqrt(c3/c1) is finite",
              pred.c1 > 0 and np.isfinite(pred.G_continuous), pred.c1, pred.c3,
              detail=f"c1 = {pred.c1:.4g}, c3 = {pred.c3:.4g}, G* = {pred.G_continuous:.1f}"),
        check("every held-out accuracy is a probability (in [0, 1])",
              tr_all.accuracy.between(0, 1).all(), tr_all.accuracy.to_numpy(),
              detail=f"{len(tr_all)} accuracies in [{tr_all.accuracy.min():.3f}, "
              f"{tr_all.accuracy.max():.3f}]"),
        check("a best G with its bootstrap CI for every (N, checkpoint) of the main sweep",
              len(sm) > 0 and got == want, len(sm),
              detail=f"{len(got & want)} of {len(want)}"),
    ]
    title = ("Small-LM optimal group size" if s.model is None else
             f"Optimal group size of {Path(s.model).name}")
    return Section(title + " (Figure 5 / Table 2 analogue)", "\n".join(lines), checks)


def _knob_lines(train: pd.DataFrame, pred: pd.DataFrame, main: pd.DataFrame) -> list:
    """The difficulty-knob table: pass-rate spread, predicted G* and best G per hard fraction."""
    kn = summary(train, "knob")
    if kn.empty:
        return []
    n = int(kn.N.iloc[0])
    last = int(kn.step.max())
    rows = pd.concat([main[(main.N == n) & (main.step == last)].assign(sweep="main"),
                      kn[kn.step == last].assign(sweep="knob")]).sort_values("hard_fraction")
    lines = ["", f"**Difficulty knob** (`TaskConfig.hard_fraction`, share of two-digit "
             f"questions): same starting policy, questions drawn at each hard fraction; N = {n}, "
             f"step {last}. V = per-question pass rate of the starting policy (exact).", "",
             "| hard fraction | seeds | J at start | share V < 5% | median V | predicted G* "
             "(continuous / integer) | mean accuracy by G | best G | 95% bootstrap CI | "
             "G* inside CI |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows.itertuples():
        p = prediction(pred, r.sweep, r.hard_fraction if r.sweep == "knob" else None)
        accs = ", ".join(f"{g}: {a:.3f}" for g, a in sorted(r.mean_by_G.items()))
        lines.append(f"| {r.hard_fraction:g} | {r.seeds} | {p.J:.3f} | "
                     f"{p.frac_V_below_5pct:.2f} | {p.V_median:.3f} | "
                     f"{p.G_continuous:.1f} / {int(p.G_exact)} | {accs} | {r.best} | "
                     f"[{r.lo}, {r.hi}] | {'yes' if r.lo <= p.G_exact <= r.hi else 'no'} |")
    return lines


def _practical_lines(train: pd.DataFrame, main: pd.DataFrame) -> list:
    """Practical variant vs Algorithm 1 at the same budget, per checkpoint."""
    pr = summary(train, "practical")
    if pr.empty:
        return []
    r0 = train[train.sweep == "practical"].iloc[0]
    n = int(pr.N.iloc[0])
    lines = ["", f"**Practical variant** ({r0.estimator} advantages, {int(r0.epochs)} clipped "
             f"epochs per batch, clip 1 +/- {r0.clip_eps:g}) against Algorithm 1 at N = {n}; "
             "G* is the Algorithm-1 prediction (Theorem 7 does not cover this variant).", "",
             "| step | variant | seeds | mean accuracy by G | best G | 95% bootstrap CI |",
             "|---|---|---|---|---|---|"]
    for step in sorted(pr.step.unique()):
        for name, t in (("Algorithm 1", main), ("practical", pr)):
            r = t[(t.N == n) & (t.step == step)]
            if r.empty:
                continue
            r = r.iloc[0]
            accs = ", ".join(f"{g}: {a:.3f}" for g, a in sorted(r.mean_by_G.items()))
            lines.append(f"| {step} | {name} | {r.seeds} | {accs} | {r.best} | "
                         f"[{r.lo}, {r.hi}] |")
    return lines


def plot(tables, s: Settings, out_dir) -> None:
    train = tables["train"]
    preds = tables["prediction" if s.model is None else "prediction_model"]
    tr = train[train.sweep == "main"]
    budgets = sorted(tr.N.unique())
    knob = train[train.sweep == "knob"]
    prac = train[train.sweep == "practical"]
    extra = not (knob.empty and prac.empty)
    fig, axes = plt.subplots(1, len(budgets) + extra, figsize=(4.2 * (len(budgets) + extra), 3.6),
                             squeeze=False)
    pred = prediction(preds)
    for ax, n in zip(axes[0], budgets):
        d = tr[tr.N == n]
        for step, e in d[d.step > 0].groupby("step"):
            m = e.groupby("G").accuracy.agg(["mean", "sem"])
            ax.errorbar(m.index, m["mean"], yerr=z_value() * m["sem"].fillna(0), fmt="o-", ms=3,
                        capsize=2, label=f"step {int(step)}")
        ax.axvline(pred.G_continuous, color="k", ls="--", lw=1, label="predicted G*")
        ax.set(xscale="log", xlabel="G", ylabel="held-out accuracy", title=f"N = {int(n)}")
        gs = sorted(d.G.unique())
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xticks(gs, [str(int(g)) for g in gs])
        ax.legend(fontsize=7)
    if extra:
        ax = axes[0, -1]
        last = int(train.step.max())
        n_x = int(pd.concat([knob, prac]).N.iloc[0])
        both = pd.concat([knob, tr[tr.N == n_x]])
        for i, (h, d) in enumerate(both[both.step == last].groupby("hard_fraction")):
            m = d.groupby("G").accuracy.agg(["mean", "sem"])
            ax.errorbar(m.index, m["mean"], yerr=z_value() * m["sem"].fillna(0), fmt="o-", ms=3,
                        capsize=2, color=f"C{i}", label=f"hard fraction {h:g}")
            sw = "main" if d.sweep.iloc[0] == "main" else "knob"
            ax.axvline(prediction(preds, sw, h if sw == "knob" else None).G_continuous,
                       color=f"C{i}", ls="--", lw=1)
        if not prac.empty:
            m = prac[prac.step == last].groupby("G").accuracy.agg(["mean", "sem"])
            ax.errorbar(m.index, m["mean"], yerr=z_value() * m["sem"].fillna(0), fmt="s:", ms=3,
                        capsize=2, color="k", label=f"practical ({prac.estimator.iloc[0]}, "
                        f"{int(prac.epochs.iloc[0])} clipped epochs), hard "
                        f"{prac.hard_fraction.iloc[0]:g}")
        ax.set(xscale="log", xlabel="G", ylabel=f"held-out accuracy, step {last}",
               title=f"difficulty knob and practical variant, N = {n_x} (dashed: G*)")
        gs = sorted(both.G.unique())
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.set_xticks(gs, [str(int(g)) for g in gs])
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    start = "the instruct policy" if s.model is None else Path(s.model).name
    fig.suptitle(f"Fixed-budget GRPO from {start} (Figure 5 analogue)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out_dir / "lm_groupsize")


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=61)
