r"""The scaling law across a problem family: predicted G* against the best group size.

Claim (Theorem 7): under a fixed budget N = BG the GRPO gradient MSE,
``N MSE = c1 G + c2 + c3/(G-1)``, is minimised at G* = 1 + sqrt(c3/c1) (paper's leading-order
form sqrt(c3/c1)) whatever N, across a family of problems whose G* runs from 2 to 128.

Family (:func:`grpo_theory.problems.scaling_family_bandit`): the scaling-law bandit (4 prompts x
2 responses, theta in R^2) with reward gap delta, at its maximiser theta* (which does not move
with delta because J is affine in delta). Per-prompt gradients scale with delta, so
c1 ∝ delta^2, while c3 keeps the reward variance (about 1/4): G* - 1 grows like 1/delta. The
members' delta are chosen (from exact c1, c3) so that the exact G* is about 2, 4, 8, ..., 128.

Cells, one kind per table, each kind in its own module (one experiment, so the figure and
Spearman's statistics read one set of tables, and the committed ``results-full/scaling-family/``
stays readable by ``grpo-theory report``):

* ``constants``, ``mse``, ``train`` (``bandit``): a member's exact constants and G*; its
  exact and Monte Carlo MSE over G at budget N, with a bootstrap of the argmin; Algorithm 1's
  exact final gap per seed at one G, under a per-step budget N = BG and (full) a total budget
  T = n B G with B fixed.
* ``lm_knob``, ``lm_train`` (``lm``, full setting only): the small transformer's G* under
  candidate knobs (difficulty, temperature, response format, prompt concentration p) and GRPO
  runs at the concentrations ``Settings.lm.ps``; their analysis (the read step, the LM rows of
  the report) is in ``lm_report``.
* ``lm_mc`` (``lm_mc``, full only): the transformer's Monte Carlo MSE argmin over G.
* ``lm_noise`` (``lm_noise``, full only): noise-limited transformer training (Adam at a
  small rate, J_p read at a step fixed in advance, many seeds): best G per concentration with
  a bootstrap CI over seeds (source ``lm:noise``).
* ``lm`` (no cell here): optional rows ``source, label, G_pred, best_G, ci_low, ci_high`` of
  language-model settings from another study; when present they enter the figure and the
  statistics.

PASS (what Theorem 7 guarantees): for every member, the exact integer argmin equals the exact
form's prediction; for every member and budget, the exact argmin over the grid equals the
grid argmin of the law, and the Monte Carlo argmin's bootstrap 95% CI contains it; every cell's
Monte Carlo MSE lies within 4 se of the law ``(c1 G + c2 + c3/(G-1))/N`` and, in every member,
some cell lies beyond 4 se of the rival leading-order ``(c1 G + c2 + c3/G)/N``; where the law's
and the rival's grid argmins differ (``Settings.split``), the Monte Carlo MSE at the rival's
argmin lies beyond 4 se above the law's. With the LM
part: c1 > 0 at every trained concentration, their predicted G* span a factor >= 4, and every
J_p is a probability. Training agreement (and Spearman's rank correlation between predicted and
best G) is reported, not gated.

Cost: compilation dominates (one per (B, G) shape for Monte Carlo, one per G for training:
the members are traced pytrees of equal shapes and share the compiled loop), 5-20 s each on the
shared 2-core machine; quick 22-81 s, full in ``FULL_ESTIMATE``.

    grpo-theory scaling-family [--full] [--workers N]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from grpo_theory.core import grid_argmin, z_value
from grpo_theory.experiments import Cell, Experiment, Section, check, markdown_table, spearman
from grpo_theory._precision import float64
from grpo_theory.lm import WarmupConfig

from .bandit import (ETA0, bandit_cells, bandit_points, constants_cell, law_z, mse_cell,
                     split_rows, train_cell)
from .lm import LMPart, knob_cell, lm_cells, train_cell as lm_train_cell
from .figure import plot_points
from .lm_mc import (MC_SCHEMA, LMMCPart, mc_cell, mc_cells, mc_groups, mc_points, mc_report)
from .lm_noise import (NOISE_SCHEMA, LMNoisePart, noise_cell, noise_cells, noise_report,
                       noise_rows)
from .lm_report import (lm_checkpoint_table, lm_points, lm_reach, lm_report, read_step,
                        steps_to_reach)

__all__ = ["NAME", "CLAIM", "ETA0", "FULL_ESTIMATE", "LMPart", "Settings", "SETTINGS", "SCHEMA",
           "PARTS", "cells", "cell", "lm_cells", "grid_argmin", "read_step", "steps_to_reach",
           "lm_checkpoint_table", "lm_reach", "lm_points", "summaries", "argmin_rival_z", "checks",
           "report", "plot", "EXPERIMENT"]

NAME = "scaling-family"
CLAIM = ("across a bandit family with G* from 2 to 128, the fixed-budget MSE argmin is "
         "1 + sqrt(c3/c1) (Thm 7); training's best G reported against it")
FULL_ESTIMATE = ("measured: 877 s (133 cells, one worker, shared 2-core machine, load 4-7 observed: "
                 "`grpo-theory scaling-family --full --out results-full`); the estimate from "
                 "cell times at load 12 was about 45 min. The LM training cells (63, "
                 "checkpoints every 2 steps, 80 steps at p = 0 and 40 at p > 0; knob cells and "
                 "full warm-up cached): 1236 s wall, 1225 s of cell time, one worker, load 8-16 "
                 "observed. The lm_mc cells (load 11-14): p = 0 1474 s (240 and 40 replicates "
                 "per G at N = 256, 1024), p = 0.9 810 s and p = 0.99 408 s (160 at N = 256). "
                 "The lm_noise cells (15, 32 seeds each, warm-up cached): 652.6 s wall, 644.6 s "
                 "of cell time, one worker pinned to one core")


#: a cell's Monte Carlo MSE lies within this many standard errors of the law, and the rival law
#: beyond it somewhere in every member
Z_TOL = 4.0

@dataclass(frozen=True)
class Settings:
    """The bandit family's cells and, optionally, the transformer's parts.

    Attributes:
        deltas: the members' reward gaps.
        grid: the group sizes (powers of a base, so the grid argmin is well separated).
        budgets: the budgets N of the MSE cells.
        mc_reps: Monte Carlo replicates per (member, N, G), a multiple of ``MC_CHUNK``.
        train_N: the per-step budget N = B G of the training runs.
        train_steps: steps under the per-step budget.
        train_B_total: B under the total budget (0: no total-budget runs).
        total_steps_at_Gmax: steps at the largest G under the total budget.
        n_seeds: training runs per (member, G).
        n_boot: bootstrap resamples of the best-G intervals.
        train_deltas: the members trained with Algorithm 1 (one compilation per G).
        lm: the language-model part (:class:`LMPart`; None: no LM cells).
        lm_mc: the transformer's measured MSE argmin (``LMMCPart``; None: no cells).
        lm_noise: noise-limited transformer training (``LMNoisePart``; None: no cells).
        split: members where the law's and the rival law's grid argmins differ, each
            ``(delta, N, grid, n_reps)`` (:func:`~.bandit.split_rows`).
    """

    deltas: tuple
    grid: tuple
    budgets: tuple
    mc_reps: int
    train_N: int
    train_steps: int
    train_B_total: int
    total_steps_at_Gmax: int
    n_seeds: int
    n_boot: int
    train_deltas: tuple = ()
    lm: LMPart | None = None
    lm_mc: LMMCPart | None = None
    lm_noise: LMNoisePart | None = None
    split: tuple = ()


SETTINGS = {
    "quick": Settings(deltas=(0.5, 0.1, 0.0226), grid=(2, 8, 32), budgets=(64,), mc_reps=2000,
                      train_N=64, train_steps=100, train_B_total=0, total_steps_at_Gmax=0,
                      n_seeds=32, n_boot=1000, train_deltas=(0.1,),
                      # law: 1 + sqrt(c3/c1) = 3.01, rival: sqrt(c3/c1) = 2.01; N MSE differs
                      # by 9% between G = 2 and 3
                      split=((0.35, 12, (2, 3), 20_000),)),
    "full": Settings(deltas=(0.5, 0.25, 0.1, 0.047, 0.0226, 0.0111, 0.0055),
                     grid=(2, 4, 8, 16, 32, 64, 128, 256), budgets=(256, 1024), mc_reps=20_000,
                     train_N=256, train_steps=400, train_B_total=2, total_steps_at_Gmax=200,
                     n_seeds=128, n_boot=2000,
                     train_deltas=(0.5, 0.25, 0.1, 0.047, 0.0226, 0.0111, 0.0055),
                     lm=LMPart(warmup=WarmupConfig(),
                               knobs=(("concentration", (0.0, 0.5, 0.75, 0.9, 0.95, 0.98, 0.99,
                                                         0.995)),
                                      ("hard_fraction", (0.0, 0.25, 0.75)),
                                      ("temperature", (0.5, 0.7, 1.0, 1.5)),
                                      ("format", ("answer", "trace"))),
                               ps=(0.0, 0.95, 0.99), grid=(2, 4, 8, 16, 32, 64, 128), N=256,
                               steps=80, seeds=3, steps_concentrated=40, checkpoint_every=2),
                     lm_mc=LMMCPart(warmup=WarmupConfig(), budgets=((256, 240), (1024, 40)),
                                    budgets_concentrated=((256, 160),), rep_chunk=20),
                     lm_noise=LMNoisePart(warmup=WarmupConfig())),
}

SCHEMA = {
    "constants": dict(delta="float", c1="float", c2="float", c3="float", c1_initial="float",
                      c3_initial="float", G_paper="float?", G_continuous="float?",
                      G_exact="int", G_exact_initial="int", int_argmin="int", G_grid="int",
                      J_star="float"),
    "mse": dict(delta="float", N="int", G="int", B="int", exact="float", mc="float",
                mc_se="float", boot_freq="float", n_reps="int"),
    "train": dict(delta="float", mode="str", budget="int", G="int", B="int", n_steps="int",
                  eta="float", run_seed="int", final_gap="float", gap0="float"),
    "lm": dict(source="str", label="str", G_pred="float", best_G="int", ci_low="int",
               ci_high="int"),
    "lm_knob": dict(knob="str", value="str", method="str", c1="float", c2="float?", c3="float",
                    G_continuous="float?", G_ci_low="float?", G_ci_high="float?", J="float",
                    p_exact="float?", fixed="str?", V_fixed="float?", n_questions="int"),
    "lm_train": dict(p="float", G="int", B="int", N="int", run_seed="int", step="int",
                     J_mix="float", acc_rest="float", V_fixed="float", train_reward="float?",
                     steps_per_s="float"),
    "lm_mc": MC_SCHEMA,
    "lm_noise": NOISE_SCHEMA,
}


def cells(s: Settings) -> list[Cell]:
    """The bandit cells, then (full) the LM part's, the transformer's MSE and its noise-limited
    training cells."""
    return (bandit_cells(s) + (lm_cells(s.lm) if s.lm is not None else []) + mc_cells(s.lm_mc)
            + noise_cells(s.lm_noise))


#: the cell function of each ``config["part"]``
PARTS = {"constants": constants_cell, "mse": mse_cell, "train": train_cell,
         "lm_knob": knob_cell, "lm_train": lm_train_cell, "lm_mc": mc_cell,
         "lm_noise": noise_cell}


@float64
def cell(config: dict, key):
    """One cell: a member's constants, its fixed-budget MSE over G at one N, one training G, an
    LM knob's G*, or one LM training run (``config["part"]``, see :data:`PARTS`)."""
    part = config["part"]
    if part not in PARTS:
        raise ValueError(f"config['part'] must be one of {sorted(PARTS)}, got {part!r}")
    return PARTS[part](config, key)


def summaries(tables, n_boot: int = 2000, split: tuple = ()) -> dict:
    """One row per (member, source[, N]): predicted and empirical best G with its CI.

    Args:
        tables: the experiment's tables (``constants``, ``mse``, ``train``, optional ``lm``,
            ``lm_knob``, ``lm_train``, ``lm_mc``, ``lm_noise``).
        n_boot: bootstrap resamples for the training CIs.
        split: the settings' ``split`` members (:func:`~.bandit.split_rows`).
    Returns:
        ``{"constants": ..., "points": DataFrame(delta, source, label, N, G_pred, G_grid,
        best_G, ci_low, ci_high, in_ci), "law", "argmin_rival_z", "split"}`` (sources: exact,
        mc, train_<mode>, lm:<source>).
    """
    rows = bandit_points(tables, n_boot)
    lm = tables.get("lm")
    if lm is not None and len(lm):
        rows += [dict(delta=float("nan"), source=f"lm:{r.source}", label=str(r.label), N=0,
                      G_pred=float(r.G_pred), G_grid=-1, best_G=int(r.best_G),
                      ci_low=int(r.ci_low), ci_high=int(r.ci_high)) for r in lm.itertuples()]
    if len(tables.get("lm_train", ())):
        rows += [dict(delta=float("nan"), source="lm:train", label=f"p={r.p:g}", N=r.N,
                      G_pred=r.G_pred, G_grid=r.G_grid, best_G=r.best_G, ci_low=r.ci_low,
                      ci_high=r.ci_high) for r in lm_points(tables, n_boot).itertuples()]
    rows += mc_points(tables) + noise_rows(tables.get("lm_noise"), n_boot)
    pts = pd.DataFrame(rows, columns=["delta", "source", "label", "N", "G_pred", "G_grid",
                                      "best_G", "ci_low", "ci_high"])
    pts["label"] = pts.label.astype(object).where(pts.label.notna(), "")
    # the grid prediction (training, MSE) or, for LM rows without a grid, the real G* itself
    target = np.where(pts.G_grid > 0, pts.G_grid, pts.G_pred)
    pts["in_ci"] = (pts.ci_low <= target) & (target <= pts.ci_high)
    return {"constants": tables["constants"], "points": pts, "law": law_z(tables),
            "argmin_rival_z": argmin_rival_z(tables["mse"], pts[pts.source == "mc"]),
            "split": split_rows(tables, split)}


def argmin_rival_z(mse: pd.DataFrame, mc_points: pd.DataFrame) -> float:
    """How far the Monte Carlo argmin's rival lies: per (member, N), the grid neighbour of the
    predicted best G that is closer in Monte Carlo MSE, ``(mc[G'] - mc[G_pred]) / sqrt(se[G']^2 +
    se[G_pred]^2)`` (independent cells); the smallest over (member, N), 0 where the data favour
    the neighbour.

    Args:
        mse: the ``mse`` table (delta, N, G, mc, mc_se).
        mc_points: the ``mc`` rows of :func:`summaries`' points (delta, N, G_grid).
    Returns:
        The distance in standard errors (NaN without a point that has a neighbour).
    """
    zs = []
    for r in mc_points.itertuples():
        e = mse[(mse.delta == r.delta) & (mse.N == r.N)].sort_values("G").reset_index(drop=True)
        at = np.flatnonzero(e.G.to_numpy() == r.G_grid)
        if at.size != 1:
            continue
        j = int(at[0])
        zs += [min((e.mc[k] - e.mc[j]) / np.hypot(e.mc_se[k], e.mc_se[j])
                   for k in (j - 1, j + 1) if 0 <= k < len(e))] if len(e) > 1 else []
    return float(max(0.0, min(zs))) if zs else float("nan")


def checks(sm: dict) -> list:
    """The PASS rule (module docstring) as checks on :func:`summaries`."""
    c, p, lz = sm["constants"], sm["points"], sm["law"]
    ex, mc = p[p.source == "exact"], p[p.source == "mc"]
    # the leading-order law's distance: per member its largest cell (the rule asks some cell
    # beyond Z_TOL), the smallest over members
    rz = float(lz.rival_z.min()) if len(lz) else float("nan")
    az = sm["argmin_rival_z"]
    sp = sm.get("split", pd.DataFrame())
    out = []
    if len(sp):
        sz = float(sp.z.min())
        out = [check(f"where the law's and its rival's argmins differ, Monte Carlo MSE at the "
                     f"rival's argmin beyond {Z_TOL:g} se above the law's (every such member)",
                     bool((sp.G_law != sp.G_rival).all() and (sp.z > Z_TOL).all()), sp.z,
                     kind="statistical",
                     excludes="the rival leading-order law's argmin sqrt(c3/c1), the best G "
                     "there", rival_se=sz, z_tol=Z_TOL,
                     detail=", ".join(f"δ={r.delta} N={r.N}: law's G {r.G_law}, rival's "
                                      f"{r.G_rival}: MSE {r.mc_law:.4g} vs {r.mc_rival:.4g}, "
                                      f"{r.z:.1f} se" for r in sp.itertuples()))]
    return [
        check(f"every cell's Monte Carlo MSE within {Z_TOL:g} se of (c1 G + c2 + c3/(G-1))/N",
              len(lz) > 0 and bool((lz.max_abs_z <= Z_TOL).all()), lz.max_abs_z, rz,
              kind="statistical",
              excludes="the rival leading-order law (c1 G + c2 + c3/G)/N, without the +1",
              rival_se=rz, z_tol=Z_TOL,
              detail=", ".join(f"δ={r.delta}: largest |z| {r.max_abs_z:.2f}"
                               for r in lz.itertuples())),
        check(f"the rival leading-order law (c1 G + c2 + c3/G)/N beyond {Z_TOL:g} se in every "
              "member", len(lz) > 0 and bool((lz.rival_z > Z_TOL).all()), lz.rival_z,
              kind="statistical", excludes="the rival law (c1 G + c2 + c3/G)/N",
              rival_se=rz, z_tol=Z_TOL,
              detail=", ".join(f"δ={r.delta}: {r.rival_z:.1f}" for r in lz.itertuples())),
        check("exact integer argmin of the fixed-budget MSE = exact-form G* (every member)",
              len(c) > 0 and bool((c.int_argmin == c.G_exact).all()), c.int_argmin, c.G_exact,
              kind="exact", detail=", ".join(f"δ={r.delta}: {r.int_argmin} vs {r.G_exact}"
                               for r in c.itertuples())),
        check("exact argmin over the grid = grid argmin of the law (every member and N)",
              len(ex) > 0 and bool((ex.best_G == ex.G_grid).all()), ex.best_G, ex.G_grid,
              kind="exact", detail=", ".join(f"δ={r.delta} N={r.N}: {r.best_G} vs {r.G_grid}"
                               for r in ex.itertuples())),
        check("Monte Carlo argmin's bootstrap 95% CI contains the prediction (every member and N)",
              len(mc) > 0 and bool(mc.in_ci.all()), mc.ci_low, mc.ci_high, az,
              kind="statistical",
              excludes="the Monte Carlo argmin one grid step from the predicted G* (the "
              "neighbour closer in Monte Carlo MSE)",
              # a 95% bootstrap interval leaves a neighbour out about when its MSE lies beyond
              # z_value() se above the predicted G's
              rival_se=az, z_tol=float(z_value()),
              detail=", ".join(f"δ={r.delta} N={r.N}: [{r.ci_low}, {r.ci_high}] ∋ {r.G_grid}?"
                               for r in mc.itertuples())
              + f"; the nearer neighbour lies {az:.1f} se away or more"),
    ] + out


def _rho(x, y) -> str:
    """Spearman's rho (p-value) as report text; n/a below 3 distinct points."""
    r = spearman(x, y)
    return "n/a (< 3 members)" if np.isnan(r.rho) else f"{r.rho:.3f} (p = {r.pvalue:.2g})"


def _agreement(p: pd.DataFrame) -> pd.DataFrame:
    """Per source (and training bandit + LM together): Spearman and the share of CIs holding
    the prediction."""
    groups = list(p.groupby("source", sort=False))
    lm_train = p.source.str.startswith("lm:") & (p.source != "lm:mc")  # lm:mc is not training
    both = p[(p.source == "train_per_step") | lm_train]
    if both.source.str.startswith("lm:").any() and (both.source == "train_per_step").any():
        groups.append(("training at a fixed per-step budget: bandit members + LM settings", both))
    groups += mc_groups(p)
    return pd.DataFrame([{"source": name, "members": len(e),
                          "Spearman ρ (predicted, best G) (p-value)": _rho(e.G_pred, e.best_G),
                          "share of CIs containing the prediction": f"{e.in_ci.mean():.0%}"}
                         for name, e in groups])


def report(tables, s: Settings) -> Section:
    sm = summaries(tables, n_boot=s.n_boot, split=s.split)
    c, p = sm["constants"], sm["points"]
    const = pd.DataFrame({"δ": c.delta.map(str), "c1": c.c1, "c2": c.c2, "c3": c.c3,
                          "√(c3/c1)": c.G_paper, "1+√(c3/c1)": c.G_continuous,
                          "exact G*": c.G_exact, "integer argmin of N·MSE": c.int_argmin,
                          "grid prediction": c.G_grid, "G* at θ0": c.G_exact_initial})
    best = pd.DataFrame({"δ": p.delta.map(str), "source": (p.source + " " + p.label),
                         "N": p.N, "1+√(c3/c1)": p.G_pred, "grid prediction": p.G_grid,
                         "best G [95% CI]": [f"{r.best_G} [{r.ci_low}, {r.ci_high}]"
                                             for r in p.itertuples()],
                         "prediction in CI": p.in_ci.map({True: "PASS", False: "FAIL"})})
    lines = ["Scaling-law bandit with reward gap δ (`scaling_family_bandit(δ)`, at θ*; "
             "c1 ∝ δ², c3 ≈ const, so G* − 1 ∝ 1/δ).", "",
             markdown_table(const, {"√(c3/c1)": ".2f", "1+√(c3/c1)": ".2f"}), "",
             "**Best G by source** (exact: argmin of the exact MSE on the grid; mc: Monte "
             "Carlo argmin with a bootstrap 95% CI over replicates; train: Algorithm 1's best "
             "mean final gap with a bootstrap 95% CI over seeds):", "",
             markdown_table(best, {"1+√(c3/c1)": ".2f"}), "", markdown_table(_agreement(p))]
    lm_lines, lm_checks = lm_report(tables, s)
    lines += lm_lines + mc_report(tables) + noise_report(tables.get("lm_noise"), s.n_boot)
    tr = p[p.source.str.startswith("train")]
    miss = p[~p.in_ci]
    lines += ["", "Rows whose CI misses the prediction: " + (", ".join(
        f"{r.source} {r.label or f'δ={r.delta}'} (best {r.best_G} [{r.ci_low}, {r.ci_high}] "
        f"vs {r.G_grid if r.G_grid > 0 else round(r.G_pred, 1)})"
        for r in miss.itertuples()) or "none") + "."]
    lines += ["", f"Training agrees with the prediction (prediction inside the CI) in "
              f"{int(tr.in_ci.sum())} of {len(tr)} member/mode rows; this is measured, not "
              "gated. Where it fails, the reasons are the ones Theorem 7 does not cover: under a "
              "per-step budget the final gap is a noise floor ∝ η·MSE(B, G) only once θ is near "
              "θ*, and for small δ the N·MSE curve is nearly flat around G* (c2 dominates), so "
              "the seeds cannot resolve neighbouring G; under a total budget with B fixed, larger "
              "G means fewer, less noisy steps and the stationary floor keeps falling with G, so "
              "the best G there need not be G*.", "", "![](predicted_vs_best_G.png)"]
    return Section("The scaling law across a problem family (Theorem 7)", "\n".join(lines),
                   checks(sm) + lm_checks)


def plot(tables, s: Settings, out_dir) -> None:
    plot_points(summaries(tables, n_boot=s.n_boot)["points"], out_dir)


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=23)
