"""The PASS rule, report section and figure of ``baselines`` (its :mod:`.study`).

:func:`summary` reduces the three tables to the numbers the checks read; :func:`checks`
evaluates the criteria of the study's docstring; :func:`report` and :func:`plot` write the
section and the figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from grpo_theory.plotting import plt, save_figure
from grpo_theory.experiments import Check, Section, check, markdown_table

from .history_path import path_checks, path_lines
from .lm_training import lm_training_lines
from .pooled_basis import pooled_basis_checks, pooled_basis_lines

Z_TOL = 4.0
#: the baselines that contain the response's own reward
SELF_INCLUSIVE = ("grpo_mean", "jspo_pooled", "norm_weighted", "reinforce_plus_plus_baseline_verl",
                  "spo")
UNBIASED = ("grpo", "jspo", "norm_weighted_loo", "spo_raw")
#: a rival counts for the Monte Carlo check's power only where its MSE differs by this share
RIVAL_GAP = 0.05
#: JSPO's claim to beat leave-one-out is made for groups up to this size (its estimated
#: shrinkage can lose at larger G: the full setting has a cell at G = 8 where it does)
SMALL_G = 4
#: the history and cross-prompt baselines of the ``history`` table (unbiased given the state)
#: and their self-inclusive rivals
HISTORY = ("ebpo", "dbb", "kae", "basis")
HISTORY_RIVALS = ("ebpo_self_inclusive", "basis_self_inclusive")


def _mx(col, fn=np.max) -> float:
    """``fn`` of a column, NaN when it is empty or holds a NaN (a missing number stays missing)."""
    a = col.to_numpy(dtype=float)
    return float(fn(a)) if a.size else np.nan


def summary(tables) -> dict:
    """The numbers the checks read (a dict of floats) and the tables the report shows.

    Args:
        tables: the experiment's tables (``table``, ``brute``, ``kept``).
    Returns:
        A dict.
    """
    df, br, kp = tables["table"], tables["brute"], tables["kept"]
    mc = df[df.design == "independent"]
    rival = mc[(mc.estimator != "grpo") & ((mc.ratio_loo - 1).abs() > RIVAL_GAP)]
    unb = df[df.estimator.isin(UNBIASED)]
    inc = df[df.estimator.isin(SELF_INCLUSIVE)]
    js = df[df.estimator == "jspo"]
    pl, pr = tables["pooled"], tables["pooled_route"]
    pmc = pl[pl.mc.notna()] if len(pl) else pl
    prival = pmc[(pmc.ratio_loo - 1).abs() > RIVAL_GAP] if len(pmc) else pmc
    best = _best_sizes(pl)
    sp = tables["spo_path"]
    moved = sp[sp.step > 0] if len(sp) else sp
    return dict(**_history_summary(tables.get("history"), tables.get("history_brute")),
        spo_route_err=_mx(sp.route_err), spo_rival_err=_mx(moved.rival_err, np.min),
        n_spo=int(len(sp)), spo_path=sp,
        pooled_route_err=_mx(pr.rel_err), pooled_route_rival=_mx(pr.rival_rel_err, np.min),
        n_pooled_route=int(len(pr)),
        pooled_max_z=_mx(pmc.z.abs()) if len(pmc) else np.nan,
        pooled_min_rival_z=_mx(prival.rival_z.abs(), np.min) if len(prival) else np.nan,
        n_pooled_mc=int(len(pmc)), n_pooled_rival=int(len(prival)),
        pooled_best=best,
        pooled_moves=bool(len(best) and (best.jspo <= best.grpo).all()
                          and (best.jspo < best.grpo).any()),
        brute_max_err=_mx(br.rel_err),
        brute_rival_min=_mx(br.rival_rel_err, np.min),
        n_brute=int(len(br)),
        max_abs_z=_mx(mc.z.abs()),
        min_rival_z=_mx(rival.rival_z.abs(), np.min),
        n_rival=int(len(rival)), n_mc=int(len(mc)),
        unbiased_max_bias=_mx(unb.relative_bias),
        biased_min_bias=_mx(inc.relative_bias, np.min),
        jspo_max_ratio=_mx(js[js.G <= SMALL_G].ratio_loo),
        jspo_min_ratio=_mx(js[js.G <= SMALL_G].ratio_loo, np.min),
        jspo_large=js[js.G > SMALL_G],
        n_cells=int(len(df.groupby(["problem", "G"]))) if len(df) else 0,
        table=df, kept=kp, pooled=pl)


def _history_summary(hs, hb) -> dict:
    """The numbers of the ``history`` and ``history_brute`` tables the checks read."""
    hs = hs if hs is not None else pd.DataFrame(columns=["estimator", "mc", "z", "rival_z",
                                                         "ratio_loo", "relative_bias"])
    hb = hb if hb is not None else pd.DataFrame(columns=["rel_err", "rival_rel_err"])
    hm = hs[hs.mc.notna()]
    rival = hm[(hm.ratio_loo - 1).abs() > RIVAL_GAP]
    return dict(
        history=hs, n_history_brute=int(len(hb)), history_brute_err=_mx(hb.rel_err),
        history_brute_rival=_mx(hb.rival_rel_err, np.min),
        history_max_z=_mx(hm.z.abs()), n_history_mc=int(len(hm)),
        history_min_rival_z=_mx(rival.rival_z.abs(), np.min), n_history_rival=int(len(rival)),
        history_unbiased_max=_mx(hs[hs.estimator.isin(HISTORY)].relative_bias),
        history_rival_min_bias=_mx(hs[hs.estimator.isin(HISTORY_RIVALS)].relative_bias,
                                   np.min))


def _history_checks(s: dict) -> list[Check]:
    """The checks of the ``history`` table: exact routes, Monte Carlo, unbiasedness."""
    return [
        check("EBPO, DBB, KAE and BASIS: count states = brute-force enumeration at a sampled "
              "state (1e-9); the state ignored (BASIS: its self-inclusive form) is off",
              s["history_brute_err"] <= 1e-9 and s["history_brute_rival"] > 1e-3,
              s["history_brute_err"], s["history_brute_rival"], kind="exact",
              detail=f"{s['n_history_brute']} estimators, largest relative error "
                     f"{s['history_brute_err']:.1e}; the rival is off by "
                     f"{s['history_brute_rival']:.3f} or more"),
        check(f"history baselines: Monte Carlo at the sampled state within {Z_TOL:g} se of the "
              f"exact MSE; leave-one-out's MSE in its place beyond {Z_TOL:g} se",
              s["history_max_z"] <= Z_TOL and s["history_min_rival_z"] > Z_TOL
              and s["n_history_rival"] > 0, s["history_max_z"], s["history_min_rival_z"],
              kind="statistical", excludes="the estimator having leave-one-out's MSE",
              rival_se=s["history_min_rival_z"], z_tol=Z_TOL,
              detail=f"largest abs z {s['history_max_z']:.2f} over {s['n_history_mc']} rows; "
                     f"the rival lies {s['history_min_rival_z']:.1f} se away or more "
                     f"({s['n_history_rival']} rows whose MSE differs from leave-one-out's by "
                     f"more than {RIVAL_GAP:.0%})"),
        check("EBPO, DBB, KAE (given the state) and BASIS are unbiased (1e-12); EBPO's prior "
              "updated with the current batch and BASIS's mean over all prompts are biased "
              "(> 1e-3)", s["history_unbiased_max"] <= 1e-12
              and s["history_rival_min_bias"] > 1e-3, s["history_unbiased_max"],
              s["history_rival_min_bias"], kind="exact",
              detail=f"largest relative bias of the four {s['history_unbiased_max']:.1e}; "
                     f"smallest of the self-inclusive rivals {s['history_rival_min_bias']:.4f}"),
    ]


def _history_lines(hs: pd.DataFrame) -> list[str]:
    """The report's paragraph on the history and cross-prompt baselines."""
    if not len(hs):
        return []
    r0 = hs.iloc[0]
    w = hs.pivot_table(index=["problem", "rates"], columns="estimator", values="ratio_loo",
                       sort=False).reset_index()
    w = w[["problem", "rates", *[n for n in HISTORY + HISTORY_RIVALS if n in w.columns]]]
    b = hs[hs.estimator.isin(HISTORY_RIVALS)].pivot_table(
        index="problem", columns="estimator", values="relative_bias", sort=False).reset_index()
    return [f"**History and cross-prompt baselines** (B = {int(r0.B)} prompts drawn "
            f"independently, G = {int(r0.G)}; EBPO, DBB and KAE at the state their own update "
            f"reaches after {int(r0.steps)} sampled steps at the policy; exact given the state, "
            "Monte Carlo beside the four). MSE ÷ leave-one-out's MSE:", "",
            markdown_table(w, {c: ".3f" for c in w.columns if c not in ("problem", "rates")}),
            "", "Relative bias of the self-inclusive rivals:", "",
            markdown_table(b, {c: ".4f" for c in b.columns if c != "problem"}), "",
            "All four exclude the response's own reward from its baseline and are unbiased "
            "(given the state); a prior updated with the current batch before the advantage "
            "(EBPO's rival) or the mean over all prompts (BASIS's) is biased.", ""]


def _best_sizes(pl: pd.DataFrame) -> pd.DataFrame:
    """Per member (delta): leave-one-out's G*, and the best G of the grid of each estimator."""
    if not len(pl):
        return pd.DataFrame(columns=["delta", "N", "g_star_loo", "grpo", "jspo", "gain"])
    best = pl.loc[pl.groupby(["delta", "estimator"]).exact_mse.idxmin()]
    wide = best.pivot_table(index=["delta", "N", "g_star_loo"], columns="estimator",
                            values="G").reset_index()
    low = best.pivot_table(index="delta", columns="estimator", values="exact_mse")
    wide["gain"] = (low.jspo / low.grpo).reindex(wide.delta).to_numpy()
    return wide.sort_values("delta", ascending=False)


def checks(s: dict) -> list[Check]:
    """The PASS rule of the study's docstring as checks on :func:`summary`.

    Args:
        s: :func:`summary` of the tables.
    Returns:
        A list of :class:`~grpo_theory.experiments.runner.Check`.
    """
    return [
        check("count states = brute-force enumeration, every estimator, both designs (1e-9)",
              s["brute_max_err"] <= 1e-9 and s["brute_rival_min"] > 1e-3, s["brute_max_err"],
              s["brute_rival_min"], kind="exact",
              detail=f"{s['n_brute']} comparisons, largest relative error "
                     f"{s['brute_max_err']:.1e}; the rival (JSPO++'s route against JSPO's "
                     f"enumeration and the reverse) is off by {s['brute_rival_min']:.2f} or more"),
        check(f"Monte Carlo within {Z_TOL:g} se of every exact MSE; leave-one-out's MSE in its "
              f"place beyond {Z_TOL:g} se", s["max_abs_z"] <= Z_TOL and s["min_rival_z"] > Z_TOL,
              s["max_abs_z"], s["min_rival_z"], kind="statistical",
              excludes="the estimator having leave-one-out's MSE (the rival exact value)",
              rival_se=s["min_rival_z"], z_tol=Z_TOL,
              detail=f"largest abs z {s['max_abs_z']:.2f} over {s['n_mc']} rows; the rival lies "
                     f"{s['min_rival_z']:.1f} se away or more ({s['n_rival']} rows whose MSE "
                     f"differs from leave-one-out's by more than {RIVAL_GAP:.0%})"),
        check("leave-one-out, JSPO, the leave-one-out weighted baseline and SPO's raw advantage "
              "are unbiased (1e-12); every self-inclusive (or batch-whitened) baseline is biased "
              "in every cell (> 1e-3)",
              s["unbiased_max_bias"] <= 1e-12 and s["biased_min_bias"] > 1e-3,
              s["unbiased_max_bias"], s["biased_min_bias"], kind="exact",
              detail=f"largest relative bias of the unbiased {s['unbiased_max_bias']:.1e}; "
                     f"smallest of the self-inclusive {s['biased_min_bias']:.3f}"),
        check("pooled route = counts route for JSPO (1e-10); leave-one-out's MSE in its place "
              "is off", s["pooled_route_err"] <= 1e-10 and s["pooled_route_rival"] > 1e-3,
              s["pooled_route_err"], s["pooled_route_rival"], kind="exact",
              detail=f"{s['n_pooled_route']} members at B = 3, G = 4, largest relative error "
                     f"{s['pooled_route_err']:.1e}; the rival is off by "
                     f"{s['pooled_route_rival']:.2f} or more"),
        check(f"the pooled law at a fixed budget: Monte Carlo within {Z_TOL:g} se of JSPO's exact "
              f"MSE at each best G; leave-one-out's law at the same (B, G) beyond {Z_TOL:g} se",
              s["pooled_max_z"] <= Z_TOL and s["pooled_min_rival_z"] > Z_TOL
              and s["n_pooled_rival"] > 0, s["pooled_max_z"], s["pooled_min_rival_z"],
              kind="statistical", excludes="pooling leaving the MSE at leave-one-out's law "
              "(its exact MSE at the same B and G)", rival_se=s["pooled_min_rival_z"],
              z_tol=Z_TOL,
              detail=f"largest abs z {s['pooled_max_z']:.2f} over {s['n_pooled_mc']} points; "
                     f"the rival lies {s['pooled_min_rival_z']:.1f} se away or more "
                     f"({s['n_pooled_rival']} points whose MSE differs by more than "
                     f"{RIVAL_GAP:.0%})"),
        check("SPO given its tracker along a drifting policy: the closed form = batch_moments "
              "at the tracker's state (1e-10); the tracker ignored is off",
              s["spo_route_err"] <= 1e-10 and s["spo_rival_err"] > 1e-3, s["spo_route_err"],
              s["spo_rival_err"], kind="exact",
              detail=f"{s['n_spo']} steps, largest relative error {s['spo_route_err']:.1e}; "
                     "the rival (the moments at the initial tracker) is off by "
                     f"{s['spo_rival_err']:.2f} or more after the first step"),
        check("pooling moves G*: JSPO's best G at a fixed budget is at most leave-one-out's on "
              "every member and below it on one at least", s["pooled_moves"], kind="sanity",
              detail="best G (grid) by member: " + "; ".join(
                  f"delta {r.delta:g}: {int(r.grpo)} -> {int(r.jspo)}"
                  for r in s["pooled_best"].itertuples())),
        check(f"JSPO's MSE below leave-one-out's in every cell with G <= {SMALL_G}, both designs "
              "(exact)", s["jspo_max_ratio"] < 1, s["jspo_max_ratio"], kind="exact",
              detail=f"MSE ratio to leave-one-out from {s['jspo_min_ratio']:.3f} to "
                     f"{s['jspo_max_ratio']:.3f} at G <= {SMALL_G}; " + _large_detail(
                         s["jspo_large"])),
    ] + _history_checks(s)


def _large_detail(large: pd.DataFrame) -> str:
    """JSPO against leave-one-out at the larger G: its range and the cells where it loses."""
    if not len(large):
        return f"no cell with G > {SMALL_G}"
    lose = large[large.ratio_loo >= 1]
    out = (f"at G > {SMALL_G} from {large.ratio_loo.min():.3f} to {large.ratio_loo.max():.3f}, "
           f"not below 1 in {len(lose)} of {len(large)} rows")
    return out + "".join(f"; {r.problem} G = {r.G} ({r.design}): {r.ratio_loo:.3f}"
                         for r in lose.itertuples())


def _ratio_table(df: pd.DataFrame, design: str, G: int) -> pd.DataFrame:
    d = df[(df.design == design) & (df.G == G)]
    wide = d.pivot_table(index=["problem", "rates"], columns="estimator", values="ratio_loo",
                         sort=False).reset_index()
    return wide


def report(tables, s) -> Section:
    sm = summary(tables)
    df, kp = sm["table"], sm["kept"]
    G0 = 4 if 4 in set(df.G) else int(df.G.max())
    lines = ["Four prompts, each a two-armed softmax whose first arm is correct; pass rates "
             "spread around a mean (problem `m<mean>_s<spread>`, the rates listed) and the toy "
             "(0.1, 0.3, 0.6, 0.9). Exact moments by count states "
             "(`grpo_theory.core.batch_moments`), B = 4 prompts a batch, under two designs: "
             "one of each prompt per batch (`each`) and prompts drawn independently "
             "(`independent`, the package's default, with Monte Carlo beside it).", ""]
    for design in ("each", "independent"):
        w = _ratio_table(df, design, G0)
        lines += [f"**MSE ÷ leave-one-out's MSE, design `{design}`, G = {G0}:**", "",
                  markdown_table(w, {c: ".3f" for c in w.columns if c not in ("problem",
                                                                               "rates")}), ""]
    bias = df[(df.G == G0) & (df.design == "independent")].pivot_table(
        index="problem", columns="estimator", values="relative_bias", sort=False).reset_index()
    lines += [f"**Relative bias ‖E ĝ − ∇J‖ / ‖∇J‖, G = {G0}:**", "",
              markdown_table(bias, {c: ".3f" for c in bias.columns if c != "problem"}), ""]
    if len(kp):
        k = kp[kp.estimator == "norm_weighted"].pivot_table(index="p", columns="G",
                                                            values="kept").reset_index()
        k.columns = ["one prompt, pass rate p"] + [f"G = {c}" for c in k.columns[1:]]
        lines += ["**Share of the gradient the self-inclusive score-norm-weighted baseline "
                  "keeps** (⟨E ĝ, ∇J⟩ / ‖∇J‖²; its leave-one-out form keeps 1):", "",
                  markdown_table(k, {c: ".3f" for c in k.columns[1:]}), ""]
    loo_w = df[df.estimator == "norm_weighted_loo"].ratio_loo
    tr = tables.get("training")
    if tr is not None and len(tr):
        for G, d in tr.groupby("G"):
            r0 = d.iloc[0]
            lines += [f"**Training at equal rollouts** (problem `{r0.problem}`, B = 4, G = {G}, "
                      f"{int(r0.steps)} steps of plain gradient ascent at step size {r0.eta:g}, "
                      f"{int(r0.n_seeds)} seeds; J from {r0.start:.3f}; 95% bootstrap "
                      "intervals over seeds, the difference paired by seed):", "",
                      markdown_table(pd.DataFrame({
                          "estimator": d.estimator,
                          "final J [95% CI]": [f"{r.final:.4f} [{r.final_lo:.4f}, "
                                               f"{r.final_hi:.4f}]" for r in d.itertuples()],
                          "− leave-one-out's [95% CI]": [
                              f"{r.diff_loo:+.4f} [{r.diff_lo:+.4f}, {r.diff_hi:+.4f}]"
                              for r in d.itertuples()]})), ""]
        other = tr[tr.estimator != "grpo"]
        tie = sorted(set(other[(other.diff_lo <= 0) & (other.diff_hi >= 0)].estimator))
        slow = sorted(set(other[other.diff_hi < 0].estimator))
        lines += ["The batch-whitened estimators (`reinforce_plus_plus_baseline_verl`, `spo`) "
                  "divide by the batch's reward spread, which rescales the step: at one step "
                  "size they take larger steps, so a lead of theirs is a step-size effect until "
                  "compared at tuned step sizes. Below leave-one-out (interval below 0): "
                  f"{', '.join(f'`{n}`' for n in slow) or 'none'}; not told apart from it: "
                  f"{', '.join(f'`{n}`' for n in tie) or 'none'}.", ""]
    lines += ["A rare correct answer has a large score norm, dominates its own weighted "
              "baseline and cancels its own advantage; leaving the response out of its "
              "baseline removes the bias, at an MSE "
              f"{loo_w.min():.2f} to {loo_w.max():.2f} times leave-one-out's on this family "
              "(the self-inclusive forms' lower MSE is bought with the bias above; the "
              "whitened preset rescales the gradient, hence its ratios). JSPO borrows the other prompts' means, which carry "
              "no information about the response: unbiased, and below leave-one-out's MSE "
              "most where pass rates are alike (more to borrow); with prompts drawn "
              "independently a batch holds fewer distinct prompts and the gain is smaller.",
              ""]
    pl = sm["pooled"]
    if len(pl):
        best = _best_sizes(pl)
        N = int(pl.N.iloc[0])
        w = pl[pl.estimator == "jspo"].pivot_table(index="delta", columns="G",
                                                   values="ratio_loo").reset_index()
        w = w.sort_values("delta", ascending=False)
        w.columns = ["delta"] + [f"G = {c}" for c in w.columns[1:]]
        tab = best.rename(columns={"g_star_loo": "leave-one-out G* (law)",
                                   "grpo": "best G, leave-one-out", "jspo": "best G, JSPO",
                                   "gain": "JSPO's MSE at its best G ÷ leave-one-out's at its"})
        lines += [f"**The scaling law under pooling** (the scaling family, reward gap delta; a "
                  f"budget of N = {N} responses, B = N/G prompts drawn independently; exact MSE, "
                  "JSPO by the pooled route). JSPO's MSE ÷ leave-one-out's at each G:", "",
                  markdown_table(w, {c: ".3f" for c in w.columns[1:]}), "",
                  "Best G of the grid:", "",
                  markdown_table(tab.drop(columns=["N"]), {
                      "leave-one-out G* (law)": ".2f", "best G, leave-one-out": ".0f",
                      "best G, JSPO": ".0f",
                      "JSPO's MSE at its best G ÷ leave-one-out's at its": ".3f"}), "",
                  "JSPO's gain is largest at small G (many prompts to borrow from, few responses "
                  "for the leave-one-out mean) and vanishes as G grows (B = N/G prompts, little "
                  "to borrow, and the leave-one-out mean is already good), so its best group "
                  "size is smaller than leave-one-out's.", ""]
    lines += pooled_basis_lines(tables.get("pooled_basis"))
    sp = sm["spo_path"]
    if len(sp):
        r0 = sp.iloc[0]
        t = pd.DataFrame({"step": sp.step, "J": sp.objective,
                          "leave-one-out MSE": sp.loo_mse,
                          "oracle baseline ÷ leave-one-out": sp.oracle_ratio,
                          "SPO (raw) ÷ leave-one-out [95% CI]": [
                              f"{r.spo_ratio:.3f} [{r.spo_lo:.3f}, {r.spo_hi:.3f}]"
                              for r in sp.itertuples()]})
        lines += [f"**SPO's tracker along a drifting policy** (problem `{r0.problem}`, B = "
                  f"{int(r0.B)}, G = {int(r0.G)}, rho = {r0.rho:g}). Drift model: the policy "
                  f"follows the expected path of unbiased training, theta += {r0.eta:g} grad J, "
                  "and each step's drawn prompts update their trackers from their last "
                  "response, as the recipe's code does. The exact MSE of SPO's raw step given "
                  f"its tracker, averaged over {int(r0.n_seeds)} sampled tracker histories "
                  "(95% bootstrap interval), against leave-one-out's and the oracle baseline "
                  "V(x)'s:", "",
                  markdown_table(t, {"J": ".3f", "leave-one-out MSE": ".4f",
                                     "oracle baseline ÷ leave-one-out": ".3f"}), "",
                  "A baseline fixed before the step is unbiased; the tracker's lag and noise "
                  "only add MSE through `E[(b - V)^2 ||s||^2]`-type terms, and at G = 4 a "
                  "baseline from the past can beat the leave-one-out mean of three responses.",
                  ""]
    lines += _history_lines(sm["history"])
    lines += path_lines(tables.get("history_path"))
    lines += lm_training_lines(tables.get("lm_training"))
    lines += ["![](baselines.png)"]
    return Section("Baselines beyond the prompt: cross-prompt and weighted baselines",
                   "\n".join(lines), checks(sm) + path_checks(tables.get("history_path"))
                   + pooled_basis_checks(tables.get("pooled_basis")))


def plot(tables, s, out_dir) -> None:
    df = tables["table"]
    fam = df[(df.problem != "toy") & (df.mean_rate == 0.5)]
    pl = tables["pooled"]
    fig, axes = plt.subplots(1, 3 if len(pl) else 2, figsize=(15 if len(pl) else 10, 3.8))
    for design, ls in (("each", "-"), ("independent", "--")):
        for name, d in fam[fam.design == design].groupby("estimator"):
            if name == "grpo":
                continue
            d = d[d.G == d.G.max()].sort_values("spread")
            axes[0].plot(d.spread, d.ratio_loo, ls, marker="o", ms=3,
                         label=f"{name} ({design})")
    axes[0].axhline(1, color="k", lw=0.8)
    axes[0].set(xlabel="spread of the pass rates (logit scale), mean 0.5",
                ylabel="MSE / leave-one-out MSE", title=f"G = {int(fam.G.max())}, B = 4")
    axes[0].legend(fontsize=6)
    kp = tables["kept"]
    for (name, p), d in kp.groupby(["estimator", "p"]):
        if name == "grpo_mean":
            continue
        axes[1].plot(d.G, d.kept, marker="o", label=f"{name}, p = {p:g}")
    axes[1].axhline(1, color="k", lw=0.8)
    axes[1].set(xscale="log", xlabel="G", ylabel="⟨E ĝ, ∇J⟩ / ‖∇J‖²",
                title="Self-inclusive weights cancel a rare success")
    axes[1].legend(fontsize=7)
    ks = sorted(set(kp.G))
    axes[1].set_xticks(ks, [str(int(g)) for g in ks])
    axes[1].minorticks_off()
    if len(pl):
        for i, (d, dd) in enumerate(pl.groupby("delta")):
            for name, g in dd.groupby("estimator"):
                g = g.sort_values("G")
                axes[2].plot(g.G, g.exact_mse * g.N, "-" if name == "grpo" else "--",
                             color=f"C{i}", marker="o", ms=3,
                             label=f"delta {d:g}, {'leave-one-out' if name == 'grpo' else name}")
        sizes = sorted(set(pl.G))
        axes[2].set(xscale="log", yscale="log", xlabel="G (B = N/G)", ylabel="N x MSE",
                    title=f"Fixed budget N = {int(pl.N.iloc[0])}: leave-one-out vs JSPO")
        axes[2].set_xticks(sizes, [str(int(g)) for g in sizes])
        axes[2].minorticks_off()
        axes[2].legend(fontsize=6)
    save_figure(fig, out_dir / "baselines")
