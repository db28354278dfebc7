"""The docstring examples (``>>>``) of the library run as printed.

Every module of ``grpo_theory`` (``grpo_theory.torch`` only where torch and transformers are
installed) goes through :mod:`doctest` in one fresh interpreter with JAX's default
configuration, as a user would run the examples: float64 stays off, the examples may not
switch it on (the exact routines scope it themselves), and an example that registers an
estimator leaves no trace in the test process.
"""

import json
import subprocess
import sys
import textwrap

import pytest

#: the entry points whose docstrings must carry a runnable example
REQUIRED = {
    "grpo_theory.core.exact.exact_mse", "grpo_theory.core.montecarlo.mc_mse",
    "grpo_theory.core.estimators.register", "grpo_theory.core.scaling.scaling_constants",
    "grpo_theory.core.scaling.optimal_group_size", "grpo_theory.optim.train.make_train",
    "grpo_theory.companions.length_weighting.length_weights",
    "grpo_theory.companions.packing.pack",
}

_RUNNER = r"""
import doctest, importlib, importlib.util, json, pkgutil, sys
import jax
x64_before = bool(jax.config.jax_enable_x64)
import grpo_theory
names = sys.argv[1:] or sorted(m.name for m in pkgutil.walk_packages(grpo_theory.__path__,
                                                                     "grpo_theory."))
torch_ok = all(importlib.util.find_spec(p) is not None for p in ("torch", "transformers"))
finder = doctest.DocTestFinder(exclude_empty=True)
flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
report, reports = {}, []
for name in names:
    if name.startswith("grpo_theory.torch") and not torch_ok:
        continue
    mod = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=flags)
    tests = [t for t in finder.find(mod, name) if t.examples]
    for t in tests:
        runner.run(t, out=reports.append)
    res = runner.summarize(verbose=False)
    report[name] = dict(failed=res.failed, attempted=res.attempted, tests=[t.name for t in tests])
out = dict(modules=report, failures="".join(reports), x64_before=x64_before,
           x64_after=bool(jax.config.jax_enable_x64))
print(json.dumps(out))
"""


def _run(*modules, path=None):
    env = {"JAX_PLATFORMS": "cpu", "PATH": ""}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    r = subprocess.run([sys.executable, "-c", _RUNNER, *modules], capture_output=True,
                       text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def library():
    """One run of every module's examples."""
    return _run()


def test_every_docstring_example_runs_as_printed(library):
    mods = library["modules"]
    assert len(mods) > 50  # the walk reached the subpackages
    failed = {name: r["failed"] for name, r in mods.items() if r["failed"]}
    assert not failed, f"{failed}\n{library['failures'][-6000:]}"


def test_the_main_entry_points_have_examples(library):
    tested = {t for r in library["modules"].values() for t in r["tests"]}
    assert REQUIRED <= tested, sorted(REQUIRED - tested)
    assert sum(r["attempted"] for r in library["modules"].values()) >= 3 * len(REQUIRED)


def test_examples_leave_jax_float64_off(library):
    assert library["x64_before"] is False and library["x64_after"] is False


def test_a_wrong_example_fails_the_run(tmp_path):
    """The check can fail: a module whose example prints something else is reported."""
    pkg = tmp_path / "grpo_theory_doctest_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent('''
        def double(x):
            """Twice ``x``.

            >>> double(2)
            5
            """
            return 2 * x
    '''))
    out = _run("grpo_theory_doctest_probe", path=tmp_path)
    r = out["modules"]["grpo_theory_doctest_probe"]
    assert r == dict(failed=1, attempted=1, tests=["grpo_theory_doctest_probe.double"])
    assert "Expected:\n    5\nGot:\n    4" in out["failures"]
