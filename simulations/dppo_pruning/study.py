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

import grpo_theory as gt
from grpo_theory import problems
from grpo_theory.companions import dppo
from grpo_theory.experiments import Cell, Experiment
from grpo_theory._precision import float64

from . import analysis as _report
from .analysis import BIAS_MIN, CONTROLS, EXACT_TOL, Z_TOL, plot, summary, trade_view

__all__ = ["NAME", "CLAIM", "Settings", "SETTINGS", "SCHEMA", "cells", "cell", "summary",
           "trade_view", "report", "plot", "EXPERIMENT"]

NAME = "dppo-pruning"
CLAIM = ("DPPO pruning with 1/q rescaling and full-group advantages is exactly unbiased (all masks "
         "enumerated); no-rescale, deterministic, recompute and renormalise are biased")
MAX_BATCH_DRAWS = 1000  # draws allowed to find a batch with a non-zero advantage
SMALL = dict(logits=[[0.3, -0.2, 0.9], [1.0, 0.0, -1.0]], means=[[0.2, 0.9, 0.5], [1.0, 0.0, 0.4]],
             prompt_probs=[0.3, 0.7], lengths=[1.0, 3.0, 7.0])
MASK_B, MASK_G = 2, 4
TRADE_B, TRADE_G = 4, 8
MASK_SCHEMES = {"uniform": dppo.KeepScheme("uniform", 0.6, 0.7),
                "advantage": dppo.KeepScheme("advantage", 0.8, floor=0.3, zero_group_prompt=0.4)}


@dataclass(frozen=True)
class Settings:
    """The mask, enumerated-batch and trade-off cells.

    Attributes:
        estimators: the estimators of the mask and batch cells.
        n_batches: mask cells (one sampled batch each).
        mask_reps: sampled masks per mask cell.
        batch_configs: ``(G, B)`` pairs of the enumerated small bandit.
        trade_reps: Monte Carlo replicates per trade-off cell.
        trade_estimators: the estimators of the trade-off cells.
        rates: the keep rates q of the prompt- and completion-uniform schemes.
        floors: the keep-probability floors of the advantage-aware and zero-groups-only schemes.
    """

    estimators: tuple
    n_batches: int
    mask_reps: int
    batch_configs: tuple
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
    mc = dppo.mc_pruned_mse(problem, est, G, B, sch, n_reps=config["n_reps"], key=key,
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


# --- summary, report, figure: simulations/_dppo_pruning_report.py --------------------------------


def report(tables, s):
    """The section (:func:`._dppo_pruning_report.report`) with this driver's batch shapes."""
    return _report.report(tables, s, mask_shape=(MASK_B, MASK_G), trade_shape=(TRADE_B, TRADE_G))


EXPERIMENT = Experiment(name=NAME, claim=CLAIM, settings=SETTINGS, cells=cells, cell=cell,
                        schema=SCHEMA, report=report, plot=plot, order=50)
