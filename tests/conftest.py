import os
import shutil
import uuid
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

# A persistent XLA compilation cache for this test run only: the xdist workers and every
# subprocess the tests start (CLI runs, notebook kernels, Dask workers) inherit these variables,
# so a program compiled once in the run is loaded from disk elsewhere instead of recompiled.
# The folder is new for each run (the controller names it before the workers start and removes
# it at the end), so no test can depend on a cache left by an earlier run; a folder named in
# GRPO_TEST_JAX_CACHE beforehand is used and kept instead (for local reruns). Only the tests
# configure this; the package never changes JAX's configuration on import.
_CACHE_ROOT = Path(__file__).resolve().parent.parent / ".pytest_jax_cache"
_OWN_CACHE = "GRPO_TEST_JAX_CACHE" not in os.environ  # True in the controller (or a plain run)
if _OWN_CACHE:
    os.environ["GRPO_TEST_JAX_CACHE"] = str(_CACHE_ROOT / uuid.uuid4().hex)
_CACHE_DIR = os.environ["GRPO_TEST_JAX_CACHE"]
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _CACHE_DIR)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

import jax  # noqa: E402

jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs",
                  float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))
jax.config.update("jax_persistent_cache_min_entry_size_bytes",
                  int(os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"]))

# The test process opts into float64 itself (the package never changes JAX's configuration on
# import; tests/test_precision.py checks that the public routines are float64 without this).
jax.config.update("jax_enable_x64", True)

from hypothesis import settings  # noqa: E402

settings.register_profile("ci", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("ci")


def pytest_unconfigure(config):
    """The process that named this run's compilation cache removes it when the run ends."""
    if _OWN_CACHE and not hasattr(config, "workerinput"):
        if os.environ.get("GRPO_TEST_KEEP_JAX_CACHE"):
            print(f"\nJAX compilation cache kept: {_CACHE_DIR} "
                  f"({sum(1 for _ in Path(_CACHE_DIR).glob('*'))} entries)")
            return
        shutil.rmtree(_CACHE_DIR, ignore_errors=True)


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _budgets_without_the_test_process(monkeypatch):
    """Memory budgets in the tests are sized for the tiny models alone: the test process's own
    resident memory (1-3 GB, which ``resolve_chunk`` counts first) is left out; the tests of
    that accounting (tests/test_lm_memory.py) set it themselves."""
    from grpo_theory.advisor import estimate

    monkeypatch.setattr(estimate, "process_rss", lambda: 0)
