"""DPPO pruning inside the small transformer's GRPO loop: measured speed-up at equal accuracy.

From lm-mse's instruct checkpoint (answer-only format), GRPO steps of B prompts x G responses
(:mod:`grpo_theory.lm.dppo`): full-group advantages, prompts kept with ``qp = 1 - r_q`` and
completions with ``qc = 1 - r_o``, kept terms rescaled by ``1/(qp qc)``, and the backward pass
run only on the kept sequences, densely packed into rows of ``capacity`` tokens (row counts in
static buckets). A ``train`` cell is one run (variant, r_q, r_o, seed): exact held-out accuracy
at checkpoints with the cumulative seconds of sampling and of the update, wall clock and the
process's CPU time (compilation excluded, ``block_until_ready``), and the machine's load;
pruned runs run longer than the full run (up to ``max_factor`` times its steps) so that their
accuracy at the full run's time can be read off by linear interpolation between checkpoints in
time (CPU time is the main clock: on a shared machine wall-clock seconds of one configuration
vary with the other processes' load). The ``grad`` cell takes one
sampled batch at the starting policy and draws ``n_masks`` keep masks per rate: the DPPO
estimate through the real pruned/packed path against the full-batch estimate (bias projected on
``n_dirs`` directions, mean squared error = the added variance), the controls ``no_rescale``
(no ``1/q``) and ``recompute`` (advantages recomputed on the kept subset), the kept share
against ``qp qc``, and the seconds of one gradient next to the kept-token proxy.

PASS when (i) DPPO is unbiased within 4 standard errors on every direction at every rate,
(ii) the ``no_rescale`` control is biased (|z| > 4 along the full gradient) at every pruned rate,
(iii) the kept share matches ``qp qc`` within 4 se at every rate. Speed-ups and accuracies
(fixed steps and equal CPU / wall time, bootstrap CIs over seeds) are reported, not gated.
Measured: the full setting took 2040 s of cell time on the shared 2-core machine (load 3-10),
the quick setting 75 s from scratch (quick warm-up cached).

    grpo-theory lm-dppo [--full]
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import jax
import numpy as np
import pandas as pd

from grpo_theory.companions.dppo import KeepScheme
from grpo_theory.plotting import plt, save_figure
from grpo_theory.experiments.runner import Cell, Experiment, Section, check, key_seed, float64
from grpo_theory.experiments.stats import bootstrap_ci  # percentile CI of a mean (N_BOOT = 2000)
from grpo_theory.lm.dppo import gradient, layout, response_weights, sample_batch, train_dppo
from grpo_theory.lm.task import eval_set, train_pool
from grpo_theory.lm.warmup import QUICK_WARMUP, WarmupConfig

from .lm_mse import policies

__all__ = ["NAME", "CLAIM", "Z_TOL", "N_BOOT", "VARIANTS", "Settings", "SETTINGS", "SCHEMA",
           "CLOCKS", "cells", "cell", "bootstrap_ci", "run_summary", "rate_summary", "report",
           "plot", "EXPERIMENT"]

NAME = "lm-dppo"
CLAIM = ("DPPO (prompt/completion pruning with 1/q, full-group advantages, packed kept "
         "sequences) in the small transformer's GRPO loop: unbiased, measured speed-up and "
         "accuracy at fixed steps and equal time")
Z_TOL = 4.0
N_BOOT = 2000
#: Algorithm 1 and the practical clipped multi-epoch variant
VARIANTS = {"alg1": dict(estimator="grpo", epochs=1, clip_eps=None),
            "practical": dict(estimator="grpo_std", epochs=2, clip_eps=0.2)}


def _axes_and_diagonal(rs):
    out = [(0.0, 0.0)]
    out += [(r, 0.0) for r in rs] + [(0.0, r) for r in rs] + [(r, r) for r in rs]
    return tuple(out)


@dataclass(frozen=True)
class Settings:
    """B x G per step, ``steps`` (the fixed-step comparison) with accuracy every ``every``
    steps on ``n_eval`` questions, pruned runs up to ``min(max_factor, 1/(qp qc))`` x ``steps``;
    ``rates`` (r_q, r_o) of Algorithm 1 with ``seeds`` runs each and ``practical_rates`` of the
    clipped variant with ``practical_seeds``; ``capacity`` packed row length; ``n_masks``
    masks per rate and ``n_dirs`` random projection directions in the gradient cell."""

    warmup: WarmupConfig
    batch: int
    group: int
    steps: int
    every: int
    max_factor: float
    lr: float
    n_eval: int
    n_pool: int
    rates: tuple
    practical_rates: tuple
    seeds: int
    capacity: int
    n_masks: int
    practical_seeds: int = 3
    n_dirs: int = 8
    n_buckets: int = 8

    def __post_init__(self):
        for r in tuple(self.rates) + tuple(self.practical_rates):
            if len(r) != 2 or not all(0.0 <= v < 1.0 for v in r):
                raise ValueError(f"rates must be (r_q, r_o) pairs in [0, 1), got {r!r}")
        if (0.0, 0.0) not in {tuple(r) for r in self.rates}:
            raise ValueError("rates must include (0, 0), the full-GRPO reference")
        if self.steps % self.every:
            raise ValueError(f"every must divide steps, got {self.every} and {self.steps}")
        if self.n_masks < 4:
            raise ValueError(f"n_masks must be >= 4, got {self.n_masks!r}")


SETTINGS = {
    "quick": Settings(warmup=QUICK_WARMUP, batch=16, group=8, steps=6, every=3,
                      max_factor=2.0, lr=1e-3, n_eval=24, n_pool=2000,
                      rates=((0.0, 0.0), (0.5, 0.5)), practical_rates=((0.0, 0.0),), seeds=1,
                      capacity=51, n_masks=24, n_buckets=4, practical_seeds=1),
    # full: 2040 s of cell time on the shared 2-core machine (load 3-10)
    "full": Settings(warmup=WarmupConfig(), batch=64, group=8, steps=40, every=10,
                     max_factor=3.0, lr=1e-3, n_eval=500, n_pool=20000,
                     rates=_axes_and_diagonal((0.3, 0.5, 0.7)),
                     practical_rates=((0.0, 0.0), (0.5, 0.5)), seeds=3, capacity=51,
                     n_masks=100, practical_seeds=3),
}

_RATE = dict(variant="str", r_q="float", r_o="float")
SCHEMA = {
    "train": dict(_RATE, run_seed="int", step="int", max_steps="int", accuracy="float",
                  train_reward="float?", sample_seconds="float", update_seconds="float",
                  sample_cpu_seconds="float", update_cpu_seconds="float",
                  kept_share="float?", token_share="float?", row_share="float?", load1="float"),
    "grad": dict(_RATE, method="str", q="float", kept_share="float", kept_share_se="float",
                 token_share="float", mse="float", mse_se="float", rel_mse="float",
                 z_max="float", z_full="float", grad_seconds="float",
                 full_rows_seconds="float", full_packed_seconds="float", n_masks="int",
                 load1="float"),
}


def _steps_for(s: Settings, rq: float, ro: float) -> int:
    q = (1 - rq) * (1 - ro)
    k = int(np.ceil(s.steps * min(s.max_factor, 1.0 / q) / s.every))
    return k * s.every


def cells(s: Settings) -> list[Cell]:
    """The gradient cell, then the Algorithm-1 runs seed-major (an interrupted run keeps full
    rate sweeps for the first seeds), then the practical variant's runs."""
    data = dict(warmup=s.warmup, batch=s.batch, group=s.group, capacity=s.capacity,
                n_buckets=s.n_buckets)
    out = [Cell("grad", dict(data, measure="grad", rates=tuple(map(tuple, s.rates)),
                             n_masks=s.n_masks, n_dirs=s.n_dirs, n_pool=s.n_pool),
                kind="grad")]
    for variant, rates, seeds in (("alg1", s.rates, s.seeds),
                                  ("practical", s.practical_rates, s.practical_seeds)):
        for seed in range(seeds):
            for rq, ro in rates:
                out.append(Cell(f"{variant}_rq{rq:g}_ro{ro:g}_seed{seed}", dict(
                    data, measure="train", variant=variant, r_q=float(rq), r_o=float(ro),
                    run_seed=seed, steps=s.steps, max_steps=_steps_for(s, rq, ro),
                    every=s.every, lr=s.lr, n_eval=s.n_eval, n_pool=s.n_pool), kind="train"))
    return out


def _scheme(rq, ro) -> KeepScheme:
    return KeepScheme(q_prompt=1.0 - rq, q_completion=1.0 - ro)


@float64
def cell(config: dict, key):
    """One training run, or the gradient study (module docstring)."""
    wcfg = config["warmup"]
    pol = policies(wcfg)["instruct"][0]
    pool = train_pool(wcfg.task, config["n_pool"])
    load0 = os.getloadavg()[0]
    if config["measure"] == "grad":
        return _grad_cell(config, key, pol, pool, load0)
    v = VARIANTS[config["variant"]]
    rows = train_dppo(pol, pool, eval_set(wcfg.task).subset(np.arange(config["n_eval"])),
                      config["batch"], config["group"], config["max_steps"],
                      range(config["every"], config["max_steps"] + 1, config["every"]),
                      config["lr"], key, _scheme(config["r_q"], config["r_o"]),
                      capacity=config["capacity"], n_buckets=config["n_buckets"], **v)
    load = 0.5 * (load0 + os.getloadavg()[0])
    return [dict(r, variant=config["variant"], r_q=config["r_q"], r_o=config["r_o"],
                 run_seed=config["run_seed"], max_steps=config["max_steps"], load1=load)
            for r in rows]


def _timed(fn, reps: int):
    """Median wall and CPU (process, all threads) seconds of ``reps`` calls after one untimed
    (compiling) call."""
    fn()
    wall, cpu = [], []
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return float(np.median(wall)), float(np.median(cpu))


def _grad_cell(config, key, pol, pool, load0):
    from grpo_theory.lm.task import encode_prompts, target_responses

    k_batch, k_dir, k_mask = jax.random.split(key, 3)
    px, pc = encode_prompts(pool, "answer"), target_responses(pool, "answer")
    b = jax.device_get(sample_batch(pol, k_batch, px, pc, KeepScheme(), config["batch"],
                                    config["group"]))
    cap, nb = config["capacity"], config["n_buckets"]
    mp = pol.apply_fn.keywords["cfg"].max_prompt
    w_full, keep_all = response_weights(b)
    lay_rows = layout(b["x"], b["y"], b["mask"], w_full, keep_all, None, mp, nb)
    lay_pack = layout(b["x"], b["y"], b["mask"], w_full, keep_all, cap, mp, nb)
    g_full = gradient(pol, lay_rows)
    t_rows, c_rows = _timed(lambda: gradient(pol, lay_rows), 21)
    t_pack, c_pack = _timed(lambda: gradient(pol, lay_pack), 21)
    d = g_full.size
    u = np.array(jax.random.normal(k_dir, (config["n_dirs"], d)))
    u[0] = g_full
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    ref = u @ g_full
    norm2 = float(g_full @ g_full)
    rng = np.random.default_rng(key_seed(k_mask))
    B, G = b["adv"].shape
    out = []
    for rq, ro in config["rates"]:
        if (rq, ro) == (0.0, 0.0):
            continue
        qp, qc = 1.0 - rq, 1.0 - ro
        bq = dict(b, qp=np.full(B, qp, np.float32), qc=np.full((B, G), qc, np.float32))
        R = config["n_masks"]
        proj = {m: np.zeros((R, len(u))) for m in ("dppo", "no_rescale", "recompute")}
        err = {m: np.zeros(R) for m in proj}
        kept, toks, secs, cpus = np.zeros(R), np.zeros(R), [], []
        warmed = set()
        for r in range(R):
            m = rng.random(B) < qp
            c = rng.random((B, G)) < qc
            w, keep = response_weights(bq, "dppo", m=m, c=c)
            lay = layout(b["x"], b["y"], b["mask"], w, keep, cap, mp, nb)
            shape = lay["tokens"].shape
            if shape not in warmed:  # compile outside the timed call
                gradient(pol, lay)
                warmed.add(shape)
            t0, c0 = time.perf_counter(), time.process_time()
            g = gradient(pol, lay)
            secs.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            wr, _ = response_weights(bq, "recompute", m=m, c=c)
            g_rc = gradient(pol, layout(b["x"], b["y"], b["mask"], wr, keep, cap, mp, nb))
            # uniform q: the no-1/q estimate is exactly qp qc times the DPPO one
            for meth, est in (("dppo", g), ("no_rescale", qp * qc * g), ("recompute", g_rc)):
                proj[meth][r] = u @ est
                err[meth][r] = float(np.sum((est - g_full) ** 2))
            kept[r] = keep.mean()
            toks[r] = lay["n_tokens"] / max(1, (b["x"] != 0).sum() + b["mask"].sum())
        for meth in proj:
            zs = (proj[meth].mean(0) - ref) / (proj[meth].std(0, ddof=1) / np.sqrt(R))
            out.append(dict(variant="alg1", r_q=rq, r_o=ro, method=meth, q=qp * qc,
                            kept_share=float(kept.mean()),
                            kept_share_se=float(kept.std(ddof=1) / np.sqrt(R)),
                            token_share=float(toks.mean()), mse=float(err[meth].mean()),
                            mse_se=float(err[meth].std(ddof=1) / np.sqrt(R)),
                            rel_mse=float(err[meth].mean() / norm2),
                            z_max=float(np.max(np.abs(zs))), z_full=float(zs[0]),
                            grad_seconds=float(np.median(secs)), full_rows_seconds=t_rows,
                            full_packed_seconds=t_pack,
                            grad_cpu_seconds=float(np.median(cpus)),
                            full_rows_cpu_seconds=c_rows, full_packed_cpu_seconds=c_pack,
                            n_masks=R,
                            load1=0.5 * (load0 + os.getloadavg()[0])))
    return out


# --- report -------------------------------------------------------------------------------------


#: the clocks of the equal-time comparison: (sampling column, update column)
CLOCKS = {"cpu": ("sample_cpu_seconds", "update_cpu_seconds"),
          "wall": ("sample_seconds", "update_seconds")}


def _acc_at_time(d: pd.DataFrame, t_ref: float, clock: str) -> float:
    """Accuracy at cumulative (sampling + update) time ``t_ref`` on ``clock``, linear between
    checkpoints; NaN when the run stopped before ``t_ref``."""
    cs, cu = CLOCKS[clock]
    t = (d[cs] + d[cu]).to_numpy()
    a = d.accuracy.to_numpy()
    if t_ref > t[-1] + 1e-12:
        return float("nan")
    return float(np.interp(t_ref, t, a))


def run_summary(train: pd.DataFrame, steps: int) -> pd.DataFrame:
    """One row per run: wall and CPU seconds per step (sampling, update, total) over the first
    ``steps``, accuracy at ``steps`` and, per clock, at the full run's mean time (same
    variant) of ``steps`` steps (``acc_time_cpu``, ``acc_time_wall``)."""
    out = []
    for (variant, rq, ro, seed), d in train.groupby(["variant", "r_q", "r_o", "run_seed"],
                                                     sort=False):
        d = d.sort_values("step")
        at = d[d.step == steps].iloc[0]
        out.append(dict(variant=variant, r_q=rq, r_o=ro, run_seed=seed,
                        sample_per_step=at.sample_seconds / steps,
                        update_per_step=at.update_seconds / steps,
                        wall_per_step=(at.sample_seconds + at.update_seconds) / steps,
                        sample_cpu_per_step=at.sample_cpu_seconds / steps,
                        update_cpu_per_step=at.update_cpu_seconds / steps,
                        cpu_per_step=(at.sample_cpu_seconds + at.update_cpu_seconds) / steps,
                        acc_steps=at.accuracy, acc0=d.accuracy.iloc[0],
                        kept_share=d.kept_share[d.step > 0].mean(),
                        token_share=d.token_share[d.step > 0].mean(),
                        row_share=d.row_share[d.step > 0].mean(), load1=d.load1.iloc[0]))
    runs = pd.DataFrame(out)
    for clock in CLOCKS:
        accs = []
        for r in runs.itertuples():
            full = runs[(runs.variant == r.variant) & (runs.r_q == 0) & (runs.r_o == 0)]
            t_ref = float(full[f"{clock}_per_step"].mean() * steps)
            d = train[(train.variant == r.variant) & (train.r_q == r.r_q)
                      & (train.r_o == r.r_o) & (train.run_seed == r.run_seed)]
            if r.r_q == 0 and r.r_o == 0:  # full GRPO: its own time of `steps` steps
                accs.append(r.acc_steps)
            else:
                accs.append(_acc_at_time(d.sort_values("step"), t_ref, clock) if len(full)
                            else float("nan"))
        runs[f"acc_time_{clock}"] = accs
    return runs


def _ratio_ci(full, pruned, seed=0):
    """Bootstrap 95% CI of mean(full) / mean(pruned), resampling the seeds of both (a bootstrap,
    not :func:`grpo_theory.experiments.stats.ratio_ci`'s delta method: a handful of seeds)."""
    f, p = np.asarray(full, float), np.asarray(pruned, float)
    rng = np.random.default_rng(seed)
    b = (f[rng.integers(0, f.size, (N_BOOT, f.size))].mean(1)
         / p[rng.integers(0, p.size, (N_BOOT, p.size))].mean(1))
    return float(np.quantile(b, 0.025)), float(np.quantile(b, 0.975))


def rate_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, r_q, r_o): means over seeds; speed-ups over full GRPO (ratio of mean
    seconds per step, CPU and wall, with bootstrap CIs resampling the seeds of both; update
    only); accuracy at the fixed step count and at equal CPU / wall time with bootstrap CIs;
    full GRPO's accuracy CI (``full_lo``, ``full_hi``)."""
    out = []
    for (variant, rq, ro), d in runs.groupby(["variant", "r_q", "r_o"], sort=False):
        full = runs[(runs.variant == variant) & (runs.r_q == 0) & (runs.r_o == 0)]
        row = dict(variant=variant, r_q=rq, r_o=ro, q=(1 - rq) * (1 - ro), n=len(d),
                   kept_share=d.kept_share.mean(), token_share=d.token_share.mean(),
                   row_share=d.row_share.mean(), load1=d.load1.mean())
        for c in ("sample_per_step", "update_per_step", "wall_per_step", "sample_cpu_per_step",
                  "update_cpu_per_step", "cpu_per_step"):
            row[c] = d[c].mean()
        for clock in CLOCKS:
            col = f"{clock}_per_step"
            row[f"speedup_{clock}"] = full[col].mean() / d[col].mean()
            row[f"speedup_{clock}_lo"], row[f"speedup_{clock}_hi"] = _ratio_ci(full[col], d[col])
            at = d[f"acc_time_{clock}"].dropna()
            row[f"acc_time_{clock}"] = at.mean() if len(at) else float("nan")
            row[f"acc_time_{clock}_lo"], row[f"acc_time_{clock}_hi"] = bootstrap_ci(at)
            row[f"n_time_{clock}"] = len(at)
        row["update_speedup_cpu"] = (full.update_cpu_per_step.mean()
                                     / d.update_cpu_per_step.mean())
        row["acc_steps"] = d.acc_steps.mean()
        row["acc_steps_lo"], row["acc_steps_hi"] = bootstrap_ci(d.acc_steps)
        row["full_lo"], row["full_hi"] = bootstrap_ci(full.acc_steps)
        out.append(row)
    return pd.DataFrame(out)


def _where(v, lo, hi) -> str:
    if not np.isfinite(v):
        return "n/a"
    return "inside" if lo - 1e-12 <= v <= hi + 1e-12 else ("above" if v > hi else "below")


def report(tables, s: Settings) -> Section:
    train, grad = tables["train"], tables["grad"]
    runs = run_summary(train, s.steps)
    rs = rate_summary(runs)
    lines = [f"B = {s.batch} prompts x G = {s.group} responses per step, Adam lr {s.lr:g}, "
             f"{s.steps} steps (pruned runs up to {s.max_factor:g}x longer for the equal-time "
             f"comparison), accuracy = exact mean pi(y*|x) on {s.n_eval} held-out questions "
             f"(starting policy: {runs.acc0.mean():.3f}); kept sequences packed into rows of "
             f"{s.capacity} tokens, row counts in {s.n_buckets} buckets; compilation excluded. "
             "Clocks: CPU = the process's CPU seconds (all threads), the main clock, because "
             "the machine is shared and wall-clock seconds of one configuration vary up to 3x "
             "with the other processes' load (load1 = 1-minute load average during the run); "
             "wall = elapsed seconds. Speed-up = full GRPO's seconds per step / the pruned "
             "run's (95% bootstrap CI over seeds). Equal time = the accuracy when the pruned "
             f"run has used full GRPO's mean time of {s.steps} steps (linear between "
             "checkpoints; n/a when the run stopped earlier). 'vs full' = where the mean lies "
             f"relative to full GRPO's 95% CI at {s.steps} steps.", "",
             "| variant | r_q | r_o | q = qp qc | kept share | slot share | CPU ms/step "
             "(sample + update) | speed-up CPU [CI] | update speed-up CPU | speed-up wall [CI] "
             f"| acc @{s.steps} steps [CI] | vs full | acc @ equal CPU time [CI] | vs full | "
             "acc @ equal wall time | seeds | load1 |", "|" + "---|" * 17]
    for r in rs.itertuples():
        lines.append(
            f"| {r.variant} | {r.r_q:g} | {r.r_o:g} | {r.q:.2f} | {r.kept_share:.3f} | "
            f"{r.row_share:.3f} | {r.sample_cpu_per_step * 1e3:.0f} + "
            f"{r.update_cpu_per_step * 1e3:.0f} | {r.speedup_cpu:.2f} [{r.speedup_cpu_lo:.2f}, "
            f"{r.speedup_cpu_hi:.2f}] | {r.update_speedup_cpu:.2f} | {r.speedup_wall:.2f} "
            f"[{r.speedup_wall_lo:.2f}, {r.speedup_wall_hi:.2f}] | {r.acc_steps:.3f} "
            f"[{r.acc_steps_lo:.3f}, {r.acc_steps_hi:.3f}] | "
            f"{_where(r.acc_steps, r.full_lo, r.full_hi)} | {r.acc_time_cpu:.3f} "
            f"[{r.acc_time_cpu_lo:.3f}, {r.acc_time_cpu_hi:.3f}] (n={r.n_time_cpu}) | "
            f"{_where(r.acc_time_cpu, r.full_lo, r.full_hi)} | {r.acc_time_wall:.3f} "
            f"(n={r.n_time_wall}) | {r.n} | {r.load1:.1f} |")
    lines += ["", "Kept share = kept responses / BG (expected q); token share = kept real "
              "tokens / all real tokens (what the backward pass must process); slot share = "
              "token slots of the packed, bucketed array / the unpacked full batch's (what it "
              "does process: packing strips PADs, buckets round up)."]
    g0 = grad.iloc[0]
    cpu = "grad_cpu_seconds" in grad and grad.grad_cpu_seconds.notna().all()
    pack_cpu = (f"; CPU {g0.full_rows_cpu_seconds * 1e3:.1f} ms vs "
                f"{g0.full_packed_cpu_seconds * 1e3:.1f} ms, "
                f"{g0.full_rows_cpu_seconds / g0.full_packed_cpu_seconds:.2f}x" if cpu else "")
    lines += ["", f"Gradient at the starting policy: one batch, {int(g0.n_masks)} keep masks "
              f"per rate. Full-batch gradient (median wall time) {g0.full_rows_seconds * 1e3:.1f}"
              f" ms one sequence per row, {g0.full_packed_seconds * 1e3:.1f} ms packed (packing "
              f"gain {g0.full_rows_seconds / g0.full_packed_seconds:.2f}x{pack_cpu}). MSE = mean "
              "||g_pruned - g_full||^2 relative to ||g_full||^2 (for DPPO: its added variance); "
              "z = standardised bias on the direction of g_full and on random directions. "
              "Time ratio = median seconds of one pruned, packed gradient / the full packed "
              "one (wall; CPU in brackets), next to the kept-token proxy q.", "",
              "| r_q | r_o | q (proxy) | kept share (se) | method | rel. MSE vs full batch | "
              "z along g_full | max abs z | pruned gradient ms | time ratio | verdict |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in grad.itertuples():
        if r.method == "dppo":
            v = "PASS" if r.z_max <= Z_TOL else "FAIL"
        elif r.method == "no_rescale":
            v = "PASS (biased)" if abs(r.z_full) > Z_TOL else "FAIL (not detected)"
        else:
            v = "biased" if r.z_max > Z_TOL else "bias not detected"
        ratio = f"{r.grad_seconds / r.full_packed_seconds:.2f}"
        if cpu:
            ratio += f" ({r.grad_cpu_seconds / r.full_packed_cpu_seconds:.2f})"
        lines.append(f"| {r.r_q:g} | {r.r_o:g} | {r.q:.2f} | {r.kept_share:.3f} "
                     f"({r.kept_share_se:.3f}) | {r.method} | {r.rel_mse:.3g} | {r.z_full:.1f} "
                     f"| {r.z_max:.1f} | {r.grad_seconds * 1e3:.1f} | {ratio} | {v} |")
    lines += ["", "The kept-token proxy of the exact module predicts update time proportional "
              "to q. The `no_rescale` estimate is q times the DPPO one for the same mask "
              "(uniform q), computed that way. The `recompute` control is biased only through "
              "groups left with fewer than two kept completions (leave-one-out advantages of a "
              "random subset are otherwise unbiased for the full group's): its expectation is "
              "(1 - (1 - qc)^(G-1)) times the full estimate (exact, tested by enumeration in "
              "tests/test_lm_dppo.py), a shrinkage of at most "
              f"{(1 - min(1 - r for _, r in s.rates)) ** (s.group - 1):.1%} here, too small "
              f"to detect with {int(g0.n_masks)} masks; it is reported, not gated.", "",
              "![](lm_dppo.png)"]
    d = grad[grad.method == "dppo"]
    nr = grad[grad.method == "no_rescale"]
    checks = [
        check(f"(i) DPPO unbiased: |z| <= {Z_TOL:g} on every direction at every rate",
              (d.z_max <= Z_TOL).all(), d.z_max.to_numpy(),
              detail=f"largest |z| {d.z_max.max():.2f} over {len(d)} rates x {s.n_dirs} "
              "directions"),
        check(f"(ii) no-1/q control biased: |z| > {Z_TOL:g} along g_full at every rate",
              (nr.z_full.abs() > Z_TOL).all(), nr.z_full.to_numpy(),
              detail=f"smallest |z| {nr.z_full.abs().min():.1f}"),
        check(f"(iii) kept share = qp qc within {Z_TOL:g} se at every rate",
              ((d.kept_share - d.q).abs() <= Z_TOL * d.kept_share_se).all(),
              d[["kept_share", "kept_share_se", "q"]].to_numpy(),
              detail=", ".join(f"{r.q:.2f}: {r.kept_share:.3f}" for r in d.itertuples())),
    ]
    return Section("DPPO in the small transformer's GRPO loop", "\n".join(lines), checks)


def plot(tables, s: Settings, out_dir) -> None:
    train = tables["train"]
    rs = rate_summary(run_summary(train, s.steps))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    a = rs[rs.variant == "alg1"]
    axes[0].errorbar(a.q, a.speedup_cpu, yerr=[a.speedup_cpu - a.speedup_cpu_lo,
                                               a.speedup_cpu_hi - a.speedup_cpu],
                     fmt="o", label="total step (CPU time)", capsize=2)
    axes[0].plot(a.q, a.update_speedup_cpu, "s", label="update only (CPU time)")
    qq = np.linspace(max(0.05, a.q.min()), 1, 50)
    axes[0].plot(qq, 1 / qq, "k:", lw=1, label="1/q (kept-token proxy)")
    axes[0].set(xlabel="q = qp qc", ylabel="speed-up over full GRPO", yscale="log")
    axes[0].legend(fontsize=7)
    for ax, col, title in ((axes[1], "acc_steps", f"accuracy at {s.steps} steps"),
                           (axes[2], "acc_time_cpu", "accuracy at equal CPU time")):
        ax.errorbar(a.q, a[col], yerr=[a[col] - a[f"{col}_lo"], a[f"{col}_hi"] - a[col]],
                    fmt="o", capsize=2)
        f = a[(a.r_q == 0) & (a.r_o == 0)]
        if len(f):
            ax.axhspan(f.full_lo.iloc[0], f.full_hi.iloc[0], color="C2", alpha=0.2,
                       label="full GRPO 95% CI")
            ax.legend(fontsize=7)
        ax.set(xlabel="q = qp qc", ylabel="held-out accuracy", title=title)
    fig.suptitle("DPPO in the small transformer's GRPO loop (Algorithm 1)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out_dir / "lm_dppo")


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=64)
