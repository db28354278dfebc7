"""One result interface and uniform argument names across the public API.

* every result type with standard errors satisfies :class:`grpo_theory.core.stats.Result`:
  ``conf_int(alpha)`` is a DataFrame (columns lower, upper) indexed by parameter name,
  ``summary(alpha)`` a DataFrame (estimate, std_err, ci_low, ci_high) whose numbers are the
  result's own attributes;
* no call site in the repository tuple-unpacks a ``conf_int`` table;
* public functions name the group size ``group_size`` and take randomness as ``key`` (``seed``
  kept where it was), old keywords mapped with a ``DeprecationWarning``.
"""

import ast
import importlib
import inspect
import pkgutil
import re
import warnings
from dataclasses import is_dataclass
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm, t as student_t

import grpo_theory
from grpo_theory import _validation as V
from grpo_theory.advisor.advise import AdviceResult
from grpo_theory.advisor.coverage import Coverage
from grpo_theory.advisor.result import ScalingEstimate
from grpo_theory.advisor.estimate import estimate_from_rollouts
from grpo_theory.companions import credit as C, length_weighting as LW
from grpo_theory.core.montecarlo import MCResult
from grpo_theory.core.stats import (Estimate, Result, ResultMixin, ScalarResultMixin, t_value,
                                    z_value)

ROOT = Path(__file__).resolve().parents[2]


# --- the inventory of result types ---------------------------------------------------------------

def _rollouts():
    rng = np.random.default_rng(0)
    z = rng.binomial(1, 0.5, size=(8, 5)).astype(float)
    return z, rng.normal(size=(8, 5, 3))


def _scaling_estimate(alpha=0.05):
    return estimate_from_rollouts(*_rollouts(), alpha=alpha)


def _estimate():
    e = Estimate(2.0, 0.5, 100)
    return e, {"value": (e.value, e.se)}


def _mc_result():
    lo, hi = Estimate(0.3, 0.01, 500).interval()
    r = MCResult("grpo", 4, 2, 500, 0, 0.3, 0.01, lo, hi, np.zeros(3), np.zeros(3), 0.2)
    return r, {"mse": (r.mse, r.se)}


def _scaling():
    e = _scaling_estimate()
    se = e.bse
    return e, {"c1": (e.c1, se[0]), "c2": (e.c2, se[1]), "c3": (e.c3, se[2]),
               "g_star": (e.g_star, np.nan), "c_v": (e.theta[3], se[3]),
               "grad_norm_sq": (e.grad_norm_sq, se[4])}


def _coverage():
    c = Coverage(np.array([0.9, 0.95, 0.93]), 0.94, 0.0, np.array([1.0, 2.0, 3.0]),
                 np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0]), 2.7, 200, 40, 8, "fieller")
    return c, {f"c{k + 1}": (c.mean[k], c.se_mean[k]) for k in range(3)}


def _advice():
    e, expected = _scaling()
    return AdviceResult(e, e.summary(), None, None, e.prompt_values), expected


def _allocation_problem():
    from grpo_theory import SoftmaxBandit
    return SoftmaxBandit(np.array([[0.3, -0.2], [0.1, 0.5]]), [[1.0, 0.2], [0.0, 0.7]],
                         [0.4, 0.6])


def _allocation_audit():
    from grpo_theory import allocation as A
    r = A.audit(_allocation_problem(), A.fixed(4), "grpo")
    return r, {n: (getattr(r, n), 0.0) for n in A.result.SUMMARY_ROWS}


def _monte_carlo_audit():
    from grpo_theory import allocation as A
    r = A.monte_carlo(_allocation_problem(), A.fixed(4), "grpo", n_batches=200, seed=0)
    expected = {"mse": (r.mse.value, r.mse.se),
                "expected_rollouts": (r.expected_rollouts.value, r.expected_rollouts.se)}
    expected.update({f"mean[{i}]": (r.mean[i], r.mean_se[i]) for i in range(r.mean.size)})
    return r, expected


#: every public result type that carries estimates with standard errors, with a builder
#: returning (instance, {row: (estimate attribute, standard error attribute)})
RESULTS = {"Estimate": _estimate, "MCResult": _mc_result, "ScalingEstimate": _scaling,
           "Coverage": _coverage, "AdviceResult": _advice, "AllocationAudit": _allocation_audit,
           "MonteCarloAudit": _monte_carlo_audit}
#: exact results: every standard error is zero, so every interval is the point itself
EXACT = {"AllocationAudit"}


@pytest.mark.parametrize("name", sorted(RESULTS))
def test_result_protocol(name):
    r, expected = RESULTS[name]()
    assert isinstance(r, Result) and isinstance(r, ResultMixin)
    ci95, ci90 = r.conf_int(), r.conf_int(0.1)
    for ci in (ci95, ci90):
        assert isinstance(ci, pd.DataFrame)
        assert list(ci.columns) == ["lower", "upper"]
        assert list(ci.index) == list(expected)
        assert all(ci.dtypes == np.float64)
    assert np.all(ci90["lower"] >= ci95["lower"]) and np.all(ci90["upper"] <= ci95["upper"])
    w90, w95 = (ci["upper"] - ci["lower"] for ci in (ci90, ci95))
    finite = np.isfinite(w95.to_numpy())  # G*'s Fieller interval may be unbounded above
    if name in EXACT:
        assert np.all(w95 == 0) and np.all(ci95["lower"] == r.summary()["estimate"])
    else:
        wide = finite & (w95.to_numpy() > 0)  # a coordinate with no spread has a zero width
        assert wide.sum() >= 1 and np.all(w90[wide] < w95[wide])
    s = r.summary()
    assert list(s.columns) == ["estimate", "std_err", "ci_low", "ci_high"]
    assert list(s.index) == list(expected)
    for row, (value, se) in expected.items():
        assert s.loc[row, "estimate"] == float(value)
        np.testing.assert_equal(s.loc[row, "std_err"], float(se))  # NaN == NaN here
    # the summary's intervals are conf_int's, at every level
    for a in (0.05, 0.2):
        np.testing.assert_array_equal(r.summary(a)[["ci_low", "ci_high"]].to_numpy(),
                                      r.conf_int(a).to_numpy())
    with pytest.raises(ValueError, match="alpha"):
        r.conf_int(1.5)


def test_normal_rows_are_estimate_plus_minus_z_se():
    for name in ("Estimate", "MCResult", "Coverage"):
        r, _ = RESULTS[name]()
        s = r.summary(0.1)
        h = z_value(0.1) * s.std_err
        np.testing.assert_array_equal(s.ci_low, s.estimate - h)
        np.testing.assert_array_equal(s.ci_high, s.estimate + h)


def test_scaling_estimate_tables_keep_their_numbers():
    """The interface change moved no number: the *_ci attributes, t rows and Fieller's G*."""
    e = _scaling_estimate()
    ci = e.conf_int()
    assert tuple(ci.loc["c1"]) == e.c1_ci and tuple(ci.loc["c3"]) == e.c3_ci
    assert tuple(ci.loc["g_star"]) == e.g_star_ci
    q = student_t.ppf(0.975, e.n_prompts - 1)
    lo, hi = ci.loc["c_v"]
    assert abs((hi - lo) / 2 - q * e.bse[3]) < 1e-12 * max(1.0, abs(q * e.bse[3]))
    # summary() without alpha uses the result's own level, as before
    e80 = _scaling_estimate(alpha=0.2)
    np.testing.assert_array_equal(e80.summary()[["ci_low", "ci_high"]].to_numpy(),
                                  e80.conf_int(0.2).to_numpy())


def test_scalar_results_give_a_plain_pair():
    e, _ = _estimate()
    lo, hi = e.interval(0.1)
    assert (lo, hi) == (2.0 - z_value(0.1) * 0.5, 2.0 + z_value(0.1) * 0.5)
    assert e.conf_int(0.1).loc["value"].tolist() == [lo, hi]
    r, _ = _mc_result()
    assert r.interval() == (r.ci_low, r.ci_high) and r.value == r.mse


def test_t_value_is_scipy_quantile():
    assert t_value(0.05, 7) == pytest.approx(student_t.ppf(0.975, 7), rel=1e-14)
    assert t_value(0.05, 1e12) == pytest.approx(norm.ppf(0.975), rel=1e-9)
    for df in (0, -1, "3", None, True):
        with pytest.raises(ValueError, match="df"):
            t_value(0.05, df)
    with pytest.raises(ValueError, match="alpha"):
        t_value(0.0, 5)


def _public_names(mod):
    """A face's ``__all__``; a module below the faces has no public list, so its public names
    are those it defines without a leading underscore (imported names belong to their home)."""
    if mod.__package__ == mod.__name__:  # a package: its __init__ is the face
        return mod.__all__
    return [n for n, obj in vars(mod).items()
            if not n.startswith("_") and getattr(obj, "__module__", None) == mod.__name__]


def _public_classes():
    for mod in _public_modules():
        for name in _public_names(mod):
            obj = getattr(mod, name, None)
            if inspect.isclass(obj) and obj.__module__.startswith("grpo_theory"):
                yield obj


def test_every_class_with_conf_int_is_in_the_inventory():
    """A new result type with intervals cannot bypass the protocol test above."""
    found = {c.__name__ for c in _public_classes()
             if any(hasattr(c, m) for m in ("conf_int", "summary", "interval"))
             and c not in (Result, ResultMixin, ScalarResultMixin)}
    assert found == set(RESULTS), found ^ set(RESULTS)


# --- call sites ---------------------------------------------------------------------------------

def _unpacked_conf_int(tree):
    """Lines where a tuple target is assigned a ``*.conf_int(...)`` call directly."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.For)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value if isinstance(node, ast.Assign) else node.iter
            if (any(isinstance(t, (ast.Tuple, ast.List)) for t in targets)
                    and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                    and value.func.attr == "conf_int"):
                out.append(node.lineno)
    return out


#: a tuple target assigned a conf_int call, in a documentation code block
UNPACK_DOC = re.compile(r"^\s*\w+\s*,\s*\w+\s*=\s*\S*\.conf_int\(.*$", re.M)


def test_no_call_site_unpacks_a_conf_int_table():
    code = "lo, hi = e.conf_int(0.1)\nci = e.conf_int()\nlo, hi = e.interval()"
    assert len(UNPACK_DOC.findall(code)) == 1
    assert len(UNPACK_DOC.findall("x = 1\n  lo, hi = r.conf_int()\nci = e.conf_int()")) == 1
    assert _unpacked_conf_int(ast.parse("lo, hi = e.conf_int()")) == [1]  # the check can fail
    assert _unpacked_conf_int(ast.parse("lo, hi = e.interval()\nci = e.conf_int()")) == []
    bad = []
    for folder in ("grpo_theory", "simulations", "tests", "benchmarks", "notebooks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text()
            if "conf_int" in text:
                bad += [f"{path.relative_to(ROOT)}:{n}"
                        for n in _unpacked_conf_int(ast.parse(text))]
    for path in sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]):
        for block in re.findall(r"```python\n(.*?)```", path.read_text(), re.S):
            code = "\n".join(line.split("#")[0] for line in block.splitlines())
            bad += [f"{path.relative_to(ROOT)}: {m}" for m in UNPACK_DOC.findall(code)]
    assert not bad, bad


# --- uniform argument names ---------------------------------------------------------------------

#: names of the group size other than ``group_size``
GROUP_NAMES = {"G", "g", "group", "groups", "n_group", "n_groupsize", "groupsize"}
#: names of randomness other than ``key`` / ``seed`` / ``seeds``
RANDOM_NAMES = {"rng", "rng_key", "prng_key", "random_state", "prng"}

#: true exceptions: formula helpers written in the paper's notation
GROUP_ALLOW = {
    "grpo_theory.companions.credit.binary_scalar",  # c(k, G), the closed form
    "grpo_theory.companions.credit.binary_scalar_from_estimator",  # c(k, G) read off a registry
    "grpo_theory.companions.dppo.enumerate_masks",  # all masks of a (B, G) batch
    "grpo_theory.experiments.lm_support.rank.zero_share_unbiased",  # C(k, G) / C(n, G)
    # the trace route's per-estimator terms, written in G like the closed forms they evaluate
    "grpo_theory.core.ustat.TraceRoute.leave_one_out",
    "grpo_theory.core.ustat.TraceRoute.prompt_baseline",
}
#: ``seed`` without ``key``: randomness that is not a JAX key stream
SEED_ALLOW = {
    # the runner's one cell: its seed is the cell's key seed (hashed into the cache key)
    "grpo_theory.experiments.runner.compute_cell",
    # named example problems: the seed names one fixed instance (cached by difficulty_problem)
    "grpo_theory.problems.default_bandit", "grpo_theory.problems.linear_bandit",
    "grpo_theory.problems.sequence_policy", "grpo_theory.problems.difficulty_policy",
    "grpo_theory.problems.difficulty_problem", "grpo_theory.problems.length_policy",
    # NumPy generators (np.random.default_rng(seed)): data sets and restarts, not JAX keys
    "grpo_theory.lm.task.generate_questions", "grpo_theory.lm.task.eval_set",
    "grpo_theory.lm.task.train_pool", "grpo_theory.lm.task.target_responses",
    "grpo_theory.lm.warmup.train_supervised", "grpo_theory.core.objective.maximise",
    "grpo_theory.allocation.reference.monte_carlo",
    "grpo_theory.advisor.rewards.summarize_rewards",  # the bootstrap over prompts
    "grpo_theory.allocation.optimal.estimated_constants",
    "grpo_theory.allocation.optimal.plug_in_mse",
    # the experiment runner's seed is part of a cell's identity (hashed into the cache key)
    "grpo_theory.experiments.runner.run_experiment",
    "grpo_theory.experiments.runner.run_experiments", "grpo_theory.experiments.runner.collect",
    "grpo_theory.experiments.runner.cell_key", "grpo_theory.experiments.store.cell_hash",
    "grpo_theory.experiments.store.CellStore.__init__",
    "grpo_theory.experiments.runner.InProcessExecutor.map_many",
    "grpo_theory.experiments.executors.DaskExecutor.map_many",
    # the command's entry point: its seed is the --seed option (advise.py's CLI options are
    # edited elsewhere; estimate_scaling_constants, which it calls, takes key=)
    "grpo_theory.advisor.advise.advise",
}
RANDOM_ALLOW = {
    "grpo_theory.core.montecarlo.mc_mse",  # rng: the PRNG implementation's name ("rbg", ...)
    "grpo_theory.lm.warmup.corrupt_answers",  # rng: a NumPy Generator shared with its caller
}


def _public_modules():
    """grpo_theory and every submodule (grpo_theory.torch needs the torch extra: its seed is a
    torch.Generator seed, checked by tests/test_torch_advisor.py)."""
    mods = [grpo_theory]
    for m in pkgutil.walk_packages(grpo_theory.__path__, "grpo_theory."):
        if not m.name.startswith("grpo_theory.torch"):
            mods.append(importlib.import_module(m.name))
    return mods


def _public_functions():
    """``(qualified name, function)`` of every public function and public method: a face's
    ``__all__`` and what each module defines (:func:`_public_names`)."""
    seen = {}
    for mod in _public_modules():
        for name in _public_names(mod):
            obj = getattr(mod, name, None)
            if inspect.isfunction(obj) or (callable(obj) and hasattr(obj, "__wrapped__")
                                           and not inspect.isclass(obj)):
                seen.setdefault(f"{obj.__module__}.{obj.__name__}", obj)
            elif inspect.isclass(obj) and obj.__module__.startswith("grpo_theory"):
                for k, v in vars(obj).items():
                    if not inspect.isfunction(v) or (k.startswith("_") and k != "__init__"):
                        continue
                    if k == "__init__" and is_dataclass(obj):
                        continue  # generated from the fields: record attributes, not arguments
                    seen.setdefault(f"{obj.__module__}.{obj.__qualname__}.{k}", v)
    return seen


def _violations(qualname, fn):
    params = set(inspect.signature(fn).parameters)
    out = []
    if params & GROUP_NAMES and qualname not in GROUP_ALLOW:
        out.append(f"{qualname}: group size {sorted(params & GROUP_NAMES)} (use group_size)")
    if params & RANDOM_NAMES and qualname not in RANDOM_ALLOW:
        out.append(f"{qualname}: randomness {sorted(params & RANDOM_NAMES)} (use key)")
    if "seed" in params and "key" not in params and qualname not in SEED_ALLOW:
        out.append(f"{qualname}: seed without key")
    return out


def test_the_name_check_can_fail():
    def f(x, G, seed=0):
        return x

    def g(x, group_size, rng=None, seed=0, key=None):
        return x

    assert len(_violations("m.f", f)) == 2 and len(_violations("m.g", g)) == 1
    assert _violations("m.h", lambda x, group_size, seed=0, key=None: x) == []


def test_public_api_uses_uniform_names():
    fns = _public_functions()
    assert len(fns) > 150  # the walk reached the submodules
    bad = [v for q, f in sorted(fns.items()) for v in _violations(q, f)]
    assert not bad, "\n".join(bad)
    stale = (GROUP_ALLOW | SEED_ALLOW | RANDOM_ALLOW) - set(fns)
    assert not stale, f"allow-list entries that are no public function: {sorted(stale)}"


RENAMED = ["grpo_theory.companions.credit.rank_study",
           "grpo_theory.companions.credit.zero_advantage_probability",
           "grpo_theory.companions.credit.train_grpo_records",
           "grpo_theory.companions.length_weighting.conditional_advantages",
           "grpo_theory.companions.length_weighting.exact_expected_gradient",
           "grpo_theory.companions.length_weighting.enumerate_expected_gradient",
           "grpo_theory.companions.length_weighting.alpha_sweep",
           "grpo_theory.companions.length_weighting.train_length_weighted",
           "grpo_theory.companions.length_weighting.expected_flow",
           "grpo_theory.lm.training.dppo.sample_batch", "grpo_theory.lm.training.dppo.train_dppo"]


def test_renamed_functions_keep_the_old_keyword_for_one_release():
    fns = _public_functions()
    renamed = {q for q, f in fns.items() if getattr(f, "__renamed_arguments__", None)}
    assert renamed == set(RENAMED)
    for q in RENAMED:
        assert set(fns[q].__renamed_arguments__.values()) == {"group_size"}
        assert "group_size" in inspect.signature(fns[q]).parameters


def test_old_keyword_warns_and_gives_the_same_numbers():
    new = C.zero_advantage_probability(0.3, group_size=4)
    with pytest.warns(DeprecationWarning, match="'G' is deprecated.*use 'group_size'"):
        old = C.zero_advantage_probability(0.3, G=4)
    assert float(old) == float(new) == pytest.approx(0.3**4 + 0.7**4, rel=1e-15)
    c_new = LW.conditional_advantages("grpo", np.array([0.25, 0.5]), group_size=4)
    with pytest.warns(DeprecationWarning, match="conditional_advantages"):
        c_old = LW.conditional_advantages("grpo", np.array([0.25, 0.5]), G=4)
    for a, b in zip(c_old, c_new):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match="group_size"):
        C.zero_advantage_probability(0.3, G=4, group_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name warns about nothing
        C.zero_advantage_probability(0.3, group_size=4)


def test_renamed_arguments_decorator_checks_its_map():
    with pytest.raises(ValueError, match="new name"):
        V.renamed_arguments(G="G")
    with pytest.raises(ValueError, match="new name"):
        V.renamed_arguments(G="not an identifier")


def test_key_and_seed_agree():
    """``key=`` is the seed's key: the same numbers, and key wins over seed."""
    def reward(p, t, L):
        return float(t[0] == p % 2)

    a = C.MLPSequencePolicy(reward, 2, 2, 2, hidden=3, seed=7)
    b = C.MLPSequencePolicy(reward, 2, 2, 2, hidden=3, seed=0, key=jax.random.PRNGKey(7))
    np.testing.assert_array_equal(np.asarray(a.params), np.asarray(b.params))
    assert V.random_key(3, None).tolist() == jax.random.PRNGKey(3).tolist()
    assert V.random_key(0, 3).tolist() == jax.random.PRNGKey(3).tolist()  # an integer key
    with pytest.raises(ValueError, match="key"):
        V.random_key(0, "not a key")
