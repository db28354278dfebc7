r"""scaling-family's ``lm_mc`` cells: the measured fixed-budget MSE argmin on the transformer.

The Monte Carlo counterpart of the prompt-concentration knob's prediction (``lm_knob``): at the
instruct policy, in the answer-only format with the exact-match reward (``y*`` unique, so V(x)
and grad J_p are exact by teacher forcing), prompts drawn i.i.d. from the mixture with mass p
on the fixed question (``lm.setup``) and 1 - p uniform on the held-out questions R.
One cell per p (:func:`mc_cell`): for every budget N and G of the grid, ``reps`` replicates of
the grpo estimator's squared error ``||g_hat - grad J_p||^2``
(:func:`grpo_theory.experiments.lm_support.mixture_mc.grpo_mse_replicates`, B = N/G prompts, G
responses each), the exact curve ``(c1 G + c2 + c3/(G-1))/N`` from the mixture's constants (exact V,
||s*||^2, grad J_p; E||s||^2 per question sampled, its error carried as ``exact_se``), the z-score
of the Monte Carlo mean against it, the bootstrap of the argmin over replicates
(:func:`grpo_theory.experiments.stats.bootstrap_argmin`) and the advisor's G* with its 95% CI
(:func:`grpo_theory.advisor.estimate.estimate_scaling_constants` on prompts drawn from the mixture).
The constants are recomputed in the cell, at the policy the cell loads, so the prediction and the
measurement are on the same policy even where a re-trained warm-up differs from the one behind the
committed ``lm_knob`` rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np
import pandas as pd

from grpo_theory.advisor import estimate_scaling_constants
from grpo_theory.core import ScalingConstants, grid_argmin, summarize_squared_errors, z_value
from grpo_theory.experiments import Cell, bootstrap_argmin, markdown_table
from grpo_theory.experiments.lm_support import mixture as mx, mixture_mc as mm
from grpo_theory.lm import RESPONSE_LEN, encode_prompts, target_responses

from .lm import setup

__all__ = ["MC_SCHEMA", "LMMCPart", "mc_cells", "mc_cell", "mc_points", "mc_groups",
           "mc_report"]

#: the ``lm_mc`` table's columns (one row per p, N, G; the per-(p, N) columns repeated)
MC_SCHEMA = dict(p="float", N="int", G="int", B="int", n_reps="int", mc="float", mc_se="float",
                 mc_ci_low="float", mc_ci_high="float", exact="float", exact_se="float",
                 z="float", boot_freq="float", c1="float", c2="float", c3="float",
                 G_pred="float", G_grid="int", best_G="int", ci_low="int", ci_high="int",
                 advisor_G="float", advisor_ci_low="float?", advisor_ci_high="float?",
                 fixed="str", V_fixed="float", grad_norm2="float")


@dataclass(frozen=True)
class LMMCPart:
    """``ps`` concentrations; ``budgets`` ``((N, replicates), ...)`` (``budgets_concentrated``
    at p > 0 when set); ``grid`` group sizes
    dividing every N; ``s2_samples`` responses per held-out question and ``s2_fixed`` for the
    fixed one (E||s||^2); ``advisor_prompts`` x ``advisor_samples`` rollouts for the advisor;
    ``rep_chunk`` replicates per compiled call; ``n_boot`` bootstrap resamples."""

    warmup: object
    ps: tuple = (0.0, 0.9, 0.99)
    budgets: tuple = ((256, 200), (1024, 50))
    budgets_concentrated: tuple = ()
    grid: tuple = (2, 4, 8, 16, 32, 64, 128)
    s2_samples: int = 8
    s2_fixed: int = 512
    advisor_prompts: int = 256
    advisor_samples: int = 8
    rep_chunk: int = 25
    n_boot: int = 2000
    n_eval: int = 500
    n_candidates: int = 256


def mc_cells(m: LMMCPart | None) -> list[Cell]:
    """One ``lm_mc`` cell per concentration p."""
    if m is None:
        return []
    base = dict(part="lm_mc", warmup=m.warmup, n_eval=m.n_eval, n_candidates=m.n_candidates,
                grid=tuple(m.grid),
                s2_samples=m.s2_samples, s2_fixed=m.s2_fixed,
                advisor_prompts=m.advisor_prompts, advisor_samples=m.advisor_samples,
                rep_chunk=m.rep_chunk, n_boot=m.n_boot)
    def budgets(p):
        return tuple(tuple(b) for b in (m.budgets_concentrated if p > 0 and
                                         m.budgets_concentrated else m.budgets))

    return [Cell(f"lm_mc_p{p}", dict(base, budgets=budgets(p), p=float(p)), kind="lm_mc")
            for p in m.ps]


def _advisor(pol, fixed, rest, p, n_prompts, n_samples, key) -> tuple:
    """The advisor's G* and 95% CI from ``n_prompts`` prompts drawn from the mixture (a pool
    holding the fixed question m times next to R, m / (m + |R|) = p)."""
    m = int(round(p * len(rest) / (1 - p)))
    pool = mx.concat_questions(fixed.subset(np.zeros(m, int)), rest) if m else rest
    canon = target_responses(pool, "answer")

    def rew(rows, y):
        return np.all(np.asarray(y) == canon[rows], axis=-1).astype(np.float64)

    e = estimate_scaling_constants(pol, n_prompts, n_samples, key=key,
                                   prompts=encode_prompts(pool, "answer"), reward=rew,
                                   response_len=RESPONSE_LEN["answer"])
    lo, hi = e.g_star_ci  # an unbounded end (c1's CI reaching 0) is stored as missing
    return tuple(float(v) if np.isfinite(v) else float("nan") for v in (e.g_star, lo, hi))


def mc_cell(config: dict, key) -> list[dict]:
    """Exact and Monte Carlo fixed-budget MSE over G at every budget for one p (module doc)."""
    pol, rest, fixed = setup(config)
    p, grid = config["p"], tuple(config["grid"])
    budgets = tuple(int(n) for n, _ in config["budgets"])
    k_s2f, k_s2r, k_adv, k_mc, k_boot = jax.random.split(key, 5)
    s2 = {"F": mm.second_moments(pol, fixed, config["s2_fixed"], k_s2f),
          "R": mm.second_moments(pol, rest, config["s2_samples"], k_s2r)}
    pred = mm.mixture_mse_prediction(pol, fixed, rest, p, s2, budgets, grid)
    c = pred["constants"]
    g_grid = grid_argmin(ScalingConstants(c["c1"], c["c2"], c["c3"]), grid)
    adv = _advisor(pol, fixed, rest, p, config["advisor_prompts"], config["advisor_samples"],
                   k_adv)
    q = mx.concat_questions(fixed, rest)
    w = mm.mixture_weights(p, len(fixed), len(rest))
    grad = mm.mixture_gradient(pol, q, w)
    chunk = int(config["rep_chunk"])
    rows = []
    for (n, reps), kn in zip(config["budgets"], jax.random.split(k_mc, len(budgets))):
        errs = {}
        for g, kg in zip(grid, jax.random.split(kn, len(grid))):
            n_chunks = -(-int(reps) // chunk)
            errs[g] = np.concatenate([mm.grpo_mse_replicates(pol, q, w, grad, n, g, chunk, kc)
                                      for kc in jax.random.split(kg, n_chunks)])[:int(reps)]
        boot = bootstrap_argmin(errs, n_boot=config["n_boot"], key=jax.random.fold_in(k_boot, n))
        for g, freq in zip(boot.options, boot.freq):
            mc, se, lo, hi = summarize_squared_errors(errs[g])
            ex, ex_se = pred["mse"][(int(n), int(g))]
            rows.append(dict(p=p, N=int(n), G=int(g), B=int(n) // int(g), n_reps=int(reps),
                             mc=mc, mc_se=se, mc_ci_low=lo, mc_ci_high=hi, exact=ex,
                             exact_se=ex_se, z=(mc - ex) / np.hypot(se, ex_se),
                             boot_freq=float(freq), c1=c["c1"], c2=c["c2"], c3=c["c3"],
                             G_pred=c["G_continuous"], G_grid=int(g_grid),
                             best_G=int(boot.best), ci_low=int(boot.lo), ci_high=int(boot.hi),
                             advisor_G=adv[0], advisor_ci_low=adv[1], advisor_ci_high=adv[2],
                             fixed=fixed.text[0], V_fixed=float(mx.pass_rates(pol, fixed)[0]),
                             grad_norm2=float(grad @ grad)))
    return rows


def mc_points(tables) -> list[dict]:
    """One point per (p, N) for scaling-family's summaries (source ``lm:mc``)."""
    t = tables.get("lm_mc")
    if t is None or not len(t):
        return []
    return [dict(delta=float("nan"), source="lm:mc", label=f"p={p:g} N={n}", N=int(n),
                 G_pred=float(e.G_pred.iloc[0]), G_grid=int(e.G_grid.iloc[0]),
                 best_G=int(e.best_G.iloc[0]), ci_low=int(e.ci_low.iloc[0]),
                 ci_high=int(e.ci_high.iloc[0]))
            for (p, n), e in t.groupby(["p", "N"], sort=True)]


def mc_groups(points: pd.DataFrame) -> list:
    """The Spearman group of scaling-family's agreement table: the Monte Carlo MSE argmins of
    the bandit members (``mc``) and of the transformer (``lm:mc``) together."""
    mse = points[points.source.isin(["mc", "lm:mc"])]
    if not ((mse.source == "lm:mc").any() and (mse.source == "mc").any()):
        return []
    return [("Monte Carlo MSE argmin: bandit members + transformer (lm:mc)", mse)]


def _g(v) -> str:
    """A G* or CI end as text; missing (unbounded) as ∞."""
    return f"{v:.1f}" if np.isfinite(v) else "∞"


def mc_report(tables) -> list[str]:
    """Report lines: the measured MSE over G per (p, N) against the exact curve."""
    t = tables.get("lm_mc")
    if t is None or not len(t):
        return []
    z = z_value()
    cur = pd.DataFrame({"p": t.p, "N": t.N, "G": t.G, "reps": t.n_reps,
                        "N·MSE (MC) [95% CI]": [f"{r.N * r.mc:.0f} [{r.N * r.mc_ci_low:.0f}, "
                                                f"{r.N * r.mc_ci_high:.0f}]"
                                                for r in t.itertuples()],
                        "N·MSE exact ± 1.96 se": [f"{r.N * r.exact:.0f} ± {z * r.N * r.exact_se:.0f}"
                                                 for r in t.itertuples()],
                        "z (MC − exact)": t.z, "argmin freq": t.boot_freq})
    s = t.groupby(["p", "N"], sort=True).first().reset_index()
    best = pd.DataFrame({"p": s.p, "N": s.N, "c1": s.c1, "c2": s.c2, "c3": s.c3,
                         "1+√(c3/c1) exact": s.G_pred, "grid prediction": s.G_grid,
                         "advisor G* [95% CI]": [f"{_g(r.advisor_G)} [{_g(r.advisor_ci_low)}, "
                                                 f"{_g(r.advisor_ci_high)}]"
                                                 for r in s.itertuples()],
                         "MC argmin [95% CI]": [f"{r.best_G} [{r.ci_low}, {r.ci_high}]"
                                                for r in s.itertuples()]})
    return ["", "**Measured MSE argmin on the transformer** (`lm_mc`: answer-only, exact-match "
            "reward, prompts drawn from the concentration mixture, B = N/G; exact = "
            "(c1 G + c2 + c3/(G−1))/N from the constants at the same policy):", "",
            markdown_table(best, {"c1": ".2f", "c2": ".0f", "c3": ".0f",
                                  "1+√(c3/c1) exact": ".1f"}), "",
            markdown_table(cur, {"z (MC − exact)": "+.2f", "argmin freq": ".2f"}),
            "", f"max |z| of the Monte Carlo mean against the exact curve: "
            f"{float(np.abs(t.z).max()):.2f} over {len(t)} (p, N, G) rows."]
