"""grpo_theory.lm.budget.memory: the chunk a memory budget allows, memory sizes, the default budget,
XLA's out-of-memory error as a ValueError; and the streamed statistics that use them
(lm.budget.options.resolve_chunk, the pass-1 calls of lm_rollout_statistics)."""

import gc
import re
import math

import jax
import numpy as np
import pytest

from grpo_theory.advisor import estimate as E
from grpo_theory.lm.budget import memory as M
from grpo_theory.lm.budget import resolve_chunk, score_memory
from grpo_theory.lm.budget import options as O
from grpo_theory.lm.budget import statistics as S
from grpo_theory.lm.model import ModelConfig, init_params, make_apply
from grpo_theory.lm.policy import LMPolicy
from grpo_theory.lm.task import EOS

OOM = "RESOURCE_EXHAUSTED: Out of memory allocating 69424609312 bytes."


def test_chunk_for_budget_arithmetic():
    # D = 1000 float32 parameters, one accumulator, no margin: fixed D (2*4 + 8) = 16000 bytes,
    # each per-sample score D (4 + 8) = 12000 bytes
    kw = dict(dtype_bytes=4, overhead_factor=1.0, n_items=100)
    assert M.chunk_bytes(1000, 3, dtype_bytes=4, overhead_factor=1.0) == 16000 + 3 * 12000
    assert M.chunk_for_budget(1000, memory_budget_bytes=16000 + 3 * 12000, **kw) == 3
    assert M.chunk_for_budget(1000, memory_budget_bytes=16000 + 4 * 12000 - 1, **kw) == 3
    assert M.chunk_for_budget(1000, memory_budget_bytes=16000 + 12000, **kw) == 1
    # never more than the items to compute
    assert M.chunk_for_budget(1000, memory_budget_bytes=10**9, **dict(kw, n_items=7)) == 7
    # bfloat16 (2 bytes) and two accumulators: fixed D (4 + 16), per score D 10
    assert M.chunk_for_budget(1000, dtype_bytes=2, n_accumulators=2, overhead_factor=1.0,
                              memory_budget_bytes=20000 + 5 * 10000, n_items=100) == 5
    # the default margin: the chunk is the largest whose estimated bytes fit
    for d, budget in [(134_515_008, 16 * 10**9), (494_032_768, 20 * 2**30), (777, 10**7)]:
        c = M.chunk_for_budget(d, dtype_bytes=4, memory_budget_bytes=budget, n_items=10**6)
        assert M.chunk_bytes(d, c, dtype_bytes=4) <= budget < M.chunk_bytes(d, c + 1,
                                                                           dtype_bytes=4)


def test_smollm2_user_report_numbers():
    """The reported failure: SmolLM2-135M at chunk 64 asked for 69.4 GB; the budget's chunk
    on a 16 GB machine is small and its estimate near the 8.0 GB measured at chunk 4."""
    d = 134_515_008
    assert M.chunk_bytes(d, 64, dtype_bytes=4) > 69_424_609_312
    c = M.chunk_for_budget(d, dtype_bytes=4, memory_budget_bytes=8 * 10**9, n_items=128)
    assert 1 <= c <= 4
    assert 6e9 < M.chunk_bytes(d, 4, dtype_bytes=4, overhead_factor=1.0) < 9e9


SMOLLM2 = dict(n_layers=30, d_model=576, d_ff=1536, n_heads=9, vocab_size=49152)
QWEN05 = dict(n_layers=24, d_model=896, d_ff=4864, n_heads=14, vocab_size=151936)


def test_ghost_row_bytes_formula_and_the_measured_pass():
    # a = T L (6 d + 4 f + 2 H T) b + 12 R V, by hand for SmolLM2-135M at T = 64, R = 24
    a = M.ghost_row_bytes(SMOLLM2, 64, 24)
    assert a == 64 * 30 * (6 * 576 + 4 * 1536 + 2 * 9 * 64) * 4 + 12 * 24 * 49152
    # benchmarks/results/ghost_norms.md: 16 sequences held 3.97 - 1.41 - 1.08 GB above the
    # process base and the float64 output, about 92 MB each; the model says 97 MB
    assert 0.9 < a / ((3.97 - 1.41 - 1.08) * 1e9 / 16) < 1.2
    assert M.ghost_row_bytes(SMOLLM2, 64, 24, dtype_bytes=2) < a  # bfloat16 activations
    for kw, match in [(dict(seq_len=0), "seq_len"), (dict(response_len=65), "response_len"),
                      (dict(arch={"n_layers": 2}), "arch must be")]:
        args = dict(arch=SMOLLM2, seq_len=64, response_len=24)
        with pytest.raises(ValueError, match=match):
            M.ghost_row_bytes(**{**args, **kw})


def test_ghost_route_budget_fits_what_per_sample_scores_cannot():
    """Qwen2.5-0.5B at a 7.77 GiB budget: one per-sample score already needs 14.3 GiB (refused,
    the issue's "a 0.5B model cannot run at all"); the ghost route needs the parameters, the
    accumulator and one sequence's activations."""
    d, budget = 494_032_768, int(7.77 * 2**30)
    with pytest.raises(ValueError, match="per-sample statistics .* even chunk 1"):
        M.chunk_for_budget(d, dtype_bytes=4, memory_budget_bytes=budget, n_items=128)
    a = M.ghost_row_bytes(QWEN05, 64, 24)
    c = M.chunk_for_budget(d, dtype_bytes=4, memory_budget_bytes=budget, n_items=128,
                           row_bytes=a)
    assert M.chunk_bytes(d, c, dtype_bytes=4, row_bytes=a) <= budget
    assert budget < M.chunk_bytes(d, c + 1, dtype_bytes=4, row_bytes=a)
    # SmolLM2 at 16 x 8 under a 4 GB budget: all 128 sequences do not fit, a chunk of some
    c = M.chunk_for_budget(134_515_008, dtype_bytes=4, memory_budget_bytes=4 * 10**9,
                           n_items=128, row_bytes=M.ghost_row_bytes(SMOLLM2, 64, 24))
    assert 8 <= c < 128
    with pytest.raises(ValueError, match="ghost-norm statistics"):
        M.chunk_for_budget(d, dtype_bytes=4, memory_budget_bytes=2**30, n_items=8, row_bytes=a)


def test_chunk_for_budget_too_small_names_the_option():
    need = M.chunk_bytes(10**6, 1, dtype_bytes=4)
    with pytest.raises(ValueError, match=r"--memory-budget .* even chunk 1 needs about "
                                         r"[0-9.]+ MiB"):
        M.chunk_for_budget(10**6, dtype_bytes=4, memory_budget_bytes=need - 1, n_items=8)
    assert M.chunk_for_budget(10**6, dtype_bytes=4, memory_budget_bytes=need, n_items=8) == 1


@pytest.mark.parametrize("kw, match", [
    (dict(n_params=0), "n_params must be an integer >= 1"),
    (dict(dtype_bytes=2.0), "dtype_bytes must be an integer"),
    (dict(memory_budget_bytes=-5), "memory_budget_bytes must be an integer >= 1"),
    (dict(n_items=True), "n_items must be an integer"),
    (dict(overhead_factor=0.5), "overhead_factor must be a finite number >= 1"),
])
def test_chunk_for_budget_bad_input(kw, match):
    args = dict(n_params=100, dtype_bytes=4, memory_budget_bytes=10**6, n_items=4)
    with pytest.raises(ValueError, match=match):
        M.chunk_for_budget(**{**args, **kw})


@pytest.mark.parametrize("text, n", [
    ("4GB", 4 * 10**9), ("512MiB", 512 * 2**20), ("0.5 GiB", 2**29), ("1024", 1024),
    ("2k", 2000), (" 3 tib ", 3 * 2**40), ("1e3MB", 10**9), (4096, 4096), ("7B", 7),
])
def test_parse_memory(text, n):
    assert M.parse_memory(text) == n


@pytest.mark.parametrize("text", ["", "abc", "4 XB", "-1GB", "0", "0.1B", "GB", "4 GB GB",
                                  None, True, [4]])
def test_parse_memory_errors(text):
    with pytest.raises(ValueError, match="--memory-budget"):
        M.parse_memory(text)


def test_default_budget_is_a_fraction_of_available(monkeypatch):
    assert M.available_memory() > 0
    monkeypatch.setattr(M, "available_memory", lambda: 1000)
    assert M.default_memory_budget() == 500 and M.DEFAULT_BUDGET_FRACTION == 0.5
    assert M.default_memory_budget(0.25) == 250
    with pytest.raises(ValueError, match="fraction"):
        M.default_memory_budget(0)


def test_available_memory_falls_back_to_sysconf(monkeypatch):
    def no_file(*a, **k):
        raise OSError("no /proc")

    monkeypatch.setattr(M, "open", no_file, raising=False)
    pages = {"SC_AVPHYS_PAGES": 10, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(M.os, "sysconf", lambda name: pages[name])
    assert M.available_memory() == 40960

    def no_sysconf(name):
        raise ValueError(name)

    monkeypatch.setattr(M.os, "sysconf", no_sysconf)
    with pytest.raises(OSError, match="give --memory-budget"):
        M.available_memory()


class XlaRuntimeError(RuntimeError):
    """Stands in for jaxlib's older XlaRuntimeError (matched by name)."""


@pytest.mark.parametrize("exc", [jax.errors.JaxRuntimeError(OOM), XlaRuntimeError(OOM),
                                 MemoryError()])
def test_out_of_memory_becomes_a_value_error(exc):
    assert M.is_out_of_memory(exc)
    with pytest.raises(ValueError) as info:
        with M.out_of_memory_as_value_error("the per-sample scores (chunk 64)"):
            raise exc
    msg = str(info.value)
    assert "--memory-budget" in msg and "--chunk" in msg and "\n" not in msg
    assert msg.startswith("out of memory")
    assert "in the per-sample scores (chunk 64)" in msg
    if not isinstance(exc, MemoryError):
        assert "allocating 64.66 GiB" in msg


@pytest.mark.parametrize("exc", [jax.errors.JaxRuntimeError("INVALID_ARGUMENT: shapes"),
                                 RuntimeError("RESOURCE_EXHAUSTED"), KeyError("x")])
def test_other_errors_pass_through(exc):
    assert not M.is_out_of_memory(exc)
    with pytest.raises(type(exc)):
        with M.out_of_memory_as_value_error("x"):
            raise exc


@pytest.fixture(scope="module")
def policy():
    cfg = ModelConfig(d_model=16, n_layers=1, n_heads=2)
    return LMPolicy(init_params(jax.random.PRNGKey(0), cfg), make_apply(cfg))


def _rows(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(3, 12, size=(n, 4)).astype(np.int32)
    y = rng.integers(3, 12, size=(n, 3)).astype(np.int32)
    y[::3, 1] = EOS
    return x, y, rng.normal(size=(2, n))


def test_streamed_pass_equals_one_call(policy):
    """Pass 1 in at most SCORE_CALLS equal calls (the last padded) gives the one-call values."""
    x, y, w = _rows(37)
    seen = []
    acc, sq = S._streamed_contractions(policy, x, y, w, 2,
                                       lambda *a: seen.append(a))
    ref_acc, ref_sq = policy.score_contractions(x, y, w, chunk=2)
    np.testing.assert_allclose(acc, ref_acc, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(sq, ref_sq, rtol=1e-12)
    assert sq.shape == (37,)
    # 19 chunks of 2 -> calls of 2 chunks (4 rows): 10 calls, reported 0..10
    assert seen == [("scores", i, 10) for i in range(11)]


def test_resolve_chunk_from_budget(policy):
    d, b = score_memory(policy)
    assert d == policy.dim and b == np.dtype(policy.params["tok"].dtype).itemsize == 4
    assert resolve_chunk(policy, 5, 100) == 5
    budget = M.chunk_bytes(d, 3, dtype_bytes=b)
    assert resolve_chunk(policy, None, 100, budget) == 3
    with pytest.raises(ValueError, match="--memory-budget"):
        resolve_chunk(policy, None, 100, 1000)
    with pytest.raises(ValueError, match="chunk must be an integer >= 1"):
        resolve_chunk(policy, 0, 100)


def test_out_of_memory_in_the_statistics_names_the_options(policy, monkeypatch):
    def oom(self, *a, **k):
        raise jax.errors.JaxRuntimeError(OOM)

    monkeypatch.setattr(LMPolicy, "score_contractions", oom)
    x = _rows(4)[0]
    with pytest.raises(ValueError, match=r"out of memory allocating 64\.66 GiB in the "
                                         r"per-sample scores \(chunk 2 .*--memory-budget"):
        S.lm_rollout_statistics(policy, x, lambda r, y: np.zeros(len(r)), 3, 0, 3, chunk=2)


def test_resolve_chunk_budgets_a_checkpoint_by_its_activations(tmp_path):
    """A checkpoint (ghost-norm route) is budgeted by ghost_row_bytes when the lengths are
    known (lm_rollout_statistics, advise); without them by per-sample scores."""
    from support.gguf_checkpoint import config, write_gguf
    from support.hf_checkpoint import hf_weights

    from grpo_theory import lm

    cfg = config("llama", True, theta=1e5)
    pol = lm.from_pretrained(write_gguf(tmp_path / "t.gguf", cfg,
                                        hf_weights(dict(cfg), False, seed=4), "smollm"))
    d, b = score_memory(pol)
    a = pol.row_bytes(20, 4)
    assert a == M.ghost_row_bytes(pol.config, 20, 4, b) and a < d * (b + 8)
    assert pol.sample_row_bytes(16, 4) == M.sampler_row_bytes(pol.config, 16, 4, b)
    budget = M.chunk_bytes(d, 3, dtype_bytes=b, row_bytes=a)
    assert resolve_chunk(pol, None, 100, budget, seq_len=20, response_len=4) == 3
    assert resolve_chunk(pol, None, 100, M.chunk_bytes(d, 2, dtype_bytes=b)) == 2


@pytest.fixture
def counted(monkeypatch):
    """resident_base as the package reads it (the conftest leaves it out), its once-per-process
    reading of the memory outside JAX arrays reset; no compile reserve (its own test)."""
    gc.collect()
    monkeypatch.setattr(O, "resident_base", M.resident_base)
    monkeypatch.setattr(M, "_outside_arrays", None)
    monkeypatch.setattr(M, "COMPILE_RESERVE", 0)


def test_the_compile_reserve_is_counted_once(policy, counted, monkeypatch):
    """B holds COMPILE_RESERVE once per process, with the memory outside arrays: the chunk of
    a budget sized without it is smaller by the reserve's rows, and stays so on later calls
    (the rival, no reserve, keeps the larger chunk)."""
    d, b = score_memory(policy)
    row = math.ceil(1.25 * d * (b + 8))
    monkeypatch.setattr(M, "process_rss", lambda: M.live_array_bytes() + 10**6)
    budget = M.chunk_bytes(d, 10, dtype_bytes=b, base_bytes=10**6 + _others(policy))
    assert resolve_chunk(policy, None, 100, budget) == 10  # the rival: no reserve
    monkeypatch.setattr(M, "_outside_arrays", None)
    monkeypatch.setattr(M, "COMPILE_RESERVE", 4 * row)
    assert [resolve_chunk(policy, None, 100, budget) for _ in range(2)] == [6, 6]


def _others(policy):
    """Bytes of the live JAX arrays that are not the policy's parameters."""
    return M.live_array_bytes(jax.tree_util.tree_leaves(policy.params))


def test_the_process_base_is_counted_first(policy, counted, monkeypatch):
    """resolve_chunk counts the process's memory beyond the parameters before the chunk:
    budget = B + M(c), B = (RSS_0 - L_0) + the live arrays beyond the parameters."""
    d, b = score_memory(policy)
    base = 50 * d * (b + 8)
    monkeypatch.setattr(M, "process_rss", lambda: M.live_array_bytes() + base)
    budget = M.chunk_bytes(d, 3, dtype_bytes=b, base_bytes=base + _others(policy))
    assert budget == M.chunk_bytes(d, 3, dtype_bytes=b) + base + _others(policy)
    assert resolve_chunk(policy, None, 100, budget) == 3
    assert resolve_chunk(policy, None, 100, budget - 1) == 2
    with pytest.raises(ValueError, match="already resident"):
        resolve_chunk(policy, None, 100, base)
    monkeypatch.setattr(M, "_outside_arrays", None)
    monkeypatch.setattr(M, "process_rss", lambda: 0)  # nothing readable: no base
    assert resolve_chunk(policy, None, 100, budget) == 43  # + base / (1.25 D (b + 8)) = 40
    monkeypatch.undo()
    rss = M.process_rss()
    assert 10 * 2**20 < rss < M.available_memory() + rss  # this process: tens of MB at least


def test_resident_growth_between_calls_keeps_the_chunk(policy, counted, monkeypatch):
    """What the process keeps resident after a pass (outside live arrays) is not counted again:
    with the resident memory growing by 20 per-sample rows before each call, the rule reading
    the whole RSS at every call shrinks the chunk (10, then 1, then refused); this one keeps 10."""
    d, b = score_memory(policy)
    base, row = 50 * d * (b + 8), math.ceil(1.25 * d * (b + 8))
    grown = [0]
    monkeypatch.setattr(M, "process_rss", lambda: M.live_array_bytes() + base + grown[0])
    budget = M.chunk_bytes(d, 10, dtype_bytes=b, base_bytes=base + _others(policy))
    new, old = [], []
    for _ in range(3):
        new.append(resolve_chunk(policy, None, 100, budget))
        try:  # the earlier rule: B = RSS now - D b
            old.append(M.chunk_for_budget(d, dtype_bytes=b, memory_budget_bytes=budget,
                                          n_items=100, base_bytes=M.process_rss() - d * b))
        except ValueError:
            old.append(None)
        grown[0] += 9 * row
    assert new == [10, 10, 10]
    assert old == [10, 1, None]


def test_live_arrays_beyond_the_parameters_are_counted(policy, counted, monkeypatch):
    """Memory genuinely held by live JAX arrays is counted at every choice: an array of 4
    per-sample rows alive shrinks the chunk by 4; freed, the chunk is back."""
    d, b = score_memory(policy)
    row = math.ceil(1.25 * d * (b + 8))
    monkeypatch.setattr(M, "process_rss", lambda: M.live_array_bytes() + 10**6)
    budget = M.chunk_bytes(d, 10, dtype_bytes=b, base_bytes=10**6 + _others(policy))
    assert resolve_chunk(policy, None, 100, budget) == 10
    held = jax.numpy.zeros(4 * row // 4 + 1, jax.numpy.float32)
    assert resolve_chunk(policy, None, 100, budget) == 5  # 4 rows and a byte: 10 - 5
    del held
    gc.collect()
    assert resolve_chunk(policy, None, 100, budget) == 10


def test_repeated_statistics_calls_keep_their_chunk(tmp_path, counted):
    """Three statistics calls on a checkpoint in one process, the same budget and no chunk:
    the same chunk each time, none refused (the process's real resident memory, which the
    first call's compilation grows by tens of MB, against a budget with two rows to spare)."""
    from support.hf_checkpoint import write_checkpoint

    from grpo_theory import lm

    write_checkpoint(tmp_path / "ck", "llama", tied=True, bias=False, shards=1)
    pol = lm.from_pretrained(tmp_path / "ck")
    d, b = score_memory(pol)
    x = np.random.default_rng(0).integers(4, 40, size=(2, 6))
    a = pol.row_bytes(6 + 5, 5)
    budget = M.chunk_bytes(d, 2 * 4 + 2, dtype_bytes=b, row_bytes=a,
                           base_bytes=M.resident_base(pol.params))
    rss0 = M.process_rss()
    chunks = [S.lm_rollout_statistics(pol, x, lambda r, y: np.arange(len(r)) % 2, 4, i, 5,
                                      chunk=None, memory_budget=budget).chunk
              for i in range(3)]
    assert chunks == [8, 8, 8]
    # the rival rule would have refused: the first call left more than the spare rows resident
    assert M.process_rss() - rss0 > 2 * math.ceil(1.25 * a)


def test_chunk_for_groups_budgets_the_route_that_runs():
    """A checkpoint's blocks hold whole groups of n; below one group it scores per sample
    (D (b + 8) bytes a sequence). SmolLM2-135M at 6 x 4 under 4 GB with 1.22 GiB resident:
    the rival (the ghost rule alone) gave chunk 3, which the policy ran as per-sample scores
    needing 6.8 GiB; the route-aware rule gives a multiple of 4, or refuses naming the
    smallest budget that fits."""
    d, n, outside = 134_515_008, 4, int(1.22 * 2**30)
    a = M.ghost_row_bytes(SMOLLM2, 78, 32)
    # the rival: B + D (2 b + 8) + c 1.25 a <= budget, no reserve, whatever c
    rival = (4 * 10**9 - outside - d * 16) // math.ceil(1.25 * a)
    assert 0 < rival < n  # below one group: the per-sample route, which the rule did not count
    assert M.chunk_bytes(d, rival, dtype_bytes=4, base_bytes=outside) > 1.5 * 4 * 10**9
    base = outside + M.COMPILE_RESERVE
    kw = dict(dtype_bytes=4, n_items=24, base_bytes=base)
    need = M.chunk_bytes(d, n, dtype_bytes=4, row_bytes=a, base_bytes=base)
    for budget, want in [(need, 4), (need - 1, None), (need + 4 * 2 * a, 8), (10**12, 24)]:
        if want is None:
            with pytest.raises(ValueError, match=r"--memory-budget .* one group of 4 responses"
                                                 r".* at least ([0-9.]+)GiB"):
                M.chunk_for_groups(d, memory_budget_bytes=budget, group_size=n, row_bytes=a,
                                   **kw)
        else:
            c = M.chunk_for_groups(d, memory_budget_bytes=budget, group_size=n, row_bytes=a,
                                   **kw)
            assert c == want and c % n == 0
            assert M.chunk_bytes(d, c, dtype_bytes=4, row_bytes=a, base_bytes=base) <= budget
    # the smallest budget named is one that fits: at it, chunk n
    with pytest.raises(ValueError) as e:
        M.chunk_for_groups(d, memory_budget_bytes=need - 1, group_size=n, row_bytes=a, **kw)
    gib = float(re.search(r"at least ([0-9.]+)GiB", str(e.value)).group(1))
    assert M.chunk_for_groups(d, memory_budget_bytes=int(gib * 2**30), group_size=n,
                              row_bytes=a, **kw) == n
    # a tiny model whose per-sample scores fit below one group: the per-sample chunk, < n
    small = dict(dtype_bytes=4, n_items=24, base_bytes=0, row_bytes=10**6, group_size=4)
    budget = M.chunk_bytes(1000, 2, dtype_bytes=4)
    assert M.chunk_for_groups(1000, memory_budget_bytes=budget, **small) == 2


def test_the_sampler_rows_fit_in_the_budget(policy):
    """The sampler's rows per block: B + D b + r 1.5 s <= budget, s the KV cache and the
    prefill's logits of a row. SmolLM2-135M's default advise (64 x 16 responses, P = 46,
    R = 32) sampled in blocks of up to 512 rows by the prefill rule alone (the rival), about
    9.4 GiB at 1.5 s a row; under 4 GB with 1.22 GiB resident, about 100 rows a block."""
    s = M.sampler_row_bytes(dict(SMOLLM2, n_kv_heads=3, head_dim=64), 46, 32)
    assert s == 2 * 30 * 3 * 64 * 78 * 4 + 4 * 46 * 49152
    d, base = 134_515_008, int(1.22 * 2**30) + M.COMPILE_RESERVE
    rows = M.sample_rows_for_budget(d, dtype_bytes=4, memory_budget_bytes=4 * 10**9,
                                    row_bytes=s, base_bytes=base)
    assert base + 4 * d + rows * math.ceil(1.5 * s) <= 4 * 10**9
    assert base + 4 * d + (rows + 1) * math.ceil(1.5 * s) > 4 * 10**9
    assert 80 < rows < 120 and 512 * 1.5 * s > 9 * 2**30
    with pytest.raises(ValueError, match=r"--memory-budget .* too small to sample .* at least"):
        M.sample_rows_for_budget(d, dtype_bytes=4, memory_budget_bytes=base + 4 * d,
                                 row_bytes=s, base_bytes=base)
    with pytest.raises(ValueError, match="arch must be"):
        M.sampler_row_bytes({"n_layers": 2}, 4, 4)
    # max_rows splits the sampler's prompts into blocks; at or above the rows, the same samples
    x = np.random.default_rng(1).integers(3, 10, size=(6, 4))
    one = policy.sample_blocked(0, x, 3)
    assert np.array_equal(policy.sample_blocked(0, x, 3, max_rows=6), one)
    calls = []
    policy.sample_blocked(0, x, 3, max_rows=2, progress=lambda i, k: calls.append((i, k)))
    assert calls == [(0, 3), (1, 3), (2, 3), (3, 3)]
    with pytest.raises(ValueError, match="max_rows"):
        policy.sample_blocked(0, x, 3, max_rows=0)
    assert policy.sample_row_bytes(4, 3) is None  # the package's model: no limit
