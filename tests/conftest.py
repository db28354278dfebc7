"""Settings and autouse fixtures of every test: this file sits at the root of tests/, so each
layer folder (core/, optim/, companions/, lm/, ...) inherits it. Builders shared between folders
live in tests/support/, fixtures shared within one folder in that folder's conftest.py."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

# A persistent XLA compilation cache, opt-in for local reruns only: GRPO_TEST_JAX_CACHE names a
# folder that the xdist workers and every subprocess the tests start inherit, so a program
# compiled once is loaded from disk elsewhere. It is off by default (and so in `make test` and CI).
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

# XLA's optimisation passes are off in the test processes (GRPO_TEST_XLA_OPTIMIZE=1 turns them
# back on): the tests' programs are tiny and the suite is bound by their compilation, which these
# passes make about a third dearer (a set of 157 tests, the doctests, the pinned numbers, the
# docs tables, Monte Carlo and the memory tests among them, passed either way in 292.6 s of CPU
# without the passes against 396.0 s with them). What the tests check, values to their
# tolerances and bit-for-bit equalities between routes, does not depend on them. Subprocesses the
# tests start (the CLI, notebooks, torchrun, the memory benchmarks) run as users run, with them.
if os.environ.get("GRPO_TEST_XLA_OPTIMIZE", "0") != "1":
    jax.config.update("jax_disable_most_optimizations", True)

# The test process opts into float64 itself (the package never changes JAX's configuration on
# import; tests/contracts/test_precision.py checks that the public routines are float64 without this).
jax.config.update("jax_enable_x64", True)

from hypothesis import settings  # noqa: E402

settings.register_profile("ci", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("ci")


import gc  # noqa: E402

import pytest  # noqa: E402

# Every program XLA compiles on the CPU holds about three memory mappings of its own until its
# jit cache entry goes; Linux stops a process at vm.max_map_count (65,530 by default), and XLA
# then dies of a segmentation fault in its next compilation. Without this guard the two xdist
# workers of a full run on 2 cores ended at 60,171 and 64,302 mappings (four runs lost one test
# each to that crash), so the caches are cleared whenever a test leaves more than this many.
_MAPPING_LIMIT = 20_000


def _mappings() -> int:
    try:
        with open("/proc/self/maps", "rb") as fh:
            return fh.read().count(b"\n")
    except OSError:
        return 0


@pytest.fixture(autouse=True)
def _bounded_compiled_programs():
    """Clear JAX's compilation caches after a test once the process holds more than
    ``_MAPPING_LIMIT`` memory mappings (results do not change; only recompilation is paid)."""
    yield
    if _mappings() > _MAPPING_LIMIT:
        jax.clear_caches()
        gc.collect()


@pytest.fixture(autouse=True)
def _budgets_without_the_test_process(monkeypatch):
    """Memory budgets in the tests are sized for the tiny models alone: the test process's own
    memory (1-3 GB resident and the other tests' live arrays, which ``resolve_chunk`` counts
    first) is left out; the tests of that accounting (tests/lm/test_lm_memory.py) set it
    themselves."""
    from grpo_theory.lm.budget import options

    monkeypatch.setattr(options, "resident_base", lambda params: 0)
