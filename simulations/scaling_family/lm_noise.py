r"""scaling-family's ``lm_noise`` cells: transformer training where the gradient noise decides.

A protocol in which progress per step is limited by the estimator's noise, not by the task:
from the SAME starting policy (the instruct policy of ``lm.setup``), at a fixed per-step
budget N = B G, GRPO (Algorithm 1, :func:`grpo_theory.lm.training.grpo.train_grpo`) runs ``steps``
steps (``steps_concentrated`` at p > 0) at a learning rate ``lr`` small enough that no G gets
near the optimum within the horizon. The optimiser is Adam by default (after clipping the
update's global norm at 1): its step on each coordinate is m / sqrt(v), and v holds the
estimator's variance, so the useful part of a step shrinks as the noise grows. (Plain SGD,
``optimizer="sgd"``, is also available; at p > 0 its clipped step follows the fixed question's
gradient, whose squared norm is far above the estimator's MSE at N = 64, so there the noise
barely enters its direction.) The objective is the mixture's exact ``J_p = p V(x_F) + (1 - p)
mean_R V`` (exact-match reward, teacher forcing: no evaluation noise), read once, at step
``steps`` for every G (a step fixed before any G is compared). Many seeds per (p, G); best G
per concentration p maximises the mean gain ``J_p(steps) - J_p(0)`` over seeds, with a
bootstrap 95% CI that resamples seeds within each G
(:func:`grpo_theory.experiments.stats.bootstrap_argmin`, as ``lm_train``).

The prediction is computed in the cell, at the policy it trains from (the constants of
:func:`grpo_theory.experiments.lm_support.mixture.mixture_constants`, ``gstar_samples`` responses
per question for E||s||^2, one fixed key, so every cell of a run carries the same numbers).

One cell per (p, G) (:func:`noise_cell`), all seeds inside, one row per seed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from grpo_theory.core import ScalingConstants, grid_argmin
from grpo_theory.experiments import Cell, bootstrap_argmin, key_seed, markdown_table
from grpo_theory.experiments.lm_support import mixture as mx
from grpo_theory.lm import train_grpo, train_pool

from .lm import setup

__all__ = ["NOISE_SCHEMA", "LMNoisePart", "noise_cells", "noise_runs", "noise_cell",
           "noise_points", "noise_rows", "noise_report"]

#: the ``lm_noise`` table's columns (one row per p, G, seed; the per-p constants repeated)
NOISE_SCHEMA = dict(p="float", G="int", B="int", N="int", run_seed="int", steps="int",
                    lr="float", optimizer="str", J0="float", J="float", gain="float",
                    V_fixed0="float",
                    V_fixed="float", acc_rest="float", p_exact="float", c1="float",
                    c2="float", c3="float", G_pred="float", fixed="str", run_seconds="float")


@dataclass(frozen=True)
class LMNoisePart:
    """``ps`` concentrations; ``grid`` group sizes dividing the per-step budget ``N``; ``steps``
    steps of ``optimizer`` (``sgd`` or ``adam``, after global-norm clipping at 1) at rate ``lr``
    per run at p = 0 and ``steps_concentrated`` (0: ``steps``) at p > 0, ``seeds`` runs per
    (p, G); ``n_eval`` held-out questions,
    ``n_pool`` training prompts, ``n_candidates`` candidates for the fixed question,
    ``gstar_samples`` responses per question for the constants."""

    warmup: object
    ps: tuple = (0.0, 0.9, 0.99)
    grid: tuple = (2, 4, 8, 16, 32)
    N: int = 64
    steps: int = 40
    steps_concentrated: int = 10
    lr: float = 2e-5
    optimizer: str = "adam"
    seeds: int = 32
    n_eval: int = 500
    n_pool: int = 10000
    n_candidates: int = 256
    gstar_samples: int = 16


def noise_cells(m: LMNoisePart | None) -> list[Cell]:
    """One ``lm_noise`` cell per (p, G) with G dividing N (p-major)."""
    if m is None:
        return []
    bad = [g for g in m.grid if g < 2 or m.N % g]
    if bad:
        raise ValueError(f"grid must hold G >= 2 dividing N={m.N}, got {bad}")
    base = dict(part="lm_noise", warmup=m.warmup, n_eval=m.n_eval, n_pool=m.n_pool,
                n_candidates=m.n_candidates, N=m.N, lr=m.lr, optimizer=m.optimizer,
                seeds=m.seeds, gstar_samples=m.gstar_samples)
    return [Cell(f"lm_noise_p{p}_G{g}", dict(base, p=float(p), G=int(g), steps=(
        m.steps_concentrated if p > 0 and m.steps_concentrated else m.steps)), kind="lm_noise")
            for p in m.ps for g in m.grid]


def noise_runs(pol, fixed, rest, pool, p_exact: float, N: int, G: int, steps: int, lr: float,
               seeds, optimizer: str = "sgd") -> list[dict]:
    """GRPO runs from ``pol``, one per integer seed, and ``J_p`` at steps 0 and ``steps``.

    Args:
        pol: the starting policy; fixed, rest: the fixed question and the held-out ones R.
        pool: the training prompts (uniform draws realise the mixture); p_exact: the mass on F.
        N, G: per-step budget and group size (B = N/G); steps, lr: run length and rate.
        seeds: the runs' integer seeds; optimizer: ``sgd`` or ``adam`` (clipped at norm 1).
    Returns:
        One dict per seed: ``run_seed, J0, J, gain, V_fixed0, V_fixed, acc_rest,
        run_seconds``.
    """
    if not 0 <= p_exact < 1:
        raise ValueError(f"p_exact must lie in [0, 1), got {p_exact!r}")
    out = []
    for s in seeds:
        v = {}
        t0 = time.perf_counter()
        rows = train_grpo(pol, pool, rest, N, G, steps, (steps,), lr, seed=int(s),
                          optimizer=optimizer,
                          on_checkpoint=lambda k, q: v.__setitem__(
                              k, float(mx.pass_rates(q, fixed)[0])))
        dt = time.perf_counter() - t0
        j = [p_exact * v[r["step"]] + (1 - p_exact) * r["accuracy"] for r in rows]
        out.append(dict(run_seed=int(s), J0=j[0], J=j[-1], gain=j[-1] - j[0], V_fixed0=v[0],
                        V_fixed=v[rows[-1]["step"]], acc_rest=rows[-1]["accuracy"],
                        run_seconds=dt))
    return out


@lru_cache(maxsize=8)
def _constants(warmup, n_eval: int, n_candidates: int, samples: int) -> tuple:
    """Per-question pieces of the mixture's constants at the starting policy (one fixed key, so
    every cell of a run, in any process, gets the same numbers)."""
    pol, rest, fixed = setup(dict(warmup=warmup, n_eval=n_eval, n_candidates=n_candidates))
    return mx.mixture_parts(pol, fixed, rest, samples, 22)


def noise_cell(config: dict, key) -> list[dict]:
    """``seeds`` runs at one (p, G) from the instruct policy (module docstring)."""
    pol, rest, fixed = setup(config)
    p, n, g = float(config["p"]), int(config["N"]), int(config["G"])
    pool, pe = mx.concentrated_pool(fixed, train_pool(config["warmup"].task,
                                                      n=config["n_pool"]), p, config["n_pool"])
    c = mx.mixture_constants(_constants(config["warmup"], int(config["n_eval"]),
                                        int(config["n_candidates"]),
                                        int(config["gstar_samples"])), pe)
    seeds = key_seed(key, int(config["seeds"]))
    runs = noise_runs(pol, fixed, rest, pool, pe, n, g, int(config["steps"]),
                      float(config["lr"]), seeds, config["optimizer"])
    return [dict(r, run_seed=i, p=p, G=g, B=n // g, N=n, steps=int(config["steps"]),
                 lr=float(config["lr"]), optimizer=config["optimizer"], p_exact=pe,
                 c1=c["c1"], c2=c["c2"], c3=c["c3"],
                 G_pred=c["G_continuous"], fixed=fixed.text[0]) for i, r in enumerate(runs)]


def noise_points(t: pd.DataFrame, n_boot: int = 2000) -> pd.DataFrame:
    """Best G per concentration: argmax over G of the mean gain over seeds, with the bootstrap
    95% CI (seeds resampled within each G).

    Args:
        t: ``lm_noise`` rows (columns ``p, G, run_seed, gain, G_pred, c1, c2, c3``).
        n_boot: bootstrap resamples.
    Returns:
        DataFrame ``p, N, steps, seeds, G_pred, G_grid, best_G, ci_low, ci_high, p_best,
        mean_by_G, se_by_G`` sorted by p (G_grid: the law's argmin on the run's grid).
    """
    cols = ["p", "N", "steps", "seeds", "G_pred", "G_grid", "best_G", "ci_low", "ci_high",
            "p_best", "mean_by_G", "se_by_G"]
    if t is None or not len(t):
        return pd.DataFrame(columns=cols)
    out = []
    for p, e in t.groupby("p", sort=True):
        by = {int(g): d.gain.to_numpy(np.float64) for g, d in e.groupby("G", sort=True)}
        if len(by) < 2:
            continue
        b = bootstrap_argmin({g: -v for g, v in by.items()}, n_boot=n_boot,
                             seed=int(round(1000 * p)))
        r = e.iloc[0]
        out.append(dict(p=float(p), N=int(r.N), steps=int(r.steps),
                        seeds=int(min(len(v) for v in by.values())), G_pred=float(r.G_pred),
                        G_grid=grid_argmin(ScalingConstants(float(r.c1), float(r.c2),
                                                            float(r.c3)), sorted(by)),
                        best_G=int(b.best), ci_low=int(b.lo), ci_high=int(b.hi),
                        p_best=b.p_best, mean_by_G={g: float(v.mean()) for g, v in by.items()},
                        se_by_G={g: float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1
                                 else float("nan") for g, v in by.items()}))
    return pd.DataFrame(out, columns=cols)


def noise_rows(t: pd.DataFrame | None, n_boot: int = 2000) -> list[dict]:
    """One point per concentration for scaling-family's summaries (source ``lm:noise``)."""
    return [dict(delta=float("nan"), source="lm:noise", label=f"p={r.p:g}", N=r.N,
                 G_pred=r.G_pred, G_grid=r.G_grid, best_G=r.best_G, ci_low=r.ci_low,
                 ci_high=r.ci_high) for r in noise_points(t, n_boot).itertuples()]


def _separated(pts: pd.DataFrame) -> list[str]:
    """The pairs of concentrations whose best-G CIs do not overlap."""
    r = list(pts.itertuples())
    return [f"p = {a.p:g} vs {b.p:g}" for i, a in enumerate(r) for b in r[i + 1:]
            if a.ci_high < b.ci_low or b.ci_high < a.ci_low]


def noise_report(t: pd.DataFrame, n_boot: int = 2000) -> list[str]:
    """Report lines: mean gain by G per p, best G with its CI against the prediction, the
    ordering and the pairs of settings whose CIs separate."""
    pts = noise_points(t, n_boot)
    if not len(pts):
        return []
    gs = sorted(int(g) for g in t.G.unique())
    tab = pd.DataFrame({
        "p": pts.p, "steps": pts.steps, "seeds": pts.seeds, "G* = 1+√(c3/c1)": pts.G_pred,
        "grid prediction": pts.G_grid,
        **{f"gain G={g} (± se)": [f"{r.mean_by_G.get(g, np.nan):+.4f} ± "
                                  f"{r.se_by_G.get(g, np.nan):.4f}" for r in pts.itertuples()]
           for g in gs},
        "best G [95% CI]": [f"{r.best_G} [{r.ci_low}, {r.ci_high}]" for r in pts.itertuples()],
        "p(best)": pts.p_best})
    m = t.groupby(["p", "G"])[["J0", "J", "V_fixed0", "V_fixed"]].mean().groupby("p").max()
    by_pred = pts.sort_values("G_pred")
    follows = bool(np.all(np.diff(by_pred.best_G.to_numpy()) >= 0))
    sep = _separated(pts)
    return ["", f"**Noise-limited training** (`lm_noise`: {t.optimizer.iloc[0]} at lr "
            f"{t.lr.iloc[0]:g} after clipping at norm 1, `steps` steps at N = "
            f"{int(pts.N.iloc[0])} from the instruct policy; J_p read at the last step for every "
            "G; gain = J_p(T) − J_p(0), mean ± se over seeds; best G maximises the mean gain, "
            "95% bootstrap CI over seeds):", "",
            markdown_table(tab, {"G* = 1+√(c3/c1)": ".1f", "p(best)": ".2f"}), "",
            "Distance from saturation (J_p ≤ 1; largest mean over G at the read step): "
            + "; ".join(f"p = {p:g}: J_p {r.J0:.4f} → {r.J:.4f}, V(x_F) {r.V_fixed0:.3f} → "
                        f"{r.V_fixed:.3f}" for p, r in m.iterrows()) + ".",
            f"Ordering of best G by increasing predicted G*: "
            f"{', '.join(str(int(b)) for b in by_pred.best_G)} "
            f"({'non-decreasing: follows' if follows else 'does not follow'} the ordering of "
            "the prediction). Pairs of settings whose best-G CIs do not overlap: "
            f"{', '.join(sep) if sep else 'none'}."]
