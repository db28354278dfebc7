"""DPPO: random pruning with 1/q rescaling is unbiased; four negative controls are biased.

DPPO (arXiv 2603.04135) keeps prompt b with probability qp and completion (b, g) with
probability qc, rescales the kept terms by 1/q and uses the advantages of the full group, so
``E_mask[ghat_pruned | batch] = ghat_full``. Three kinds of cells, each checked against exact
enumeration (``grpo_theory.companions.dppo``):

* ``masks`` (one cell per sampled batch of the difficulty policy, B = 2 prompts x G = 4
  completions): every one of the 2^10 prompt/completion masks is enumerated in float64 for each
  estimator and keep scheme; DPPO's mask expectation equals the full-batch estimate to rounding,
  each control differs from it; the enumerated mask variance equals the Horvitz-Thompson formula
  and Monte Carlo over masks agrees within 4 se.
* ``batches`` (one cell per estimator, scheme and (G, B) on a 2-prompt x 3-response bandit): all
  batches x all masks enumerated; DPPO's expectation equals the full-batch one, the controls' do
  not, and the enumerated MSE equals the closed form by binary-reward conditioning.
* ``tradeoff`` (one cell per estimator and pruning rate, difficulty policy, B = 4, G = 8): exact
  MSE of DPPO and kept-token share for uniform prompt pruning, uniform completion pruning,
  advantage-aware completion pruning and zero-advantage-group pruning, with Monte Carlo (all
  methods from the same draws).

PASS when DPPO's relative bias is <= 1e-12 (given the batch and over batch sampling), every
control's relative bias exceeds 1e-8, the variance identities hold to 1e-10, every Monte Carlo z
is <= 4 and pruning only zero-advantage groups adds exactly no variance.

    grpo-theory dppo-pruning [--full] [--workers N]
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

import grpo_theory as gt
from grpo_theory import problems
from grpo_theory.companions import dppo
from grpo_theory.core.stats import z_value
from grpo_theory.plotting import plt, save_figure
from grpo_theory.experiments.runner import Cell, Experiment, Section, check, key_seed, float64
from grpo_theory.experiments.stats import markdown_table

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "cells", "cell", "summary",
           "trade_view", "report", "plot", "EXPERIMENT"]

NAME = "dppo-pruning"
CLAIM = ("DPPO pruning with 1/q rescaling and full-group advantages is exactly unbiased (all masks "
         "enumerated); no-rescale, deterministic, recompute and renormalise are biased")
Z_TOL = 4.0
EXACT_TOL = 1e-12  # relative to the scale of the estimate
BIAS_MIN = 1e-8  # a control "shows a bias" when its bias exceeds this (>> rounding)
MAX_BATCH_DRAWS = 1000  # draws allowed to find a batch with a non-zero advantage
CONTROLS = tuple(m for m in dppo.METHODS if m != "dppo")
SMALL = dict(logits=[[0.3, -0.2, 0.9], [1.0, 0.0, -1.0]], means=[[0.2, 0.9, 0.5], [1.0, 0.0, 0.4]],
             prompt_probs=[0.3, 0.7], lengths=[1.0, 3.0, 7.0])
MASK_SCHEMES = {"uniform": dppo.KeepScheme("uniform", 0.6, 0.7),
                "advantage": dppo.KeepScheme("advantage", 0.8, floor=0.3, zero_group_prompt=0.4)}
MASK_B, MASK_G = 2, 4
TRADE_B, TRADE_G = 4, 8


@dataclass(frozen=True)
class Settings:
    estimators: tuple
    n_batches: int
    mask_reps: int
    batch_configs: tuple  # (G, B) pairs of the enumerated small bandit
    trade_reps: int
    trade_estimators: tuple
    rates: tuple
    floors: tuple


SETTINGS = {
    "quick": Settings(estimators=("grpo",), n_batches=2, mask_reps=10_000,
                      batch_configs=((2, 2), (3, 1)), trade_reps=4_000, trade_estimators=("grpo",),
                      rates=(0.8, 0.6, 0.4, 0.25), floors=(0.5, 0.25, 0.1)),
    "full": Settings(estimators=("grpo", "grpo_std", "grpo_mean"), n_batches=10,
                     mask_reps=200_000, batch_configs=((2, 2), (3, 1), (4, 1)), trade_reps=40_000,
                     trade_estimators=("grpo", "grpo_std"),
                     rates=(0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1),
                     floors=(0.75, 0.5, 0.35, 0.25, 0.15, 0.1, 0.05)),
}

SCHEMA = {
    "masks": dict(estimator="str", scheme="str", batch="int", draw="int", method="str",
                  max_abs_bias="float", rel_bias="float", scale="float", var_enumerated="float",
                  var_formula="float?", var_mc="float?", var_mc_se="float?",
                  total_probability="float", zero_groups="int", mask_reps="int"),
    "batches": dict(estimator="str", scheme="str", G="int", B="int", method="str",
                    bias_vs_full="float", full_vs_grad="float", scale="float", cond_bias="float",
                    mse_full="float", mse_pruned="float", added_variance="float",
                    mse_closed_form="float?", kept_tokens="float",
                    kept_tokens_closed_form="float"),
    "tradeoff": dict(estimator="str", family="str", rate="float", scheme="str", method="str",
                     B="int", G="int", exact_mse="float?", exact_mse_full="float",
                     exact_added="float?", kept_tokens="float", kept_completions="float",
                     mc_kept_tokens="float", mc_mse="float", mc_se="float", ci_low="float",
                     ci_high="float", n_reps="int", z="float?",
                     completion_uniform_ratio_same_tokens="float",
                     prompt_uniform_ratio_same_tokens="float"),
}


def _trade_schemes(s: Settings) -> list[tuple[str, float, dppo.KeepScheme]]:
    out = [("none", 1.0, dppo.KeepScheme("uniform"))]
    out += [("prompt-uniform", q, dppo.KeepScheme("uniform", q, 1.0)) for q in s.rates]
    out += [("completion-uniform", q, dppo.KeepScheme("uniform", 1.0, q)) for q in s.rates]
    out += [("advantage-aware", f, dppo.KeepScheme("advantage", 1.0, floor=f, zero_group_prompt=f))
            for f in s.floors]
    out += [("zero-groups-only", f, dppo.KeepScheme("advantage", 1.0, floor=1.0,
                                                    zero_group_prompt=f)) for f in s.floors]
    return out


def cells(s: Settings) -> list[Cell]:
    out = [Cell(f"masks_b{j}", dict(part="masks", batch=j, estimators=tuple(s.estimators),
                                    schemes=MASK_SCHEMES, mask_reps=s.mask_reps, B=MASK_B,
                                    G=MASK_G), "masks")
           for j in range(s.n_batches)]
    out += [Cell(f"batches_{e}_{name}_G{G}B{B}",
                 dict(part="batches", estimator=e, scheme=sch, G=G, B=B, small=SMALL), "batches")
            for e in s.estimators for name, sch in MASK_SCHEMES.items()
            for G, B in s.batch_configs]
    out += [Cell(f"tradeoff_{e}_{fam}_{rate:g}",
                 dict(part="tradeoff", estimator=e, family=fam, rate=rate, scheme=sch,
                      n_reps=s.trade_reps, B=TRADE_B, G=TRADE_G), "tradeoff")
            for e in s.trade_estimators for fam, rate, sch in _trade_schemes(s)]
    return out


@float64
def cell(config: dict, key) -> list[dict]:
    """One cell: all masks of one sampled batch, one enumerated small bandit, or one rate."""
    part = config["part"]
    if part == "masks":
        return _mask_cell(config, key)
    if part == "batches":
        return _batch_cell(config)
    if part == "tradeoff":
        return _trade_cell(config, key)
    raise ValueError(f"config['part'] must be masks, batches or tradeoff, got {part!r}")


def _sample_batch(key, problem, B, G):
    """The first batch drawn from ``fold_in(key, i)``, i = 0, 1, ..., with a non-zero advantage."""
    for i in range(MAX_BATCH_DRAWS):
        x, y, z = gt.sample_groups(jax.random.fold_in(key, i), problem, B, G)
        if float(jnp.max(jnp.std(z, axis=1))) > 0:
            return i, x, y, z
    raise RuntimeError(f"no batch with a non-zero advantage in {MAX_BATCH_DRAWS} draws")


def _mask_cell(config, key):
    """Every mask of one sampled batch enumerated, for each estimator and keep scheme."""
    problem, _ = problems.difficulty_problem()
    k_batch, k_mc = jax.random.split(key)
    draw, x, y, z = _sample_batch(k_batch, problem, config["B"], config["G"])
    pairs = [(e, n) for e in config["estimators"] for n in config["schemes"]]
    mc_keys = jax.random.split(k_mc, len(pairs))
    rows = []
    for (est, name), k in zip(pairs, mc_keys):
        sch = config["schemes"][name]
        adv, S, ctx = dppo.batch_terms(problem, est, x, y, z)
        full = dppo.full_estimate(adv, S)
        qp, qc = sch(adv)
        mom = dppo.exact_mask_moments(est, z, ctx, adv, S, qp, qc)
        formula = float(dppo.added_variance(adv, S, qp, qc))
        ests = dppo.mc_mask_estimates(k, "dppo", est, z, ctx, adv, S, qp, qc,
                                      n_reps=config["mask_reps"])
        d2 = np.asarray(jnp.sum((ests - full) ** 2, axis=1))  # mean = exact added variance
        scale = float(jnp.max(jnp.abs(full))) + 1e-300
        for meth in dppo.METHODS:
            mean, var = mom[meth]
            is_dppo = meth == "dppo"
            rows.append(dict(estimator=est, scheme=sch.label(), batch=config["batch"], draw=draw,
                             method=meth, max_abs_bias=float(jnp.max(jnp.abs(mean - full))),
                             rel_bias=float(jnp.linalg.norm(mean - full) / jnp.linalg.norm(full)),
                             scale=scale, var_enumerated=var,
                             var_formula=formula if is_dppo else np.nan,
                             var_mc=float(d2.mean()) if is_dppo else np.nan,
                             var_mc_se=float(d2.std(ddof=1) / np.sqrt(d2.size))
                             if is_dppo else np.nan,
                             total_probability=mom["total_probability"],
                             zero_groups=int(jnp.sum(jnp.all(adv == 0, axis=1))),
                             mask_reps=config["mask_reps"]))
    return rows


def _batch_cell(config):
    """All batches x all masks of the small bandit enumerated (no randomness)."""
    sm = config["small"]
    small = gt.SoftmaxBandit(np.array(sm["logits"]), np.array(sm["means"]),
                             prompt_probs=sm["prompt_probs"])
    est, sch, G, B = config["estimator"], config["scheme"], config["G"], config["B"]
    res = dppo.exact_pruning_expectation(small, est, G, B, sch, lengths=sm["lengths"])
    grad = np.asarray(small.problem().gradient())
    closed = dppo.exact_pruned_mse(small, est, G, B, sch, lengths=sm["lengths"])
    rows = []
    for meth, r in res.items():
        rows.append(dict(estimator=est, scheme=sch.label(), G=G, B=B, method=meth,
                         bias_vs_full=float(np.max(np.abs(r["mean_pruned"] - r["mean_full"]))),
                         full_vs_grad=float(np.max(np.abs(r["mean_full"] - grad))),
                         scale=float(np.max(np.abs(r["mean_full"]))),
                         cond_bias=r["cond_bias"], mse_full=r["mse_full"],
                         mse_pruned=r["mse_pruned"], added_variance=r["added_variance"],
                         mse_closed_form=closed["mse"] if meth == "dppo" else np.nan,
                         kept_tokens=r["kept_tokens"],
                         kept_tokens_closed_form=closed["kept_tokens"]))
    return rows


def _trade_cell(config, key):
    """Exact MSE and kept tokens of one pruning rate, Monte Carlo of every method (same draws)."""
    problem, lengths = problems.difficulty_problem()
    est, sch, B, G = config["estimator"], config["scheme"], config["B"], config["G"]
    ex = dppo.exact_pruned_mse(problem, est, G, B, sch, lengths=lengths)
    mc = dppo.mc_pruned_mse(problem, est, G, B, sch, n_reps=config["n_reps"], seed=key_seed(key),
                            lengths=lengths)
    # uniform pruning at exactly the same expected kept-token share (equal compute), exact
    kt = ex["kept_tokens"]
    same = {f"{name}_ratio_same_tokens": dppo.exact_pruned_mse(
        problem, est, G, B, sch_u, lengths=lengths)["mse"] / ex["mse_full"]
        for name, sch_u in (("completion_uniform", dppo.KeepScheme("uniform", 1.0, kt)),
                            ("prompt_uniform", dppo.KeepScheme("uniform", kt, 1.0)))}
    rows = []
    for meth in dppo.METHODS + ("full",):
        m = mc[meth]
        exact = ex["mse"] if meth == "dppo" else (ex["mse_full"] if meth == "full" else np.nan)
        rows.append(dict(estimator=est, family=config["family"], rate=config["rate"],
                         scheme=sch.label(), method=meth, B=B, G=G, exact_mse=exact,
                         exact_mse_full=ex["mse_full"],
                         exact_added=ex["added"] if meth == "dppo" else np.nan,
                         kept_tokens=ex["kept_tokens"], kept_completions=ex["kept_completions"],
                         mc_kept_tokens=mc["kept_tokens"], mc_mse=m["mse"], mc_se=m["se"],
                         ci_low=m["ci_low"], ci_high=m["ci_high"], n_reps=mc["n_reps"],
                         z=(m["mse"] - exact) / m["se"] if np.isfinite(exact) else np.nan,
                         **same))
    return rows


# --- summary, report, figure -------------------------------------------------------------------


def summary(tables) -> dict:
    """The numbers behind the checks (relative biases, variance identities, z-scores).

    Args:
        tables: ``{"masks", "batches", "tradeoff": DataFrame}`` of this experiment.
    Returns:
        dict of floats; ``mask_control_bias`` / ``batch_control_bias`` are ``{control: float}``.
    """
    masks, batches, trade = tables["masks"], tables["batches"], tables["tradeoff"]
    c = {}
    d = masks[masks.method == "dppo"]
    c["mask_dppo_bias"] = float((d.max_abs_bias / d.scale).max())
    c["mask_prob_total"] = float((masks.total_probability - 1).abs().max())
    c["mask_control_bias"] = {m: float((masks[masks.method == m].max_abs_bias
                                        / masks[masks.method == m].scale).max())
                              for m in CONTROLS}
    c["var_formula_rel"] = float(((d.var_enumerated - d.var_formula).abs() / d.var_formula).max())
    c["var_mc_z"] = float(((d.var_mc - d.var_formula) / d.var_mc_se).abs().max())
    b = batches[batches.method == "dppo"]
    c["batch_dppo_bias"] = float((b.bias_vs_full / b.scale).max())
    c["batch_dppo_cond"] = float((b.cond_bias / b.scale).max())
    c["batch_closed_form_rel"] = float(((b.mse_pruned - b.mse_closed_form).abs()
                                        / b.mse_pruned).max())
    c["batch_identity_rel"] = float(((b.mse_pruned - b.mse_full - b.added_variance).abs()
                                     / b.mse_pruned).max())
    c["batch_kept_rel"] = float(((b.kept_tokens - b.kept_tokens_closed_form).abs()).max())
    c["batch_control_bias"] = {m: float((batches[batches.method == m].bias_vs_full
                                         / batches[batches.method == m].scale).max())
                               for m in CONTROLS}
    t = trade[trade.method.isin(["dppo", "full"])]
    c["trade_z"] = float(t.z.abs().max())
    zg = trade[(trade.method == "dppo") & (trade.family == "zero-groups-only")]
    c["zero_group_added"] = float((zg.exact_added / zg.exact_mse_full).abs().max())
    c["zero_group_kept_min"] = float(zg.kept_tokens.min())
    return c


def _checks(c: dict) -> list:
    mcb, bcb = list(c["mask_control_bias"].values()), list(c["batch_control_bias"].values())
    return [
        check(f"DPPO unbiased given the batch (relative bias <= {EXACT_TOL:g})",
              c["mask_dppo_bias"] <= EXACT_TOL, c["mask_dppo_bias"],
              detail=f"{c['mask_dppo_bias']:.1e}"),
        check("mask probabilities sum to 1 (to 1e-12)", c["mask_prob_total"] <= 1e-12,
              c["mask_prob_total"], detail=f"{c['mask_prob_total']:.1e}"),
        check(f"every control biased given the batch (> {BIAS_MIN:g})", min(mcb) > BIAS_MIN,
              mcb, detail=f"smallest {min(mcb):.3g}"),
        check("enumerated mask variance = Horvitz-Thompson formula (to 1e-10)",
              c["var_formula_rel"] <= 1e-10, c["var_formula_rel"],
              detail=f"{c['var_formula_rel']:.1e}"),
        check(f"Monte Carlo over masks within {Z_TOL:g} se", c["var_mc_z"] <= Z_TOL,
              c["var_mc_z"], detail=f"{c['var_mc_z']:.2f}"),
        check(f"DPPO unbiased over batch sampling (<= {EXACT_TOL:g})",
              (c["batch_dppo_bias"] <= EXACT_TOL) & (c["batch_dppo_cond"] <= EXACT_TOL),
              c["batch_dppo_bias"], c["batch_dppo_cond"],
              detail=f"{c['batch_dppo_bias']:.1e} / conditional {c['batch_dppo_cond']:.1e}"),
        check("enumerated MSE = binary-conditioning closed form (to 1e-10)",
              c["batch_closed_form_rel"] <= 1e-10, c["batch_closed_form_rel"],
              detail=f"{c['batch_closed_form_rel']:.1e}"),
        check("MSE(DPPO) = MSE(full) + E[added variance] (to 1e-10)",
              c["batch_identity_rel"] <= 1e-10, c["batch_identity_rel"],
              detail=f"{c['batch_identity_rel']:.1e}"),
        check("kept tokens = closed form (to 1e-12)", c["batch_kept_rel"] <= 1e-12,
              c["batch_kept_rel"], detail=f"{c['batch_kept_rel']:.1e}"),
        check(f"every control biased over batch sampling (> {BIAS_MIN:g})", min(bcb) > BIAS_MIN,
              bcb, detail=f"smallest {min(bcb):.3g}"),
        check(f"speed-vs-MSE Monte Carlo within {Z_TOL:g} se of exact", c["trade_z"] <= Z_TOL,
              c["trade_z"], detail=f"{c['trade_z']:.2f}"),
        check("pruning only zero-advantage groups adds no variance and saves tokens",
              (c["zero_group_added"] <= 1e-12) & (c["zero_group_kept_min"] < 1.0),
              c["zero_group_added"], c["zero_group_kept_min"],
              detail=f"added {c['zero_group_added']:.1e}, kept >= "
                     f"{c['zero_group_kept_min']:.3f}"),
    ]


def trade_view(trade: pd.DataFrame, est: str = "grpo") -> pd.DataFrame:
    """DPPO rows of one estimator's speed-vs-MSE table, ``mse_ratio`` = MSE / MSE(full)."""
    d = trade[(trade.method == "dppo") & (trade.estimator == est)].copy()
    d["mse_ratio"] = d.exact_mse / d.exact_mse_full
    return d.sort_values(["family", "kept_tokens"])


def _scheme_table(batches: pd.DataFrame) -> str:
    """The controls' relative bias over batch sampling, one row per (estimator, scheme, G, B)."""
    rows = []
    for (est, sch, G, B), g in batches.groupby(["estimator", "scheme", "G", "B"]):
        g = g.set_index("method")
        rows.append([est, sch, f"{int(G)},{int(B)}"] + [
            f"{g.loc[m, 'bias_vs_full'] / g.loc[m, 'scale']:.3g}" for m in CONTROLS])
    return markdown_table(pd.DataFrame(rows, columns=["estimator", "scheme", "G,B", *CONTROLS]))


def report(tables, s: Settings) -> Section:
    masks, batches, trade = tables["masks"], tables["batches"], tables["tradeoff"]
    c = summary(tables)
    d = trade_view(trade)
    lines = [
        "DPPO (arXiv 2603.04135) keeps prompt b with probability qp and completion (b,g) with "
        "probability qc, rescales kept terms by 1/q and uses advantages of the full group. "
        "Exact checks enumerate every mask in float64.", "",
        f"**Given a batch** (difficulty policy, B={MASK_B}, G={MASK_G}, 2^10 masks, "
        f"{masks.batch.nunique()} batches x {masks.scheme.nunique()} schemes x "
        f"{masks.estimator.nunique()} estimators): max relative bias of DPPO "
        f"{c['mask_dppo_bias']:.1e} (tolerance {EXACT_TOL:g}).", "",
        markdown_table(pd.DataFrame(
            [("dppo", f"{c['mask_dppo_bias']:.2e}", f"{c['batch_dppo_bias']:.2e}")]
            + [(m, f"{c['mask_control_bias'][m]:.3g}", f"{c['batch_control_bias'][m]:.3g}")
               for m in CONTROLS],
            columns=["method", "max relative bias given the batch", "max relative bias over "
                     "batch sampling (2x3 bandit, all batches x masks)"])),
        "", "Per scheme (over batch sampling), the controls' relative biases:", "",
        _scheme_table(batches)]
    lines += [
        "", "A zero for `recompute` under the advantage-aware scheme with G = 2 is expected: "
        "there both completions of a mixed group have |A| = max|A| (kept surely), and pruning "
        "only touches zero-advantage groups, whose recomputed advantages are 0 as well.", "",
        f"**Variance cost**: enumerated mask variance = Horvitz-Thompson formula to "
        f"{c['var_formula_rel']:.1e} (relative); Monte Carlo over masks within "
        f"{c['var_mc_z']:.2f} se (PASS <= {Z_TOL}). Over batch sampling, MSE(DPPO) = MSE(full) + "
        f"E[added variance] to {c['batch_identity_rel']:.1e} and equals the binary-conditioning "
        f"closed form to {c['batch_closed_form_rel']:.1e}.", "",
        f"**Speed vs MSE** (difficulty policy, B={TRADE_B}, G={TRADE_G}, GRPO leave-one-out; "
        f"exact, MC within {c['trade_z']:.2f} se):", "",
        markdown_table(d[["family", "rate", "kept_tokens", "kept_completions",
                          "mse_ratio"]].set_axis(["family", "rate", "kept tokens",
                                                  "kept completions", "MSE / MSE(full)"], axis=1),
                       {"rate": "g", "kept tokens": ".3f", "kept completions": ".3f",
                        "MSE / MSE(full)": ".3f"})]
    adv = d[d.family == "advantage-aware"].sort_values("kept_tokens")
    if len(adv):
        r0 = adv.iloc[len(adv) // 2]
        lines += ["", f"At {r0.kept_tokens:.1%} kept tokens, advantage-aware pruning (floor "
                  f"{r0.rate:g}) costs MSE x{r0.mse_ratio:.3f}; at exactly the same expected "
                  f"kept-token share uniform completion pruning costs "
                  f"x{r0.completion_uniform_ratio_same_tokens:.3f} and uniform prompt pruning "
                  f"x{r0.prompt_uniform_ratio_same_tokens:.3f} (all exact). Pruning only "
                  f"zero-advantage groups keeps as little as {c['zero_group_kept_min']:.1%} of "
                  f"the tokens at exactly zero added variance (relative "
                  f"{c['zero_group_added']:.1e})."]
    lines += ["", "![](dppo_pruning.png)"]
    return Section("DPPO: unbiased pruning, negative controls, speed vs MSE", "\n".join(lines),
                   _checks(c))


def plot(tables, s: Settings, out_dir) -> None:
    masks, trade = tables["masks"], tables["tradeoff"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    ax = axes[0]
    colours = dict(zip(["prompt-uniform", "completion-uniform", "advantage-aware",
                        "zero-groups-only"], ["C2", "C1", "C0", "C3"]))
    for i, est in enumerate(sorted(trade.estimator.unique(), key=lambda e: e != "grpo")):
        d = trade_view(trade, est)
        for fam, f in d.groupby("family"):
            if fam == "none":
                continue
            f = pd.concat([d[d.family == "none"], f]).sort_values("kept_tokens")
            ax.plot(f.kept_tokens, f.mse_ratio, "-" if i == 0 else "--", color=colours[fam],
                    label=f"{fam} ({est})")
            ax.errorbar(f.kept_tokens, f.mc_mse / f.exact_mse_full,
                        yerr=z_value() * f.mc_se / f.exact_mse_full, fmt="o" if i == 0 else "s",
                        ms=3, color=colours[fam], capsize=2)
    k = np.linspace(trade.kept_tokens.min(), 1, 50)
    ax.plot(k, 1 / k, "k:", lw=1, label="1/kept (fewer prompts, same tokens)")
    ax.set(xlabel="kept-token share (training compute)", ylabel="MSE / MSE(no pruning)",
           yscale="log")
    ax.set_title("Speed vs MSE: exact (lines), MC (points)", fontsize=10)
    ax.legend(fontsize=6)
    ax = axes[1]
    agg = masks.assign(r=masks.max_abs_bias / masks.scale).groupby(["method", "scheme"]).r.max()
    agg = agg.unstack("scheme").reindex(list(dppo.METHODS))
    xs = np.arange(len(agg.index))
    for i, sch in enumerate(agg.columns):
        ax.bar(xs + 0.4 * i - 0.2, np.maximum(agg[sch].values, 1e-18), width=0.4, label=sch)
    ax.axhline(EXACT_TOL, color="k", ls=":", lw=1, label="float64 tolerance")
    ax.set(yscale="log", xticks=xs, ylabel="max |E_mask ĝ_pruned − ĝ| / max|ĝ|")
    ax.set_title("Bias given the batch (2^10 masks enumerated)", fontsize=10)
    ax.set_xticklabels(agg.index, rotation=20, fontsize=8)
    ax.legend(fontsize=6)
    ax = axes[2]
    d = masks[masks.method == "dppo"]
    ax.errorbar(d.var_formula, d.var_mc, yerr=z_value() * d.var_mc_se, fmt="o", ms=4, capsize=2)
    lim = [d.var_formula.min() * 0.8, d.var_formula.max() * 1.2]
    ax.plot(lim, lim, "k:", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="exact added variance (Horvitz-Thompson)",
           ylabel="Monte Carlo over masks (95% CI)")
    ax.set_title("Variance cost of pruning", fontsize=10)
    fig.tight_layout()
    save_figure(fig, out_dir / "dppo_pruning")


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=50)
