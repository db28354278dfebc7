"""The registered study ``rollout-allocation``: a small run passes, and its checks fail on
rivals (a biased rule listed as unbiased, the optimal allocation replaced by uniform, an audit
that disagrees with Monte Carlo)."""

import dataclasses

import numpy as np
import pytest

from grpo_theory import allocation as A
from grpo_theory.experiments.runner import run_experiment
from grpo_theory.problems import scaling_family_bandit
from grpo_theory.studies import rollout_allocation as ra
from grpo_theory.studies.rollout_allocation import training as T

SMALL = dataclasses.replace(ra.SETTINGS["quick"], policies=("initial",), mix=False,
                            batch_sizes=(1,), mc_batches=1500, plugin_previous=(8,),
                            plugin_draws=10, train_steps=20, train_budgets=(0.5, 1.0),
                            n_boot=200)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("alloc")
    return run_experiment(ra.EXPERIMENT, out, SMALL, seed=0, figures=True, progress=False)


def _checks(tables, **kw):
    return {c.name.split(";")[0]: c.passed for c in ra.checks(ra.summaries(tables, 200, **kw))}


def test_small_run_passes_and_draws_its_figures(small_run):
    assert small_run.verdict == "PASS", [(c.name, c.detail) for c in small_run.section.checks]
    d = small_run.tables["audit"]
    assert set(d.family) >= {"fixed", "dynamic_sampling", "conformal_stopping", "optimal"}
    assert len(set(d.family)) >= 7


def test_a_biased_rule_claimed_unbiased_fails(small_run):
    got = _checks(small_run.tables, unbiased=ra.UNBIASED + ("conformal_stopping",))
    assert got["rules with sizes fixed before sampling have zero bias (relative 1e-9 of the "
               "gradient-free scale sqrt(mse))"] is False


def test_uniform_in_place_of_the_optimal_allocation_fails(small_run):
    t = dict(small_run.tables)
    o = t["optimal"].copy()
    o["matched_ratio"] = 1.0
    t["optimal"] = o
    au = t["audit"].copy()
    au["opt_mse"] = au["unif_mse"]
    t["audit"] = au
    got = ra.checks(ra.summaries(t, 200))
    assert [c.passed for c in got if c.name.startswith("optimal allocation at or below")] == [
        False]


def test_an_unbiased_rule_beating_the_optimum_fails(small_run):
    t = dict(small_run.tables)
    au = t["audit"].copy()
    au["opt_mse"] = 1.5 * au["opt_mse"]  # fixed G* is 1.1x the optimum here
    t["audit"] = au
    got = ra.checks(ra.summaries(t, 200))
    assert [c.passed for c in got if c.name.startswith("optimal allocation's MSE <=")] == [False]


def test_an_audit_off_its_monte_carlo_fails(small_run):
    t = dict(small_run.tables)
    mc = t["mc"].copy()
    mc.loc[mc.index[0], "z_mse"] = 6.0
    t["mc"] = mc
    bad = [c for c in ra.checks(ra.summaries(t, 200)) if c.name.startswith("exact MSE")]
    assert bad[0].passed is False


def test_monte_carlo_drawn_around_the_fixed_rule_fails(small_run):
    """The Monte Carlo check's named rival (every rule with the fixed-G* rule's exact MSE and
    rollouts) lies beyond the bound in the small run; fed that rival (each differing rule's Monte
    Carlo moved onto the fixed rule's exact values, z recomputed), the check fails and the rival
    lies 0 se away. A rule of the fixed rule's sizes is the rival itself and is not counted."""
    t = dict(small_run.tables)
    mc = t["mc"].copy()
    good = [c for c in ra.checks(ra.summaries(t, 200)) if c.name.startswith("exact MSE")][0]
    assert good.passed and good.has_power and good.z_tol == 4.0 and good.rival_se > 4.0
    f = mc[mc.rule.str.startswith("fixed")].iloc[0]
    mc["mc_mse"] = f.exact_mse + (mc.mc_mse - mc.exact_mse)
    mc["mc_rollouts"] = f.exact_rollouts + (mc.mc_rollouts - mc.exact_rollouts)
    mc["z_mse"] = (mc.mc_mse - mc.exact_mse) / mc.mc_se
    se = mc.rollouts_se.where(mc.rollouts_se > 0)
    mc["z_rollouts"] = ((mc.mc_rollouts - mc.exact_rollouts) / se).fillna(0.0)
    bad = [c for c in ra.checks(ra.summaries(dict(t, mc=mc), 200))
           if c.name.startswith("exact MSE")][0]
    assert bad.passed is False and bad.rival_se < 1 and not bad.has_power


def test_training_rules_spend_as_the_audit_says():
    """The JAX conformal-stopping sampler spends what the exact audit says at theta0."""
    b = scaling_family_bandit(0.1, at_optimum=False)
    rule = T.rule_config("conformal_stopping", grid=(2, 4, 8))
    J, spent = T.train_rule(b, rule, 64, 1, 0.0, range(200))
    per_prompt = spent[:, 1] / 64
    exact = A.audit(b, A.conformal_stopping((2, 4, 8))).expected_rollouts
    se = per_prompt.std(ddof=1) / np.sqrt(per_prompt.size)
    assert abs(per_prompt.mean() - exact) < 4 * se


def test_optimal_training_rule_spends_exactly_its_budget():
    b = scaling_family_bandit(0.1, at_optimum=False)
    rule = T.rule_config("optimal", rollouts=6, max_group=48)
    J, spent = T.train_rule(b, rule, 8, 5, 0.1, range(3))
    np.testing.assert_array_equal(spent[:, -1], 8 * 6 * 5)


@pytest.mark.parametrize("call, name", [
    (lambda: T.rule_config("nope"), "rule"),
    (lambda: T.rule_config("fixed", group_size=1), "group_size"),
    (lambda: T.rule_config("fixed"), "parameters"),
    (lambda: T.rule_config("conformal_stopping", grid=(4, 2)), "grid"),
    (lambda: ra.cell(dict(part="nope"), None), "part"),
])
def test_bad_arguments_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_monte_carlo_mean_gradient_gates_the_bias_term(small_run):
    """On the difficulty mix the biased rules' Monte Carlo mean gradient matches the audit's
    E[ghat] and lies far from grad J; fed the rival (Monte Carlo drawn around grad J, the audit
    with its bias term dropped: z against the audit and against grad J swapped) the check fails,
    as it does for an audit off its Monte Carlo."""
    t = dict(small_run.tables)
    mm = t["mc_mean"]
    assert set(mm.member) == {"mix(p=0.1,0.9)"} and (mm.relative_bias > 0.05).sum() >= 4

    def gate(tables):
        return [c for c in ra.checks(ra.summaries(tables, 200))
                if c.name.startswith("Monte Carlo mean gradient")][0]

    good = gate(t)
    assert good.passed and good.has_power and good.rival_se > 4.0
    biased = mm.relative_bias > 0.05
    rival = mm.assign(z_mean=np.where(biased, mm.z_rival, mm.z_mean),
                      z_rival=np.where(biased, mm.z_mean, mm.z_rival))
    assert gate(dict(t, mc_mean=rival)).passed is False
    off = mm.copy()
    off.loc[off.index[0], "z_mean"] = 6.0
    assert gate(dict(t, mc_mean=off)).passed is False
