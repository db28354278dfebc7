r"""scaling-family's language-model analysis: the read step, best G per checkpoint, the LM rows.

The LM rows of the report (source ``lm:train``, :func:`lm_points`): the best G maximises the
mean J_p over seeds at the read step, its 95% CI resamples seeds within each G
(:func:`grpo_theory.experiments.stats.bootstrap_argmin`), the prediction is the concentration
knob's row at the same p. The read step is fixed per p by a rule that does not look at
differences between G (:func:`read_step`): with g(t) the mean over all runs (every G and seed)
of J_p(t) − J_p(0), it is the first checkpoint with g(t) >= g(T)/2, T the last checkpoint, or T
when g(T) <= 0 (read at the end of a concentrated run, J_p is saturated at every G and best G
would measure only the drift of the held-out share). The report also gives best G at every
checkpoint (:func:`lm_checkpoint_table`) and, for p > 0, the steps until V(x_F) >= 0.9
(:func:`lm_reach`, interpolated, lower is better).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import grpo_theory as gt
from grpo_theory.core import grid_argmin
from grpo_theory.experiments import bootstrap_argmin, check

__all__ = ["read_step", "steps_to_reach", "lm_checkpoint_table", "lm_reach", "lm_points",
           "lm_report"]


def read_step(runs: pd.DataFrame) -> int:
    """The checkpoint at which an LM setting's best G is read, fixed before comparing G.

    Rule (independent of G, so not chosen from the G-differences): with the gain
    ``g(t) = mean over all runs (every G and seed) of J_p(t) - J_p(0)``, the read step is the
    first checkpoint t > 0 with ``g(t) >= g(T)/2``, T the last checkpoint (the half-rise of the
    across-G mean objective); when ``g(T) <= 0`` (no mean gain) it is T.

    Args:
        runs: the ``lm_train`` rows of one (p, N) (columns ``step``, ``J_mix``).
    Returns:
        The read step (an int checkpoint).
    """
    if not len(runs):
        raise ValueError("runs must hold at least one lm_train row")
    g = runs.groupby("step").J_mix.mean()
    if 0 not in g.index:
        raise ValueError("runs must hold step 0 (the starting policy)")
    g = g - g.loc[0]
    last = int(g.index.max())
    if g.loc[last] <= 0:
        return last
    return int(g[(g.index > 0) & (g >= g.loc[last] / 2)].index.min())


def steps_to_reach(steps, values, level: float = 0.9) -> float:
    """First step at which ``values`` reaches ``level``, linearly interpolated between
    checkpoints (``values[0] >= level``: ``steps[0]``; never reached: inf).

    Args:
        steps: increasing checkpoint steps; values: the measured quantity at those steps.
        level: the threshold.
    Returns:
        The interpolated step (float).
    """
    t, v = np.asarray(steps, np.float64), np.asarray(values, np.float64)
    if t.shape != v.shape or t.ndim != 1 or not len(t):
        raise ValueError(f"steps and values must be 1-d of one non-zero length, got {t.shape} "
                         f"and {v.shape}")
    if np.any(np.diff(t) <= 0):
        raise ValueError("steps must be strictly increasing")
    hit = np.flatnonzero(v >= level)
    if not len(hit):
        return float("inf")
    j = int(hit[0])
    if j == 0:
        return float(t[0])
    return float(t[j - 1] + (level - v[j - 1]) / (v[j] - v[j - 1]) * (t[j] - t[j - 1]))


def _best_g(acc: pd.DataFrame, seed: int, n_boot: int) -> dict:
    """Best G of a G x seed table (maximised; :func:`bootstrap_argmin` of the negated values,
    seeds resampled within each G); seeds with a gap dropped; {} below 2 G or no seed."""
    acc = acc.dropna(axis=1)
    if acc.shape[1] == 0 or acc.shape[0] < 2:
        return {}
    b = bootstrap_argmin({int(g): -acc.loc[g].to_numpy(np.float64) for g in acc.index},
                         n_boot=n_boot, seed=seed)
    return dict(best=int(b.best), lo=int(b.lo), hi=int(b.hi), p_best=b.p_best,
                seeds=int(acc.shape[1]))


def lm_checkpoint_table(tables, n_boot: int = 2000) -> pd.DataFrame:
    """Best G of every trained LM concentration at every checkpoint (as lm-groupsize).

    Returns:
        DataFrame ``p, N, step, seeds, best_G, ci_low, ci_high, p_best, gain, V_fixed,
        mean_by_G`` (gain: across-G mean of J_p(step) - J_p(0); V_fixed: its mean over runs).
    """
    cols = ["p", "N", "step", "seeds", "best_G", "ci_low", "ci_high", "p_best", "gain",
            "V_fixed", "mean_by_G"]
    tr = tables["lm_train"]
    out = []
    for (p, N), e in tr.groupby(["p", "N"]):
        j0 = e[e.step == 0].J_mix.mean()
        for step, d in e[e.step > 0].groupby("step"):
            acc = d.pivot_table(index="G", columns="run_seed", values="J_mix")
            bs = _best_g(acc, int(N) + int(round(1000 * p)) + int(step), n_boot)
            if not bs:
                continue
            out.append(dict(p=float(p), N=int(N), step=int(step), seeds=bs["seeds"],
                            best_G=bs["best"], ci_low=bs["lo"], ci_high=bs["hi"],
                            p_best=bs["p_best"], gain=float(d.J_mix.mean() - j0),
                            V_fixed=float(d.V_fixed.mean()),
                            mean_by_G={int(g): float(a) for g, a in acc.mean(axis=1).items()}))
    return pd.DataFrame(out, columns=cols)


def lm_reach(tables, level: float = 0.9, n_boot: int = 2000) -> pd.DataFrame:
    """Steps until the fixed question's pass rate reaches ``level`` (:func:`steps_to_reach`,
    lower is better), per concentrated run; best G (smallest mean over seeds; a G with a run
    that never reaches it has mean inf) with a bootstrap 95% CI over seeds.

    Returns:
        DataFrame ``p, N, best_G, ci_low, ci_high, mean_by_G, reached`` (reached: runs that got
        there / runs); one row per (p > 0, N).
    """
    cols = ["p", "N", "best_G", "ci_low", "ci_high", "mean_by_G", "reached"]
    tr = tables["lm_train"]
    out = []
    for (p, N), e in tr[tr.p > 0].groupby(["p", "N"]):
        hits = [dict(G=int(G), run_seed=int(r), t=steps_to_reach(d.step, d.V_fixed, level))
                for (G, r), d in e.sort_values("step").groupby(["G", "run_seed"])]
        h = pd.DataFrame(hits).pivot_table(index="G", columns="run_seed", values="t",
                                           dropna=False)
        bs = _best_g(-h, int(N) + int(round(1000 * p)) + 7, n_boot)
        if not bs:
            continue
        fin = np.isfinite(h.to_numpy())
        out.append(dict(p=float(p), N=int(N), best_G=bs["best"], ci_low=bs["lo"],
                        ci_high=bs["hi"], reached=f"{int(fin.sum())}/{fin.size}",
                        mean_by_G={int(g): float(a) for g, a in h.mean(axis=1).items()}))
    return pd.DataFrame(out, columns=cols)


def lm_points(tables, n_boot: int = 2000) -> pd.DataFrame:
    """Predicted and best G of every trained LM concentration, read at :func:`read_step`.

    The best G maximises the mean over seeds of the mixture's exact objective ``J_p`` at the
    read step; its 95% CI resamples seeds within each G
    (:func:`_best_g`). The prediction is the
    ``concentration`` knob row at the same p (c1, c2, c3 at the instruct policy):
    ``G_pred = 1 + sqrt(c3/c1)`` and ``G_grid``, the law's argmin on the trained grid.

    Returns:
        DataFrame ``p, N, G_pred, G_grid, best_G, ci_low, ci_high, seeds, p_best, step,
        last_step, last_best_G, last_ci_low, last_ci_high`` (step: the read step; last_*: the
        same at the last checkpoint); empty when there is no run.
    """
    cols = ["p", "N", "G_pred", "G_grid", "best_G", "ci_low", "ci_high", "seeds", "p_best",
            "step", "last_step", "last_best_G", "last_ci_low", "last_ci_high"]
    tr, kn = tables["lm_train"], tables["lm_knob"]
    if not len(tr):
        return pd.DataFrame(columns=cols)
    kn = kn[kn.knob == "concentration"]
    ck = lm_checkpoint_table(tables, n_boot)
    out = []
    for (p, N), e in tr.groupby(["p", "N"]):
        k = kn[np.isclose(kn.value.astype(float), p)]
        c = ck[(ck.p == p) & (ck.N == N)].set_index("step")
        if not len(k) or not len(c) or 0 not in set(e.step):
            continue
        rs, last = read_step(e), int(c.index.max())
        if rs not in c.index:
            continue
        k, r, z = k.iloc[0], c.loc[rs], c.loc[last]
        grid = sorted(int(g) for g in r.mean_by_G)
        const = gt.ScalingConstants(float(k.c1), float(k.c2), float(k.c3))
        out.append(dict(p=float(p), N=int(N), G_pred=float(k.G_continuous),
                        G_grid=grid_argmin(const, grid), best_G=int(r.best_G),
                        ci_low=int(r.ci_low), ci_high=int(r.ci_high), seeds=int(r.seeds),
                        p_best=float(r.p_best), step=rs, last_step=last,
                        last_best_G=int(z.best_G), last_ci_low=int(z.ci_low),
                        last_ci_high=int(z.ci_high)))
    return pd.DataFrame(out, columns=cols)


def lm_report(tables, s) -> tuple[list, list]:
    """The LM part's markdown (knob table, training table) and its checks."""
    kn, tr = tables["lm_knob"], tables["lm_train"]
    if s.lm is None and not len(kn) and not len(tr):
        if not len(tables["lm"]):
            return ["", "No language-model settings in this run (no LM cells in this "
                    "setting)."], []
        return [], []
    lines = ["", "**Language model** (the small transformer's instruct policy, lm-mse's warm-up; "
             "knob candidates measured there, the concentration p trained):", "",
             "| knob | value | method | c1 | c3 | G* = 1+√(c3/c1) [95% CI] | J |",
             "|---|---|---|---|---|---|---|"]
    for r in kn.itertuples():
        ci = (f" [{r.G_ci_low:.1f}, {r.G_ci_high:.1f}]" if np.isfinite(r.G_ci_low) else "")
        lines.append(f"| {r.knob} | {r.value} | {r.method} | {r.c1:.4g} | {r.c3:.4g} | "
                     f"{r.G_continuous:.1f}{ci} | {r.J:.3f} |")
    conc = kn[kn.knob == "concentration"]
    if len(conc):
        r0 = conc.iloc[0]
        lines += ["", f"Concentration: mass p on the fixed question `{r0.fixed}` (pass rate "
                  f"{r0.V_fixed:.3f} at the instruct policy, the closest to 1/2 of "
                  f"{s.lm.n_candidates if s.lm else 'the'} candidates), 1 − p on "
                  f"{int(r0.n_questions)} held-out questions; J is the mixture's objective."]
    pts = lm_points(tables, s.n_boot)
    ok_ps = [float(p) for p in (s.lm.ps if s.lm else ())]
    if len(tr):
        ck = lm_checkpoint_table(tables, s.n_boot)
        gs = sorted(int(g) for g in tr.G.unique())
        lines += ["", f"GRPO training (Algorithm 1, Adam) at N = {int(tr.N.iloc[0])}, 95% "
                  "bootstrap CIs over seeds. The step at which best G is read is fixed by a "
                  "rule that does not look at G (`read_step`): the first checkpoint where the "
                  "across-G mean gain of J_p over step 0 reaches half of its gain at the last "
                  "checkpoint (the last checkpoint when that gain is <= 0).", "",
                  "| p | seeds | predicted G* | grid prediction | read step | best G [95% CI] "
                  "at the read step | prediction in CI | best G [95% CI] at the last step |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in pts.itertuples():
            inside = r.ci_low <= r.G_grid <= r.ci_high
            lines.append(f"| {r.p:g} | {r.seeds} | {r.G_pred:.1f} | {r.G_grid} | {r.step} of "
                         f"{r.last_step} | {r.best_G} [{r.ci_low}, {r.ci_high}] | "
                         f"{'PASS' if inside else 'FAIL'} | {r.last_best_G} [{r.last_ci_low}, "
                         f"{r.last_ci_high}] |")
        lines += ["", f"Per checkpoint (mean J_p over seeds by G = {', '.join(map(str, gs))}; "
                  "gain: across-G mean of J_p − J_p(0); V(x_F): mean pass rate of the fixed "
                  "question; checkpoints up to 20 and every 10th shown, the read step in "
                  "bold):", "",
                  "| p | step | gain | V(x_F) | mean J_p by G | best G [95% CI] | grid prediction "
                  "in CI |", "|---|---|---|---|---|---|---|"]
        for r in pts.itertuples():
            for c in ck[(ck.p == r.p) & (ck.N == r.N)].itertuples():
                if not (c.step <= 20 or c.step % 10 == 0 or c.step == r.step):
                    continue
                st = f"**{c.step}**" if c.step == r.step else str(c.step)
                accs = " ".join(f"{c.mean_by_G.get(g, float('nan')):.3f}" for g in gs)
                inside = c.ci_low <= r.G_grid <= c.ci_high
                lines.append(f"| {r.p:g} | {st} | {c.gain:+.3f} | {c.V_fixed:.3f} | {accs} | "
                             f"{c.best_G} [{c.ci_low}, {c.ci_high}] | "
                             f"{'PASS' if inside else 'FAIL'} |")
        reach = lm_reach(tables, 0.9, s.n_boot)
        if len(reach):
            lines += ["", "A metric closer to the fixed question's learning speed (`lm_reach`): "
                      "steps until its pass rate V(x_F) reaches 0.9, interpolated between "
                      "checkpoints, lower is better (inf: a run that never reaches it).", "",
                      f"| p | runs reaching 0.9 | mean steps by G = {', '.join(map(str, gs))} | "
                      "best G [95% CI] | grid prediction in CI |", "|---|---|---|---|---|"]
            for r in reach.itertuples():
                gp = pts[pts.p == r.p].G_grid
                inside = ("PASS" if len(gp) and r.ci_low <= int(gp.iloc[0]) <= r.ci_high
                          else "FAIL" if len(gp) else "n/a")
                m = " ".join(f"{r.mean_by_G.get(g, float('nan')):.1f}" for g in gs)
                lines.append(f"| {r.p:g} | {r.reached} | {m} | {r.best_G} [{r.ci_low}, "
                             f"{r.ci_high}] | {inside} |")
        lines += ["", "Reading the LM rows (a CI that holds the prediction is agreement only "
                  "when it is narrow):"]
        for r in pts.itertuples():
            c = ck[(ck.p == r.p) & (ck.N == r.N)].set_index("step")
            n_in = sum(r.ci_low <= g <= r.ci_high for g in gs)
            last = c.loc[r.last_step]
            held = ("contains" if r.ci_low <= r.G_grid <= r.ci_high else "misses")
            rc = reach[reach.p == r.p] if len(reach) else reach
            hit = (f"; mean steps to V(x_F) >= 0.9 from {min(rc.mean_by_G.iloc[0].values()):.1f}"
                   f" to {max(rc.mean_by_G.iloc[0].values()):.1f} across G" if len(rc) else "")
            lines.append(f"- p = {r.p:g}: read at step {r.step} (gain {c.loc[r.step].gain:+.3f}"
                         f" of {last.gain:+.3f} at step {r.last_step}; V(x_F) "
                         f"{c.loc[r.step].V_fixed:.3f}, {last.V_fixed:.3f} at the end{hit}); the "
                         f"CI [{r.ci_low}, {r.ci_high}] covers {n_in} of {len(gs)} grid values "
                         f"and {held} the grid prediction {r.G_grid}.")
    pr = conc[np.isin(np.round(conc.value.astype(float), 9), np.round(ok_ps, 9))]
    span = (float(pr.G_continuous.max() / pr.G_continuous.min()) if len(pr) else float("nan"))
    ch = [check("LM: c1 > 0 (finite G*) at every trained concentration",
                len(pr) > 0 and bool((pr.c1 > 0).all()), pr.c1,
                kind="sanity",
                detail=", ".join(f"p={r.value}: c1={r.c1:.3g}" for r in pr.itertuples())),
          check("LM: the trained concentrations' predicted G* span a factor >= 4",
                len(pr) > 0 and span >= 4, span,
                kind="sanity",
                detail=f"G* {pr.G_continuous.min():.1f} to {pr.G_continuous.max():.1f} "
                       f"(x{span:.1f})" if len(pr) else "no prediction"),
          check("LM: every J_p is a probability", len(tr) > 0 and bool(tr.J_mix.between(0,
                1).all()), tr.J_mix.to_numpy(), kind="sanity", detail=f"{len(tr)} values")]
    return lines, ch
