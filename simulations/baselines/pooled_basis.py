r"""BASIS under the scaling law at a fixed budget (the ``pooled_basis`` table).

BASIS's baseline for a response of prompt x is the mean of the *other* prompts' group means
(:func:`grpo_theory.core.baselines.basis`), so it is defined at any G, one response a prompt
included, and its MSE at a budget of N responses depends on B = N/G as well as G. On each member
of the scaling family (:func:`grpo_theory.problems.scaling_family_bandit`) and for every G of the
grid and G = 1, the exact MSE of BASIS (the pooled route of
:func:`grpo_theory.core.batch_moments`: a dynamic programme over the law of the other groups'
summed means), of leave-one-out (G >= 2) and of no baseline (``vanilla``, the rival: pooling
doing nothing), with B = N/G prompts drawn independently; Monte Carlo
(:func:`grpo_theory.mc_mse`) at BASIS's best G.
"""

from __future__ import annotations

import pandas as pd

import grpo_theory as gt
from grpo_theory.core import batch_moments
from grpo_theory.experiments import Cell, Check, check, key_seed, markdown_table
from grpo_theory.problems import scaling_family_bandit

SCHEMA = dict(delta="float", N="int", G="int", B="int", estimator="str", exact_mse="float",
              route="str", mc="float?", mc_se="float?", z="float?", rival_z="float?")

#: the estimators of the table: BASIS, leave-one-out (G >= 2) and the rival, no baseline
NAMES = ("basis", "grpo", "vanilla")


def pooled_basis_cells(deltas, budget: int, sizes, n_reps: int) -> list[Cell]:
    """One cell per member (delta) of the scaling family."""
    grid = sorted({1, *(int(g) for g in sizes)})
    return [Cell(f"pooled_basis_d{d:g}", dict(pooled_basis=True, delta=float(d), N=int(budget),
                                              sizes=grid, n_reps=int(n_reps)),
                 kind="pooled_basis") for d in deltas]


def pooled_basis_rows(config: dict, key) -> list[dict]:
    """Exact MSE of BASIS, leave-one-out and no baseline at every G of ``config["sizes"]``
    (``B = N // G``), and Monte Carlo of BASIS at its best G (its z against its exact MSE, and
    the rival's: no baseline's exact MSE at the same B and G)."""
    d, N = config["delta"], config["N"]
    bandit = scaling_family_bandit(d)
    rows = []
    for G in config["sizes"]:
        B = N // G
        for name in NAMES:
            if G < gt.get_estimator(name).min_group_size:  # leave-one-out needs G >= 2
                continue
            bm = batch_moments(bandit, name, G, B)
            rows.append(dict(delta=float(d), N=N, G=int(G), B=int(B), estimator=name,
                             exact_mse=bm.mse, route=bm.route, mc=None, mc_se=None, z=None,
                             rival_z=None))
    best = min((r for r in rows if r["estimator"] == "basis"), key=lambda r: r["exact_mse"])
    rival = next(r for r in rows if r["estimator"] == "vanilla" and r["G"] == best["G"])
    mc = gt.mc_mse(bandit, "basis", best["G"], best["B"], n_reps=config["n_reps"],
                   seed=key_seed(key))
    best.update(mc=mc.value, mc_se=mc.se, z=(mc.value - best["exact_mse"]) / mc.se,
                rival_z=(rival["exact_mse"] - mc.value) / mc.se)
    return rows


def best_sizes(pb: pd.DataFrame) -> pd.DataFrame:
    """Per member: the best G of BASIS and of leave-one-out, and BASIS's MSE at its best G over
    leave-one-out's at its best."""
    best = pb.loc[pb[pb.estimator != "vanilla"].groupby(["delta", "estimator"]).exact_mse.idxmin()]
    g = best.pivot_table(index="delta", columns="estimator", values="G")
    low = best.pivot_table(index="delta", columns="estimator", values="exact_mse")
    out = pd.DataFrame({"delta": g.index, "best G, leave-one-out": g.grpo.to_numpy(),
                        "best G, BASIS": g.basis.to_numpy(),
                        "BASIS's MSE at its best G ÷ leave-one-out's at its":
                        (low.basis / low.grpo).to_numpy()})
    return out.sort_values("delta", ascending=False)


def pooled_basis_checks(pb) -> list[Check]:
    """Monte Carlo at BASIS's best G agrees with its exact MSE; no baseline's MSE lies beyond."""
    name = ("BASIS under pooling: Monte Carlo within 4 se of its exact MSE at its best G "
            "(the pooled route); no baseline's MSE at the same (B, G) beyond 4 se")
    if pb is None or not len(pb):
        return [check(name, False, None, kind="statistical",
                      excludes="pooling doing nothing (the MSE without a baseline at the same B "
                      "and G)", rival_se=float("nan"), z_tol=4, detail="no pooled_basis rows")]
    mc = pb[pb.mc.notna()]
    max_z, min_rival = float(mc.z.abs().max()), float(mc.rival_z.abs().min())
    return [check(name, max_z <= 4 and min_rival > 4, max_z, min_rival, kind="statistical",
                  excludes="pooling doing nothing (the MSE without a baseline at the same B "
                  "and G)", rival_se=min_rival, z_tol=4,
                  detail=f"largest abs z {max_z:.2f} over {len(mc)} members; the rival lies "
                         f"{min_rival:.1f} se away or more")]


def pooled_basis_lines(pb) -> list[str]:
    """The report's paragraph and tables (none without rows)."""
    if pb is None or not len(pb):
        return []
    N = int(pb.N.iloc[0])
    w = pb[pb.estimator == "basis"].pivot_table(index="delta", columns="G",
                                                values="exact_mse").reset_index()
    w = w.sort_values("delta", ascending=False)
    w.iloc[:, 1:] = w.iloc[:, 1:] * N
    w.columns = ["delta"] + [f"G = {c}" for c in w.columns[1:]]
    best = best_sizes(pb)
    return [f"**BASIS under the scaling law** (the scaling family, a budget of N = {N} responses, "
            "B = N/G prompts drawn independently; exact, the pooled route; G = 1 is one "
            "response a prompt). N × MSE of BASIS at each G:", "",
            markdown_table(w, {c: ".4f" for c in w.columns[1:]}), "", "Best G of the grid:", "",
            markdown_table(best, {"best G, leave-one-out": ".0f", "best G, BASIS": ".0f",
                                  "BASIS's MSE at its best G ÷ leave-one-out's at its": ".3f"}),
            "",
            "BASIS's baseline is the other prompts' mean, whose error shrinks with B, not G; "
            "its best G at this budget is "
            + ("1 (one response a prompt) on every member" if (best["best G, BASIS"] == 1).all()
               else "1 on the members " + ", ".join(
                   f"{d:g}" for d in best.delta[best["best G, BASIS"] == 1]) + " only")
            + ", against leave-one-out's "
            + ", ".join(f"{int(g)}" for g in best["best G, leave-one-out"]) + ".", ""]
