"""The cells of ``rollout-allocation``: the optimal allocation, the audit of every rule at
matched rollouts, Monte Carlo checks, the plug-in from noisy estimates, training."""

from __future__ import annotations

import itertools

import numpy as np

import grpo_theory as gt
from grpo_theory import allocation as A
from grpo_theory.allocation import (PromptConstants, greedy_allocation, optimal_allocation,
                                    plug_in_mse, prompt_constants, uniform_allocation)
from grpo_theory.core import SoftmaxBandit
from grpo_theory.experiments import Cell, key_seed
from grpo_theory._precision import float64
from grpo_theory.optim import max_objective
from grpo_theory.problems import scaling_family_bandit

from .settings import Settings
from .training import gap_at_budgets, rule_config, train_rule

__all__ = ["SCHEMA", "UNBIASED", "member_problem", "member_rules", "cells", "cell"]

#: rules whose sizes are fixed before sampling: expected unbiased (the check tests it)
UNBIASED = ("fixed", "pass_rate(vip)", "pass_rate(sgpo)", "optimal")
TRAIN_RULES = ("fixed", "optimal", "dynamic_sampling", "conformal_stopping")

SCHEMA = {
    "optimal": dict(member="str", c1="float", c2="float", c3="float", G_star="int",
                    free_m="float", free_ratio="float", matched_ratio="float", sizes="str",
                    brute_err="float", alike_ok="int"),
    "audit": dict(member="str", rule="str", family="str", B="int", rollouts="float",
                  bias_norm="float", mse="float", bias_share="float",
                  relative_bias="float?", cosine="float?", weight_dev="float?",
                  weights="str", opt_mse="float", unif_mse="float", ratio="float",
                  opt_check="float?"),
    "mc": dict(member="str", rule="str", exact_mse="float", mc_mse="float", mc_se="float",
               exact_rollouts="float", mc_rollouts="float", rollouts_se="float", z_mse="float",
               z_rollouts="float"),
    "mc_mean": dict(member="str", rule="str", relative_bias="float", n_batches="int",
                    z_mean="float", z_rival="float"),
    "plugin": dict(member="str", n_previous="int", model="str", m="float", ratio="float",
                   ratio_se="float", uniform_ratio="float"),
    "train": dict(rule="str", run_seed="int", budget="float", fraction="float", gap="float?",
                  rollouts_per_prompt="float"),
}


#: the two-prompt difficulty mix (pass rates 0.1 and 0.9): the rules' bias is large there
MIX = "mix(p=0.1,0.9)"


def _members(s: Settings) -> list[str]:
    out = [f"family(delta={d},{p})" for d in s.deltas for p in s.policies]
    return out + ([MIX] if s.mix else [])


def member_problem(member: str):
    """The policy a member name stands for."""
    if member.startswith("mix"):
        # two 3-response prompts, one correct response each, with pass rates 0.1 and 0.9
        return SoftmaxBandit(np.log([[0.1, 0.6, 0.3], [0.9, 0.06, 0.04]]),
                             [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    d = float(member.split("delta=")[1].split(",")[0])
    return scaling_family_bandit(d, at_optimum=member.endswith("optimum)"))


def _g_star(problem) -> int:
    return max(2, int(gt.optimal_group_size(problem).exact))


def member_rules(problem, grid) -> list[tuple[str, object]]:
    """``[(family, rule)]``: the rules of the allocation registry at this member's G*."""
    G = _g_star(problem)
    P = int(np.asarray(problem.prompt_probs).size)
    V = np.asarray(problem.values())
    return [("fixed", A.fixed(G)),
            ("pass_rate(vip)", A.pass_rate_allocation(V, P * G, "vip")),
            ("pass_rate(sgpo)", A.pass_rate_allocation(V, P * G, "sgpo")),
            ("dynamic_sampling", A.dynamic_sampling(G)),
            ("conformal_stopping", A.conformal_stopping(tuple(grid))),
            ("max_variance_subset", A.max_variance_subset(2 * G, G)),
            ("successive_elimination", A.successive_elimination(max(G, 4), 2, max(G, 4))),
            ("balanced_elimination", A.balanced_elimination(max(G, 4), 2, max(G, 4)))]


def cells(s: Settings) -> list[Cell]:
    out = []
    for mem in _members(s):
        out.append(Cell(f"optimal_{mem}", dict(part="optimal", member=mem), kind="optimal"))
        out.append(Cell(f"audit_{mem}", dict(part="audit", member=mem, grid=s.grid,
                                            batch_sizes=s.batch_sizes), kind="audit"))
        for n0 in s.plugin_previous:
            for model in ("responses", "pass_rate"):
                out.append(Cell(f"plugin_{mem}_n{n0}_{model}",
                                dict(part="plugin", member=mem, n_previous=n0, model=model,
                                     draws=s.plugin_draws), kind="plugin"))
    out.append(Cell("mc", dict(part="mc", member=_members(s)[0], grid=s.grid,
                               n_batches=s.mc_batches), kind="mc"))
    # the mean gradient on the member where the data-dependent rules' bias is large
    out.append(Cell("mc_mean", dict(part="mc_mean", member=MIX, grid=s.grid,
                                    n_batches=s.mc_batches), kind="mc_mean"))
    for r in TRAIN_RULES:
        out.append(Cell(f"train_{r}", dict(part="train", rule=r, delta=s.train_delta,
                                          grid=s.grid, B=s.train_batch, n_steps=s.train_steps,
                                          n_seeds=s.train_seeds, lr=s.train_lr,
                                          budgets=s.train_budgets), kind="train"))
    return out


def _brute_err(c: PromptConstants) -> float:
    """Largest relative gap between greedy and brute force over totals 2P .. 2P + 6."""
    P, worst = c.n_prompts, 0.0
    for total in range(2 * P, 2 * P + 7):
        best = min(float(np.sum(c.variance(np.array(g, float))))
                   for g in itertools.product(range(2, total - 2 * (P - 1) + 1), repeat=P)
                   if sum(g) == total)
        got = float(np.sum(c.variance(greedy_allocation(c.a, c.b, total).astype(float))))
        worst = max(worst, abs(got - best) / best)
    return worst


def _alike_ok() -> int:
    b = SoftmaxBandit(np.tile([[0.3, -0.2, 1.1]], (3, 1)), np.tile([[0.2, 0.9, 0.5]], (3, 1)))
    return int(np.all(optimal_allocation(b).group_sizes == gt.optimal_group_size(b).exact))


def _optimal(config):
    pb = member_problem(config["member"])
    c = prompt_constants(pb)
    G = _g_star(pb)
    free = optimal_allocation(c)
    unif = uniform_allocation(c, G)
    return dict(member=config["member"], c1=c.c1, c2=c.scaling.c2, c3=c.scaling.c3, G_star=G,
                free_m=free.expected_rollouts, free_ratio=free.budget_mse / unif.budget_mse,
                matched_ratio=optimal_allocation(c, G).mse / unif.mse,
                sizes=" ".join(f"{g:g}" for g in free.group_sizes),
                brute_err=_brute_err(c) if c.n_prompts <= 4 else 0.0, alike_ok=_alike_ok())


def _audit(config):
    pb = member_problem(config["member"])
    c = prompt_constants(pb)
    G = _g_star(pb)
    f = c.prompt_probs
    rows = []
    rules = member_rules(pb, config["grid"])
    opt_rule = A.per_prompt(optimal_allocation(c, G).group_sizes.round().astype(int), "optimal")
    for fam, rule in rules + [("optimal", opt_rule)]:
        for B in config["batch_sizes"]:
            r = A.audit(pb, rule, batch_size=B)
            m = r.expected_rollouts
            opt = optimal_allocation(c, m).mse / B
            gn = float(np.linalg.norm(r.gradient))
            w = np.asarray(r.prompt_weights)
            dev = float(np.nanmax(np.abs(w / f - 1))) if np.any(np.isfinite(w)) else np.nan
            rows.append(dict(member=config["member"], rule=r.rule, family=fam, B=B, rollouts=m,
                             bias_norm=r.bias_norm, mse=r.mse, bias_share=r.bias_norm**2 / r.mse,
                             relative_bias=r.relative_bias if gn > 1e-9 else np.nan,
                             cosine=r.cosine if gn > 1e-9 else np.nan, weight_dev=dev,
                             weights=" ".join(f"{v:.4g}" for v in w),
                             opt_mse=opt, unif_mse=uniform_allocation(c, m).mse / B,
                             ratio=r.mse / opt,
                             opt_check=(c.mse(opt_rule.sizes, B) if fam == "optimal"
                                        else np.nan)))
    return rows


def _mc(config, key):
    pb = member_problem(config["member"])
    rows = []
    for i, (fam, rule) in enumerate(member_rules(pb, config["grid"])):
        ex = A.audit(pb, rule)
        mc = A.monte_carlo(pb, rule, n_batches=config["n_batches"], seed=key_seed(key) + i)
        rows.append(dict(member=config["member"], rule=ex.rule, exact_mse=ex.mse,
                         mc_mse=mc.mse.value, mc_se=mc.mse.se,
                         exact_rollouts=ex.expected_rollouts,
                         mc_rollouts=mc.expected_rollouts.value,
                         rollouts_se=mc.expected_rollouts.se,
                         z_mse=(mc.mse.value - ex.mse) / mc.mse.se,
                         z_rollouts=(mc.expected_rollouts.zscore(ex.expected_rollouts)
                                     if mc.expected_rollouts.se > 0 else 0.0)))
    return rows


def _mc_mean(config, key):
    """Per rule: the Monte Carlo mean gradient against the audit's exact ``E[ghat]`` and against
    its rival ``grad J`` (the audit with its bias term dropped), as the largest ``|z|`` over the
    coordinates whose Monte Carlo se is positive."""
    pb = member_problem(config["member"])
    rows = []
    for i, (fam, rule) in enumerate(member_rules(pb, config["grid"])):
        ex = A.audit(pb, rule)
        mc = A.monte_carlo(pb, rule, n_batches=config["n_batches"], seed=key_seed(key) + i)
        m, se = np.ravel(mc.mean), np.ravel(mc.mean_se)
        ok = se > 0
        rows.append(dict(member=config["member"], rule=ex.rule,
                         relative_bias=float(ex.relative_bias), n_batches=config["n_batches"],
                         z_mean=float(np.max(np.abs(m - np.ravel(ex.mean))[ok] / se[ok])),
                         z_rival=float(np.max(np.abs(m - np.ravel(ex.gradient))[ok] / se[ok]))))
    return rows


def _plugin(config, key):
    pb = member_problem(config["member"])
    G = _g_star(pb)
    r = plug_in_mse(pb, G, config["n_previous"], config["draws"], seed=key_seed(key),
                    model=config["model"])
    return dict(member=config["member"], n_previous=config["n_previous"],
                model=config["model"], m=float(G), ratio=r.ratio.value, ratio_se=r.ratio.se,
                uniform_ratio=r.uniform.mse / r.oracle.mse)


def _train(config, key):
    pb = scaling_family_bandit(config["delta"], at_optimum=False)
    G = _g_star(pb)
    name = config["rule"]
    rule = {"fixed": lambda: rule_config("fixed", group_size=G),
            "optimal": lambda: rule_config("optimal", rollouts=G, max_group=8 * G),
            "dynamic_sampling": lambda: rule_config("dynamic_sampling", group_size=G,
                                                    max_rounds=8),
            "conformal_stopping": lambda: rule_config("conformal_stopping",
                                                      grid=tuple(config["grid"]))}[name]()
    B, n = config["B"], config["n_steps"]
    # every rule runs long enough to spend the fixed-G* rule's total: conformal stopping may
    # spend as little as grid[0] a prompt
    steps = n * G // config["grid"][0] if name == "conformal_stopping" else n
    seeds = np.asarray(key_seed(key, config["n_seeds"]), dtype=np.int64) % (2**32)
    J, spent = train_rule(pb, rule, B, steps, config["lr"], seeds)
    total = B * G * n  # the fixed-G* rule's rollouts
    budgets = [fr * total for fr in config["budgets"]]
    gaps = gap_at_budgets(J, spent, budgets, max_objective(pb))
    rows = []
    for i, s in enumerate(seeds):
        for j, fr in enumerate(config["budgets"]):
            rows.append(dict(rule=name, run_seed=int(s), budget=budgets[j], fraction=fr,
                             gap=float(gaps[i, j]),
                             rollouts_per_prompt=float(spent[i, -1] / (B * steps))))
    return rows


@float64
def cell(config: dict, key):
    """One cell (its ``part`` names the kind)."""
    part = config["part"]
    if part == "optimal":
        return _optimal(config)
    if part == "audit":
        return _audit(config)
    if part == "mc":
        return _mc(config, key)
    if part == "mc_mean":
        return _mc_mean(config, key)
    if part == "plugin":
        return _plugin(config, key)
    if part == "train":
        return _train(config, key)
    raise ValueError(f"part must be optimal, audit, mc, mc_mean, plugin or train, got {part!r}")
