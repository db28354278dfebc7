"""Importing grpo_theory.torch keeps JAX from preallocating GPU memory beside torch, unless the
user set XLA_PYTHON_CLIENT_PREALLOCATE already."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

CODE = ("import os, grpo_theory.torch, jax; "
        "print(os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE'))")


def _run(env):
    r = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def test_preallocation_is_off_by_default_and_the_users_choice_is_kept():
    env = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    assert _run(env) == "false"
    assert _run(dict(env, XLA_PYTHON_CLIENT_PREALLOCATE="true")) == "true"
