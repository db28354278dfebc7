"""The plotting module draws off screen by default and keeps a backend the user chose (a
notebook's inline backend arrives as ``MPLBACKEND``): ``plt.show()`` then displays."""

import os
import subprocess
import sys

import pytest

CODE = "import grpo_theory.plotting, matplotlib; print(matplotlib.get_backend().lower())"


def _backend(env_extra):
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip().splitlines()[-1]


def test_off_screen_by_default():
    assert _backend({}) == "agg"


@pytest.mark.parametrize("backend", ["svg", "pdf"])
def test_a_chosen_backend_is_kept(backend):
    """The rival, a module that forces Agg, would print agg here."""
    assert _backend({"MPLBACKEND": backend}) == backend
