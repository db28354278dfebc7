r"""Memory of the per-sample score statistics: a chunk chosen from a memory budget, and an
out-of-memory error of XLA turned into a ``ValueError`` that says what to change.

The streamed statistics (:func:`grpo_theory.lm.policy.score_contractions`, used by the advisor
and the language-model studies) hold ``chunk`` per-sample scores of the D parameters at once:
each is computed in the model's dtype (``dtype_bytes`` per parameter) and accumulated in float64
(8 bytes), so the memory is about

.. math:: M(c) = D\,(2 b + 8 K) + c \cdot f\,D\,(b + 8)

bytes for chunk c, with b = ``dtype_bytes``, K accumulated weight rows (``n_accumulators``),
the fixed part the parameters (as a pytree and flattened) and the float64 accumulators, and
``f`` = ``overhead_factor`` >= 1 a margin for the activations and XLA's temporaries (the
per-sample scores dominate: SmolLM2-135M holds 1.6 GB per sample in float32, its activations
of 64 tokens about 15 MB). The largest c with ``M(c) <= budget`` is
:func:`chunk_for_budget`.

**The ghost-norm route** (:mod:`grpo_theory.lm.budget.ghost`, the default of a pretrained
checkpoint, :meth:`grpo_theory.lm.checkpoints.hf.HFPolicy.score_contractions`) forms no per-sample
score: a chunk of c sequences costs its activations instead, ``a`` bytes per sequence
(:func:`ghost_row_bytes`), so

.. math:: M_\text{ghost}(c) = D\,(b + 8 K) + c \cdot f\,a,

the parameters once (no flattened copy) and ``f`` = :data:`GHOST_OVERHEAD_FACTOR` (measured),
with ``a`` about 100 MB for SmolLM2-135M at 64 positions against 1.6 GB for one per-sample
score: the chunk is no longer what limits the model size (``row_bytes`` of
:func:`chunk_for_budget`). Its blocks hold whole groups of n responses, and a chunk below n
is scored per sample, so the chunk is chosen for the route that runs
(:func:`chunk_for_groups`): a multiple of n by ``M_ghost``, else below n by ``M``, else an
error naming the smallest budget that fits.

The budget is for the whole process, so what the process already holds beyond the
parameters, ``B`` (``base_bytes``, :func:`resident_base`), is added: the chunk is the largest c
with ``B + M(c) <= budget``. Only what is held when the chunk is chosen counts, not what an
earlier pass left for reuse:

.. math:: B = \max(0,\ \mathrm{RSS}_0 - L_0) + C + L_\text{now} - P,

with RSS_0 and L_0 the resident bytes (:func:`process_rss`) and the bytes of all live JAX
arrays (:func:`live_array_bytes`) at the first chunk choice of the process, C =
:data:`COMPILE_RESERVE`, L_now the live JAX arrays' bytes now and P the parameters' share of
them (P is in ``M(c)``). The first term is the memory outside JAX arrays (the Python
interpreter, JAX's runtime, the tokenizer), taken once; C what compiling the sampler and the
passes adds after the choice (XLA's executables, its allocator's pools), taken once; the last
what arrays beyond the parameters hold now. What a pass leaves
resident outside live arrays (freed buffers the allocator keeps, XLA's compiled executables
and caches) is not counted again: a second pass at the same chunk reuses it. Measured on a
3.4M-parameter checkpoint (``benchmarks/results/memory_repeat.md``): the first pass leaves
the resident memory about 375 MiB higher with no live array added, and later passes at the same
chunk leave it where it was; counting that growth (``B = RSS - P``, read at every choice)
shrank the chunk or refused the second pass.

The default budget (:func:`default_memory_budget`) is :data:`DEFAULT_BUDGET_FRACTION` of the
memory available now: ``MemAvailable`` of ``/proc/meminfo`` (Linux), else the available
physical pages (``os.sysconf``); on an accelerator, that fraction of the device's memory limit.
"""

from __future__ import annotations

import contextlib
import math
import os
import re

import jax
import jax.numpy as jnp
import numpy as np

from ... import _validation as V
from .. import families


#: share of the available memory the default budget allows
DEFAULT_BUDGET_FRACTION = 0.5
#: margin on the per-sample bytes for activations and XLA temporaries
OVERHEAD_FACTOR = 1.25
#: margin on the ghost route's activations per sequence: SmolLM2-135M's pass held about
#: 0.95 a per sequence at chunk 4 and 1.48 a at chunk 16 above the parameters and the
#: accumulator; with it ``advise --memory-budget 6GB`` ran chunk 16 at 0.98 of the budget
#: (``benchmarks/results/memory_budget.md``)
GHOST_OVERHEAD_FACTOR = 1.5
#: bytes XLA's compilation of the sampler and of the passes adds to the process, and what its
#: allocator keeps after them: a tiny checkpoint's ``advise`` peaked 216 MiB above its
#: loaded model (``benchmarks/results/memory_budget_tiny.md``: 974 against 758 MiB)
COMPILE_RESERVE = 256 * 2**20
#: margin on the sampler's bytes per row (:func:`sampler_row_bytes`; measured 1.23)
SAMPLER_OVERHEAD_FACTOR = 1.5
#: the advice appended to every memory error
HINT = "lower --chunk or --memory-budget (or --n-samples), or use --dtype bfloat16"
"""The command-line hint of an out-of-memory error."""

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}


def format_bytes(n: float) -> str:
    """``n`` bytes as a short string in GiB / MiB (``"8.00 GiB"``)."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def parse_memory(text) -> int:
    """A memory size in bytes from text: a number and an optional unit, case-insensitive:
    ``B``, decimal ``KB MB GB TB`` (also ``K M G T``) or binary ``KiB MiB GiB TiB``.

    ``parse_memory("4GB") == 4 * 10**9``, ``parse_memory("512MiB") == 512 * 2**20``,
    ``parse_memory("0.5 GiB") == 2**29``.

    Raises:
        ValueError: naming ``--memory-budget``, for anything else or a size below 1 byte.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ValueError(f"--memory-budget must be a size such as '4GB', '512MiB' or "
                         f"'0.5 GiB', got {text!r}")
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise ValueError(f"--memory-budget must be a number with an optional unit (B, KB, MB, "
                         f"GB, TB, KiB, MiB, GiB, TiB), such as '4GB', '512MiB' or '0.5 GiB'; "
                         f"got {text!r}")
    n = float(m.group(1)) * _UNITS[unit]
    if not math.isfinite(n) or n < 1:
        raise ValueError(f"--memory-budget must be at least 1 byte, got {text!r}")
    return int(n)


def available_memory() -> int:
    """Bytes of host memory available now: ``MemAvailable`` of ``/proc/meminfo`` (Linux),
    else ``SC_AVPHYS_PAGES * SC_PAGE_SIZE`` of ``os.sysconf``.

    Raises:
        OSError: when neither can be read (give ``--memory-budget``).
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        raise OSError("the available memory cannot be read (no /proc/meminfo, no "
                      "os.sysconf('SC_AVPHYS_PAGES')); give --memory-budget") from None


def process_rss() -> int:
    """Bytes resident in this process now (``/proc/self/statm``, Linux); 0 where it cannot be
    read (the base is then left out of the budget)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, IndexError, AttributeError):
        return 0


def live_array_bytes(exclude=()) -> int:
    """Bytes of the JAX arrays alive now (``jax.live_arrays()``), leaving out the arrays in
    ``exclude`` (by identity)."""
    skip = {id(x) for x in exclude}
    return int(sum(x.nbytes for x in jax.live_arrays() if id(x) not in skip))


#: the process's resident bytes outside JAX arrays at its first chunk choice (None: not read
#: yet; :func:`resident_base`)
_outside_arrays: int | None = None


def resident_base(params) -> int:
    """``B``, the bytes this process holds beyond the parameters ``params`` (module docstring):
    its resident memory outside JAX arrays, read once (at the first call in the process),
    plus :data:`COMPILE_RESERVE` (the compiled passes, once), plus the bytes of the live JAX
    arrays that are not leaves of ``params`` now."""
    global _outside_arrays
    if _outside_arrays is None:
        _outside_arrays = max(0, process_rss() - live_array_bytes()) + COMPILE_RESERVE
    return _outside_arrays + live_array_bytes(jax.tree_util.tree_leaves(params))


def default_memory_budget(fraction: float = DEFAULT_BUDGET_FRACTION) -> int:
    """The default memory budget: ``fraction`` of the memory available now.

    On a CPU, of :func:`available_memory`; on an accelerator (JAX's default device is not a
    CPU and reports ``bytes_limit``), of the device's free memory ``bytes_limit -
    bytes_in_use``.

    Args:
        fraction: in (0, 1].

    Returns:
        Bytes (an int >= 1).
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction!r}")
    dev = jax.devices()[0]
    if dev.platform != "cpu":
        stats = dev.memory_stats() or {}
        if "bytes_limit" in stats:
            free = int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
            return max(1, int(fraction * free))
    return max(1, int(fraction * available_memory()))


def _factor(overhead_factor, row_bytes) -> float:
    """The margin: ``overhead_factor``, or the route's (None)."""
    if overhead_factor is not None:
        return overhead_factor
    return OVERHEAD_FACTOR if row_bytes is None else GHOST_OVERHEAD_FACTOR


def chunk_bytes(n_params: int, chunk: int, *, dtype_bytes: int,
                n_accumulators: int = 1, overhead_factor: float | None = None,
                row_bytes: int | None = None, base_bytes: int = 0) -> int:
    """Estimated peak bytes of the streamed statistics at ``chunk`` sequences at once:
    ``B + D (2 b + 8 K) + chunk f D (b + 8)`` (per-sample scores, f = 1.25) or, given
    ``row_bytes`` = a (the ghost route's activations per sequence, :func:`ghost_row_bytes`),
    ``B + D (b + 8 K) + chunk f a`` (the parameters once: no flattened copy; f = 1.5), with
    ``B = base_bytes`` the process's other resident memory (module docstring); ``f`` is
    ``overhead_factor`` when given."""
    d, b = int(n_params), int(dtype_bytes)
    per = d * (b + 8) if row_bytes is None else int(row_bytes)
    copies = 2 if row_bytes is None else 1
    return int(int(base_bytes) + d * (copies * b + 8 * int(n_accumulators))
               + int(chunk) * math.ceil(_factor(overhead_factor, row_bytes) * per))


def ghost_row_bytes(arch: dict, seq_len: int, response_len: int, dtype_bytes: int = 4) -> int:
    r"""Activation bytes one sequence adds to the ghost-norm pass: the model family's
    :attr:`~grpo_theory.lm.families.spec.ModelSpec.activation_bytes` (family by
    ``arch["model_type"]``; a dict of sizes alone is read as the Qwen2 / Llama family).

    For Qwen2 / Llama (:func:`grpo_theory.lm.families.qwen2.activation_bytes`), per layer and
    position the pass keeps the inputs of the seven projections and the SwiGLU intermediates
    (about ``6 d + 4 f`` values), the attention probabilities and their gradient (``2 H T``);
    the logits and their softmax gradient at the response positions add ``3 R V`` float32
    values:

    .. math:: a = T L (6 d + 4 f + 2 H T)\,b + 12 R V.

    Measured against it (``benchmarks/results/ghost_norms.md``): SmolLM2-135M's shape at
    T = 64, R = 24 gives a = 97 MB, the pass held about 92 MB per sequence above its base.

    Args:
        arch: the architecture (:func:`grpo_theory.lm.checkpoints.files.check_config`: ``n_layers``,
            ``d_model``, ``d_ff``, ``n_heads``, ``vocab_size``).
        seq_len: T >= 1 positions (prompt plus response).
        response_len: R >= 1 response positions (at most T).
        dtype_bytes: b, bytes per activation (4 float32, 2 bfloat16).

    Returns:
        Bytes (int).
    """
    t = V.positive_int("seq_len", seq_len)
    r = V.integer("response_len", response_len, 1, t)
    b = V.positive_int("dtype_bytes", dtype_bytes)
    spec = families.family_of_arch(arch)
    try:
        return spec.activation_bytes(arch, t, r, b)
    except (KeyError, TypeError, ValueError):
        raise ValueError("arch must be an architecture dict with n_layers, d_model, d_ff, "
                         f"n_heads and vocab_size, got {arch!r}") from None


def sampler_row_bytes(arch: dict, prompt_len: int, response_len: int,
                      dtype_bytes: int = 4) -> int:
    r"""Bytes one row adds to the KV-cached sampler: its key/value cache over the P + R
    positions and its prefill's float32 logits,

    .. math:: s = 2 L\,H_{kv}\,h\,(P + R)\,b + 4 P V.

    SmolLM2-135M at P = 46, R = 32 gives s = 12.6 MiB; sampling 96 rows held about 15.5 MiB
    each above 24 rows (:data:`SAMPLER_OVERHEAD_FACTOR`).

    Args:
        arch: the architecture (``n_layers``, ``n_kv_heads``, ``head_dim``, ``vocab_size``).
        prompt_len: P >= 1; response_len: R >= 1.
        dtype_bytes: b, bytes per cached value.

    Returns:
        Bytes (int).
    """
    p = V.positive_int("prompt_len", prompt_len)
    r = V.positive_int("response_len", response_len)
    b = V.positive_int("dtype_bytes", dtype_bytes)
    try:
        L, kv, hd, v = (int(arch[k]) for k in ("n_layers", "n_kv_heads", "head_dim",
                                                "vocab_size"))
    except (KeyError, TypeError, ValueError):
        raise ValueError("arch must be an architecture dict with n_layers, n_kv_heads, "
                         f"head_dim and vocab_size, got {arch!r}") from None
    return 2 * L * kv * hd * (p + r) * b + 4 * p * v


def sample_rows_for_budget(n_params: int, *, dtype_bytes: int, memory_budget_bytes: int,
                           row_bytes: int, base_bytes: int = 0) -> int:
    r"""Rows the sampler may hold at once: the largest r with ``B + D b + r f s <= budget``
    (the parameters and the process's other memory ``B``; s = ``row_bytes``,
    :func:`sampler_row_bytes`; f = :data:`SAMPLER_OVERHEAD_FACTOR`).

    Raises:
        ValueError: naming ``--memory-budget`` and the smallest budget that fits, when one
            row does not fit.
    """
    s = math.ceil(SAMPLER_OVERHEAD_FACTOR * V.integer("row_bytes", row_bytes, 1))
    fixed = V.integer("base_bytes", base_bytes, 0) + int(n_params) * int(dtype_bytes)
    budget = V.integer("memory_budget_bytes", memory_budget_bytes, 1)
    if fixed + s > budget:
        raise ValueError(f"--memory-budget {format_bytes(budget)} is too small to sample from a "
                         f"{int(n_params):,}-parameter model: one row needs about "
                         f"{format_bytes(fixed + s)} ({format_bytes(base_bytes)} already "
                         f"resident); give --memory-budget of at least "
                         f"{_need_gib(fixed + s)} or use --dtype bfloat16")
    return int((budget - fixed) // s)


def chunk_for_budget(n_params: int, *, dtype_bytes: int, memory_budget_bytes: int,
                     n_items: int, n_accumulators: int = 1,
                     overhead_factor: float | None = None,
                     row_bytes: int | None = None, base_bytes: int = 0) -> int:
    """The largest chunk of sequences whose statistics fit in the budget.

    The largest ``c`` in ``[1, n_items]`` with ``chunk_bytes(n_params, c) <=
    memory_budget_bytes``: ``floor((budget - D (2 b + 8 K)) / (f D (b + 8)))`` (per-sample
    scores) or ``floor((budget - D (b + 8 K)) / (f a))`` (the ghost route, ``row_bytes`` = a)
    clipped to ``n_items``.

    Args:
        n_params: D >= 1, the model's parameters.
        dtype_bytes: bytes per parameter of the model's dtype (4 float32, 2 bfloat16).
        memory_budget_bytes: the budget (>= 1).
        n_items: the number of per-sample scores to compute (>= 1; no chunk exceeds it).
        n_accumulators: K >= 1 float64 (D,) accumulators held (weight rows).
        overhead_factor: f >= 1, the margin on a sequence's bytes; None: the route's
            (:data:`OVERHEAD_FACTOR`, :data:`GHOST_OVERHEAD_FACTOR`).
        row_bytes: a >= 1, the bytes one sequence adds on the ghost route
            (:func:`ghost_row_bytes`); None: the per-sample route (``D (b + 8)``).
        base_bytes: B >= 0, the process's resident memory besides the parameters
            (subtracted from the budget first).

    Returns:
        The chunk, an int in ``[1, n_items]``.

    Raises:
        ValueError: naming ``--memory-budget`` and the bytes needed, when chunk 1 does not fit.
    """
    vals = {name: V.integer(name, v, 1) for name, v in (
        ("n_params", n_params), ("dtype_bytes", dtype_bytes),
        ("memory_budget_bytes", memory_budget_bytes), ("n_items", n_items),
        ("n_accumulators", n_accumulators))}
    overhead_factor = _factor(overhead_factor, row_bytes)
    if not (isinstance(overhead_factor, (int, float)) and overhead_factor >= 1
            and math.isfinite(overhead_factor)):
        raise ValueError(f"overhead_factor must be a finite number >= 1, got {overhead_factor!r}")
    d, b, budget = vals["n_params"], vals["dtype_bytes"], vals["memory_budget_bytes"]
    k = vals["n_accumulators"]
    if row_bytes is not None:
        row_bytes = V.integer("row_bytes", row_bytes, 1)
    base = V.integer("base_bytes", base_bytes, 0)
    need = chunk_bytes(d, 1, dtype_bytes=b, n_accumulators=k, overhead_factor=overhead_factor,
                       row_bytes=row_bytes, base_bytes=base)
    if need > budget:
        route = "per-sample" if row_bytes is None else "ghost-norm"
        raise ValueError(f"--memory-budget {format_bytes(budget)} is too small for the "
                         f"{route} statistics of a {d:,}-parameter model: even chunk 1 "
                         f"needs about {format_bytes(need)} ({b}-byte parameters, float64 "
                         f"accumulators, {format_bytes(base)} already resident); give "
                         f"--memory-budget of at least {math.ceil(need / 2**30 * 100) / 100:g}"
                         f"GiB or use --dtype bfloat16")
    per = math.ceil(overhead_factor * (d * (b + 8) if row_bytes is None else row_bytes))
    fixed = base + d * ((2 if row_bytes is None else 1) * b + 8 * k)
    return int(max(1, min(vals["n_items"], (budget - fixed) // per)))


def _need_gib(need: int) -> str:
    """``need`` bytes rounded up to 0.01 GiB, as ``--memory-budget`` takes it (``"3.80GiB"``)."""
    return f"{math.ceil(need / 2**30 * 100) / 100:g}GiB"


def chunk_for_groups(n_params: int, *, dtype_bytes: int, memory_budget_bytes: int,
                     n_items: int, group_size: int, row_bytes: int, n_accumulators: int = 1,
                     overhead_factor: float | None = None, base_bytes: int = 0) -> int:
    r"""The chunk of a pass that runs whole groups, and per-sample scores below one group.

    The ghost-norm route (:meth:`grpo_theory.lm.checkpoints.hf.HFPolicy.score_statistics`)
    holds whole groups of ``group_size`` = n responses per block; a chunk below n is scored by
    per-sample scores, ``D (b + 8)`` bytes a sequence instead of ``a``. So the chunk is the
    ghost route's :func:`chunk_for_budget` rounded down to a multiple of n when that is at
    least n; else the per-sample route's, below n; else neither fits and the error names the
    smallest budget that does: :math:`\min(M_\text{ghost}(n), M(1))` (module docstring).

    Args:
        n_params, dtype_bytes, memory_budget_bytes, n_items, n_accumulators, overhead_factor,
            base_bytes: as :func:`chunk_for_budget`.
        group_size: n >= 1 responses per group (a block holds whole groups).
        row_bytes: a >= 1, the bytes one sequence adds on the ghost route.

    Returns:
        The chunk: a multiple of n, or an int in ``[1, n - 1]`` (per-sample scores).

    Raises:
        ValueError: naming ``--memory-budget`` and the smallest budget that fits.
    """
    g = V.positive_int("group_size", group_size)
    kw = dict(dtype_bytes=dtype_bytes, memory_budget_bytes=memory_budget_bytes,
              n_items=n_items, n_accumulators=n_accumulators, overhead_factor=overhead_factor,
              base_bytes=base_bytes)
    try:
        c = chunk_for_budget(n_params, row_bytes=V.integer("row_bytes", row_bytes, 1), **kw)
    except ValueError:
        c = 0
    if c >= g:
        return c // g * g
    if g > 1:
        try:
            return min(g - 1, chunk_for_budget(n_params, **kw))
        except ValueError:
            pass
    tail = {k: kw[k] for k in ("n_accumulators", "overhead_factor", "base_bytes")}
    ghost = chunk_bytes(n_params, g, dtype_bytes=dtype_bytes, row_bytes=row_bytes, **tail)
    one = chunk_bytes(n_params, 1, dtype_bytes=dtype_bytes, **tail)
    raise ValueError(f"--memory-budget {format_bytes(memory_budget_bytes)} is too small for the "
                     f"statistics of a {int(n_params):,}-parameter model: a block of one group "
                     f"of {g} responses (ghost norms) needs about {format_bytes(ghost)}, one "
                     f"per-sample score {format_bytes(one)} ({format_bytes(base_bytes)} already "
                     f"resident); give --memory-budget of at least {_need_gib(min(ghost, one))} "
                     f"or use --dtype bfloat16")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is XLA's out-of-memory error (``jax.errors.JaxRuntimeError`` /
    ``XlaRuntimeError`` whose message holds ``RESOURCE_EXHAUSTED``) or a ``MemoryError``."""
    if isinstance(exc, MemoryError):
        return True
    names = {t.__name__ for t in type(exc).__mro__}
    return bool(names & {"JaxRuntimeError", "XlaRuntimeError"}) and \
        "RESOURCE_EXHAUSTED" in str(exc)


def _oom_bytes(exc) -> str:
    m = re.search(r"allocating (\d+) bytes", str(exc))
    return f" allocating {format_bytes(int(m.group(1)))}" if m else ""


@contextlib.contextmanager
def out_of_memory_as_value_error(what: str):
    """Re-raise XLA's out-of-memory error (or a ``MemoryError``) raised inside the block as a
    one-line ``ValueError`` naming ``--memory-budget`` / ``--chunk``.

    Args:
        what: the phase, for the message (``"the per-sample scores (chunk 4)"``).
    """
    try:
        yield
    except Exception as e:  # noqa: BLE001 - only the out-of-memory errors are converted
        if not is_out_of_memory(e):
            raise
        raise ValueError(f"out of memory{_oom_bytes(e)} in {what}: {HINT}") from None


def pad_to_chunk(prompts, responses, weights, chunk: int):
    """Rows padded to a multiple of ``chunk`` (copies of row 0 with weight 0), so every block
    has one shape (one compilation). Returns ``(prompts, responses, weights, chunk)`` with
    ``chunk`` capped at the number of rows."""
    n = prompts.shape[0]
    chunk = int(min(chunk, n))
    pad = (-n) % chunk
    if pad:
        prompts = np.concatenate([prompts, np.repeat(prompts[:1], pad, 0)])
        responses = np.concatenate([responses, np.repeat(responses[:1], pad, 0)])
        weights = np.concatenate([weights, np.zeros((weights.shape[0], pad))], axis=1)
    return prompts, responses, weights, chunk


def acc_dtype():
    """float64 when JAX's 64-bit mode is on (``jax_enable_x64``), else float32 (the widest
    type JAX then has; requesting float64 would be truncated with a warning)."""
    return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
