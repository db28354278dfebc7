"""DPPO pruning inside the small transformer's GRPO loop: measured speed-up at equal accuracy.

From lm-mse's instruct checkpoint (answer-only format), GRPO steps of B prompts x G responses
(:mod:`grpo_theory.lm.training.dppo`): full-group advantages, prompts kept with ``qp = 1 - r_q`` and
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

from grpo_theory.companions import KeepScheme
from grpo_theory.experiments import Cell, Experiment, bootstrap_ci, key_seed
from grpo_theory._precision import float64
from grpo_theory.lm.training.dppo import gradient, layout, response_weights, sample_batch
from grpo_theory.lm import (QUICK_WARMUP, WarmupConfig, eval_set, study_policies, train_dppo,
                            train_pool)

from .analysis import CLOCKS, N_BOOT, Z_TOL, plot, rate_summary, report, run_summary

__all__ = ["NAME", "CLAIM", "Z_TOL", "N_BOOT", "VARIANTS", "Settings", "SETTINGS", "SCHEMA",
           "CLOCKS", "cells", "cell", "bootstrap_ci", "run_summary", "rate_summary", "report",
           "plot", "EXPERIMENT"]

NAME = "lm-dppo"
CLAIM = ("DPPO (prompt/completion pruning with 1/q, full-group advantages, packed kept "
         "sequences) in the small transformer's GRPO loop: unbiased, measured speed-up and "
         "accuracy at fixed steps and equal time")
#: Algorithm 1 and the practical clipped multi-epoch variant
VARIANTS = {"alg1": dict(estimator="grpo", epochs=1, clip_eps=None),
            "practical": dict(estimator="grpo_std", epochs=2, clip_eps=0.2)}


def _axes_and_diagonal(rs):
    out = [(0.0, 0.0)]
    out += [(r, 0.0) for r in rs] + [(0.0, r) for r in rs] + [(r, r) for r in rs]
    return tuple(out)


@dataclass(frozen=True)
class Settings:
    """The GRPO runs with and without DPPO pruning, and the gradient cell.

    Attributes:
        warmup: the warm-up policies' configuration (:class:`~grpo_theory.lm.warmup.WarmupConfig`).
        batch: prompts B per step.
        group: responses G per prompt.
        steps: steps of the fixed-step comparison.
        every: accuracy is measured every ``every`` steps.
        max_factor: pruned runs go on up to ``min(max_factor, 1/(qp qc))`` x ``steps``.
        lr: Adam's learning rate.
        n_eval: evaluation questions of the accuracy.
        n_pool: training questions the prompts are drawn from.
        rates: the pruning rates (r_q, r_o) of Algorithm 1.
        practical_rates: the rates of the clipped variant.
        seeds: runs per rate of Algorithm 1.
        capacity: the packed row length.
        n_masks: sampled masks per rate in the gradient cell.
        practical_seeds: runs per rate of the clipped variant.
        n_dirs: random projection directions in the gradient cell.
        n_buckets: buckets of the packed row counts reported.
    """

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
                      capacity=51, n_masks=64, n_buckets=4, practical_seeds=1),
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
                 z_max="float", z_full="float",
                 grad_seconds="float",
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
    pol = study_policies(wcfg)["instruct"][0]
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
    from grpo_theory.lm import encode_prompts, target_responses

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
                            # the smallest bias along g_full, relative to ||g_full||, that
                            # |z| > 4 would flag with these masks (not in SCHEMA: cells written
                            # before it was added stay valid; the report skips it there)
                            detectable_bias=float(4.0 * proj[meth][:, 0].std(ddof=1)
                                                  / np.sqrt(R) / ref[0]),
                            grad_seconds=float(np.median(secs)), full_rows_seconds=t_rows,
                            full_packed_seconds=t_pack,
                            grad_cpu_seconds=float(np.median(cpus)),
                            full_rows_cpu_seconds=c_rows, full_packed_cpu_seconds=c_pack,
                            n_masks=R,
                            load1=0.5 * (load0 + os.getloadavg()[0])))
    return out


# --- summaries, report, figure: simulations/_lm_dppo_report.py -----------------------------------


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=64)
