"""The core's policy contracts (:class:`EnumerablePolicy`, :class:`GradientProblem`).

A user's subclass that implements only the abstract core gets every derived capability and equals
a built-in policy on the same numbers; an incomplete one gets an error naming what it lacks; and
no module of ``grpo_theory/core`` or ``grpo_theory/optim`` probes a policy's attributes or tests
its concrete class (rival: a reintroduced ``hasattr``/``getattr`` probe or concrete-class check
makes the scan fail, as the scan of the old probes shows).
"""

import ast
import inspect
import pathlib
import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import grpo_theory
from grpo_theory import problems
from grpo_theory.core import (EnumerablePolicy, GradientProblem, PolicyWrapper, SoftmaxBandit,
                              as_problem, as_structure, exact_mse)
from grpo_theory.optim import TrainConfig, make_train
from grpo_theory.optim.theory import GaussianBandit
from grpo_theory.optim.objective import max_objective
from grpo_theory.optim.train import train_schedules

ROOT = pathlib.Path(grpo_theory.__file__).parent


class Tabular(EnumerablePolicy):
    """A user's policy: the core only (``log_probs`` and the three fields)."""

    def __init__(self, logits, reward_means):
        self.params = jnp.asarray(logits, dtype=jnp.float64)
        self.reward_means = jnp.asarray(reward_means, dtype=jnp.float64)
        self.prompt_probs = jnp.full(self.params.shape[0], 1.0 / self.params.shape[0])

    def log_probs(self, params=None):
        theta = self.params if params is None else params
        return jax.nn.log_softmax(theta, axis=-1)


def _derived(doc: str) -> list:
    """The capabilities of the "Derived, with defaults" bullet list of a contract's docstring."""
    para = doc.split("Derived, with defaults", 1)[1].split("\n\n", 2)[1]
    heads = [item.split(": ", 1)[0] for item in para.split("\n* ")]  # the names of each bullet
    return [m for head in heads for m in re.findall(r":meth:`([a-z_]+)`", head)]


@pytest.fixture(scope="module")
def pair():
    rng = np.random.default_rng(3)
    logits, mu = rng.normal(size=(3, 4)), rng.uniform(size=(3, 4))
    return Tabular(logits, mu), SoftmaxBandit(logits, mu)


def test_the_docstring_lists_the_derived_capabilities_and_a_user_policy_inherits_them():
    derived = _derived(inspect.getdoc(EnumerablePolicy))
    assert derived[:4] == ["with_params", "probs", "scores", "problem"]
    assert {"score_structure", "max_objective", "sample_groups", "response_weights",
            "step_record"} <= set(derived)
    for name in derived:
        assert getattr(Tabular, name) is getattr(EnumerablePolicy, name), name
    assert _derived(inspect.getdoc(GradientProblem)) == ["max_objective", "objective_and_gap"]


def test_a_user_policy_gets_every_capability_and_equals_the_builtin(pair):
    user, ref = pair
    dp, dr = user.problem(), ref.problem()
    for f in ("prompt_probs", "probs", "scores", "reward_means"):
        np.testing.assert_array_equal(getattr(dp, f), getattr(dr, f))
    for m in ("objective", "values", "prompt_gradients", "gradient", "oracle_covariances"):
        np.testing.assert_allclose(getattr(user, m)(), getattr(ref, m)(), rtol=0, atol=1e-14)
    assert user.max_objective() == ref.max_objective() == max_objective(user)
    for a, b in zip(user.sample_groups(5, 4, 3), ref.sample_groups(5, 4, 3)):
        np.testing.assert_array_equal(a, b)
    # the exact routes: the user's dense default structure equals the built-in tabular one
    assert type(as_structure(user)).__name__ == "ExplicitScores"
    np.testing.assert_allclose(exact_mse(user, "grpo", 4), exact_mse(ref, "grpo", 4),
                               rtol=1e-10, atol=1e-14)
    assert as_problem(user).probs.shape == (3, 4)
    # a pytree: a jitted function traces it, with_params keeps the type
    moved = user.with_params(user.params + 1.0)
    assert type(moved) is Tabular
    np.testing.assert_allclose(jax.jit(lambda p: p.objective())(moved),
                               ref.with_params(ref.params + 1.0).objective(), rtol=0, atol=1e-14)
    # the training loop and its legacy entry take it: the same runs as the built-in
    runs = [train_schedules(p, "grpo", 2, 3, 4, [("constant", 0.5, 0.0)], seeds=[0, 1])[0]
            for p in (user, ref)]
    for k in ("objective", "gap", "theta_final"):
        np.testing.assert_allclose(getattr(runs[0], k), getattr(runs[1], k), rtol=0, atol=1e-12)
    # rival: other numbers give other results (the derived capabilities read log_probs)
    other = Tabular(np.asarray(user.params) * 2.0, user.reward_means)
    assert abs(float(other.objective() - ref.objective())) > 1e-4


def test_a_wrapper_delegates_everything(pair):
    user, _ = pair
    wrapped = PolicyWrapper(user)
    np.testing.assert_array_equal(wrapped.problem().scores, user.problem().scores)
    assert wrapped.max_objective() == user.max_objective()
    assert wrapped.response_weights(None) is None and wrapped.step_record(*[None] * 5) is None
    assert type(wrapped.with_params(user.params * 0).policy) is Tabular
    with pytest.raises(ValueError, match="policy must be an EnumerablePolicy"):
        PolicyWrapper(user.problem())


def test_an_incomplete_policy_gets_an_error_naming_what_it_lacks():
    class NoLogProbs(EnumerablePolicy):
        def __init__(self):
            self.params = jnp.zeros((1, 2))
            self.reward_means = jnp.ones((1, 2))
            self.prompt_probs = jnp.ones(1)

    class NoRewards(EnumerablePolicy):
        def __init__(self):
            self.params = jnp.zeros((1, 2))

        def log_probs(self, params=None):
            return jax.nn.log_softmax(self.params if params is None else params, axis=-1)

    with pytest.raises(NotImplementedError, match="NoLogProbs must implement log_probs"):
        NoLogProbs().problem()
    with pytest.raises(NotImplementedError, match="log_probs"):
        exact_mse(NoLogProbs(), "grpo", 2)
    with pytest.raises(AttributeError, match=r"NoRewards must set self.prompt_probs \(the"):
        NoRewards().problem()
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        NoRewards().nope  # noqa: B018 - other names keep the ordinary error


class _Fields(NamedTuple):
    bandit: GaussianBandit


class PlainGaussian(_Fields, GradientProblem):
    """A user's gradient problem: the core only (the Gaussian bandit's objective and draws)."""

    __slots__ = ()

    @property
    def params(self):
        return self.bandit.params

    def objective(self, params):
        return self.bandit.objective(params)

    def sample_gradient(self, key, params, estimator, batch_size, group_size):
        return self.bandit.sample_gradient(key, params, estimator, batch_size, group_size)


def test_a_user_gradient_problem_trains_as_the_builtin():
    gb = problems.default_gaussian_bandit()
    cfg = TrainConfig(batch_size=2, group_size=3, n_steps=8, log_every=4, lr=0.1)
    sup = float(gb.max_objective())
    user = make_train(PlainGaussian(gb), "grpo", cfg, sup_objective=sup)(0)
    ref = make_train(gb, "grpo", cfg)(0)
    np.testing.assert_array_equal(user.theta_final, ref.theta_final)
    np.testing.assert_allclose(user.objective, ref.objective, rtol=0, atol=1e-12)
    # the default gap is sup - J; the Gaussian bandit's override is its closed form
    np.testing.assert_allclose(user.gap, sup - np.asarray(user.objective), rtol=0, atol=0)
    np.testing.assert_allclose(user.gap, ref.gap, rtol=0, atol=1e-12)
    # the default max_objective asks for sup_objective; a missing core method is named
    with pytest.raises(ValueError, match="sup_objective"):
        make_train(PlainGaussian(gb), "grpo", cfg)

    class Half(_Fields, GradientProblem):
        __slots__ = ()

        @property
        def params(self):
            return jnp.zeros(2)

    with pytest.raises(NotImplementedError, match="Half must implement sample_gradient"):
        make_train(Half(gb), "grpo", cfg, sup_objective=0.0)(0)
    with pytest.raises(ValueError, match="GradientProblem"):
        make_train(gb._asdict(), "grpo", cfg)


# --- no probes: callers in core/ and optim/ dispatch on the two contracts -----------------------

#: the members of the contracts: a getattr of one with a default is a probe
_MEMBERS = {"params", "reward_means", "prompt_probs", "log_probs", "probs", "scores", "problem",
            "score_structure", "objective", "values", "gradient", "max_objective", "gap",
            "sample_groups", "response_weights", "step_record", "sample_gradient",
            "objective_and_gap", "with_params", "policy", "lengths"}
#: concrete policy classes: a caller below the companions tests none of them
_CONCRETE = {"SoftmaxBandit", "LinearSoftmaxBandit", "SequencePolicy", "MLPSequencePolicy",
             "GaussianBandit", "_EnumerablePolicy"}


def _probes(source: str) -> list:
    """``(line, what)`` for each attribute probe or concrete-class check of ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        name, args = node.func.id, node.args
        if name == "hasattr":
            found.append((node.lineno, "hasattr"))
        elif (name == "getattr" and len(args) == 3 and isinstance(args[1], ast.Constant)
              and args[1].value in _MEMBERS):
            found.append((node.lineno, f"getattr {args[1].value}"))
        elif name == "isinstance" and len(args) == 2:
            kinds = args[1].elts if isinstance(args[1], ast.Tuple) else [args[1]]
            names = {k.id if isinstance(k, ast.Name) else getattr(k, "attr", "") for k in kinds}
            if names & _CONCRETE:
                found.append((node.lineno, f"isinstance {sorted(names & _CONCRETE)}"))
    return found


def test_the_scan_finds_the_old_probes():
    old = '''
wfn = getattr(problem, "response_weights", None)
if hasattr(problem, "probs"): pass
if isinstance(policy, (SoftmaxBandit, SequencePolicy)): pass
ok = isinstance(policy, EnumerablePolicy) and getattr(key, "dtype", None)
'''
    assert [w for _, w in _probes(old)] == ["getattr response_weights", "hasattr",
                                            "isinstance ['SequencePolicy', 'SoftmaxBandit']"]


def test_no_module_of_core_or_optim_probes_a_policy():
    files = sorted((ROOT / "core").glob("*.py")) + sorted((ROOT / "optim").glob("*.py"))
    assert {"train.py", "objective.py", "gram.py", "problem.py"} <= {f.name for f in files}
    bad = {f"{f.relative_to(ROOT)}:{line}": what for f in files
           for line, what in _probes(f.read_text())}
    assert bad == {}, bad
