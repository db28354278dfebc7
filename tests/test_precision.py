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
