"""No global state on import: float64 is scoped to the exact routines, never switched on globally.

The test process itself runs with x64 on (tests/conftest.py); these checks run in a fresh
interpreter with JAX's default configuration.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

import grpo_theory as gt
from grpo_theory import problems

_CHILD = r"""
import json, sys
import jax
before = bool(jax.config.jax_enable_x64)
import grpo_theory as gt
after_import = bool(jax.config.jax_enable_x64)
loaded_core = sorted(m for m in sys.modules if m.startswith("grpo_theory."))
from grpo_theory import problems
b = problems.default_bandit()
lb = problems.linear_bandit()
out = {
    "before": before, "after_import": after_import, "loaded_on_import": loaded_core,
    "exact_mse": [float(gt.exact_mse(b, e, 4, 2)) for e in ("vanilla", "oracle", "grpo", "grpo_std")],
    "linear_mse": float(gt.exact_mse(lb, "grpo", 3)),
    "c": list(map(float, gt.scaling_constants(b).__dict__.values())),
    "grad_dtype": str(gt.exact_gradient(b).dtype),
    "mc": float(gt.mc_mse(b, "grpo", 4, 2, n_reps=2000, seed=3).mse),
    "after_calls": bool(jax.config.jax_enable_x64),
    "user_default_dtype": str(jax.numpy.ones(2).dtype),
}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def child():
    """One fresh interpreter for the module (JAX defaults: x64 off)."""
    res = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                         env={"JAX_PLATFORMS": "cpu", "PATH": ""}, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_import_and_calls_leave_x64_alone_and_results_stay_float64(child):
    out = child
    assert out["before"] is False and out["after_import"] is False and out["after_calls"] is False
    assert out["user_default_dtype"] == "float32"  # the caller's JAX is untouched
    assert out["grad_dtype"] == "float64"
    b, lb = problems.default_bandit(), problems.linear_bandit()
    ref = [float(gt.exact_mse(b, e, 4, 2)) for e in ("vanilla", "oracle", "grpo", "grpo_std")]
    np.testing.assert_allclose(out["exact_mse"], ref, rtol=1e-10, atol=0)
    np.testing.assert_allclose(out["linear_mse"], float(gt.exact_mse(lb, "grpo", 3)), rtol=1e-10)
    np.testing.assert_allclose(out["c"], list(gt.scaling_constants(b).__dict__.values()),
                               rtol=1e-10)
    # same seed, same draws, same float64 arithmetic: identical Monte Carlo estimate
    np.testing.assert_allclose(out["mc"], gt.mc_mse(b, "grpo", 4, 2, n_reps=2000, seed=3).mse,
                               rtol=1e-10)


def test_import_is_lazy(child):
    """`import grpo_theory` loads no submodule; names load on first use."""
    out = child
    assert out["loaded_on_import"] == []
    assert "exact_mse" in dir(gt) and callable(gt.exact_mse)


def _modules():
    import pathlib
    root = pathlib.Path(gt.__file__).parent
    return sorted(root.rglob("*.py")) + sorted((root.parent / "simulations").rglob("*.py"))


def test_precision_is_declared_at_the_def_never_by_rewriting_globals():
    """No module hands its globals to a helper that rewraps them (the old scope helper); the exact
    routines carry ``@float64`` at their ``def``."""
    import ast
    offenders = []
    for path in _modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            # a module's namespace handed to a helper that rewrites it
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) not in (
                    "set", "sorted", "list", "dict") and any(
                    isinstance(a, ast.Call) and getattr(a.func, "id", None) == "globals"
                    for a in node.args):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
    import grpo_theory._precision as P
    assert not hasattr(P, "scope_module")
    # the public exact routines are float64 by their decorator
    from grpo_theory.core import exact, montecarlo, scaling
    for fn in (exact.exact_mse, exact.exact_gradient, montecarlo.mc_mse,
               scaling.scaling_constants):
        assert getattr(fn, "__grpo_float64__", False), fn.__name__


def test_every_study_cell_declares_its_precision_and_the_runner_adds_none(monkeypatch):
    """Each study's cell is ``@float64`` at its def; ``compute_cell`` leaves x64 as it found it."""
    import dataclasses

    import jax
    from grpo_theory.experiments import registry, runner
    for name, exp in registry.experiments().items():
        assert getattr(exp.cell, "__grpo_float64__", False), name
    exp = registry.get("mse-table")
    cell0 = exp.cells(exp.settings["quick"])[0]
    seen = []

    def spy(config, key):
        seen.append(bool(jax.config.jax_enable_x64))
        return {"x": 1.0}

    monkeypatch.setattr(runner, "_find", lambda mod, n: dataclasses.replace(exp, cell=spy))
    for x64 in (False, True):
        with jax.enable_x64(x64):
            runner.compute_cell("grpo_theory.studies.mse_table", "mse-table", cell0, 0)
    assert seen == [False, True]
