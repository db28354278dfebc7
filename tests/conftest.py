import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

# A persistent XLA compilation cache, opt-in for local reruns only: GRPO_TEST_JAX_CACHE names a
# folder that the xdist workers and every subprocess the tests start inherit, so a program
# compiled once is loaded from disk elsewhere. It is off by default (and so in `make test` and CI):
# with jax 0.10.2 on CPU, two full runs on 2 cores died of a segmentation fault inside
# `executable.serialize()` while an xdist worker wrote a training loop's executable to the cache
# (tests/test_training.py, tests/test_train_family.py), which no test of the package can catch.
# Only the tests configure this; the package never changes JAX's configuration on import.
_CACHE_DIR = os.environ.get("GRPO_TEST_JAX_CACHE")
if _CACHE_DIR:
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _CACHE_DIR)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

import jax  # noqa: E402

if _CACHE_DIR:
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


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _budgets_without_the_test_process(monkeypatch):
    """Memory budgets in the tests are sized for the tiny models alone: the test process's own
    resident memory (1-3 GB, which ``resolve_chunk`` counts first) is left out; the tests of
    that accounting (tests/test_lm_memory.py) set it themselves."""
    from grpo_theory.advisor import estimate

    monkeypatch.setattr(estimate, "process_rss", lambda: 0)
