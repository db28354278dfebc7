r"""Monte Carlo engine: R replicates of B prompts x G responses, jit-compiled and vectorised.

One replicate draws ``x_b ~ f`` (b = 1..B), ``y_bg ~ pi(.|x_b)`` and ``Z_bg ~ Bernoulli(mu(x_b,
y_bg))``, forms the estimator's advantages ``A_bg`` and returns

.. math:: \hat g = \frac{1}{BG} \sum_{b,g} A_{bg}\, s(x_b, y_{bg})
          = \frac{1}{BG} \sum_{x, y} W_{xy}\, s(x, y), \qquad
          W_{xy} = \sum_{b,g} A_{bg} [x_b = x, y_{bg} = y].

The engine (:func:`mc_mse`) forms the per-(prompt, response) weights ``W`` and does one
``(chunk, PK) @ (PK, D)`` matmul per chunk of replicates, instead of gathering a
``(chunk, B, G, D)`` score array. Responses and rewards are drawn jointly with ONE uniform per
response (:func:`grpo_theory.core.sampling.sample_cells_from_uniforms`; the law is exact). Two
routes form ``W`` from the same uniforms (``route`` of :func:`mc_mse`):

* ``counts`` (the default wherever it applies: an estimator whose advantages are a function of
  the group's binary rewards and prompt constants alone, ``Estimator.rewards_only``, and the joint
  sampler): each group's counts ``n[y, z]`` of its 2K cells
  (:func:`~grpo_theory.core.sampling.sample_cell_counts_from_uniforms`) and the estimator's
  advantage tables ``a1[x, k]``, ``a0[x, k]`` (:func:`~grpo_theory.core.exact.binary_advantages`,
  ``k`` correct of G) give ``W[x, y] += n[y, 1] a1[x, k] + n[y, 0] a0[x, k]``: no per-response
  index, advantage or scatter.
* ``responses``: each response's cell, the estimator's ``advantage`` on every sampled group, the
  advantages scattered into ``W`` (``segment_sum``). Every estimator; the tests hold the counts
  route equal to it on the same uniforms, so the engine stays a check of the exact binary route
  that shares the tables.

Chunks run under ``lax.scan`` and the summaries stream: the carry holds running (count, mean, M2) of the
squared errors ``||ghat - grad J||^2`` (:mod:`grpo_theory.core.stats`) and the sum of ``W`` (the
estimates' mean is its image, ``sum_r W_r S / (R B G)``; the trace of their covariance is
``R (mean err2 - ||bias||^2) / (R - 1)``, the same sum of squares), so memory is
O(chunk x (B G + P K + D)) whatever R is.

Random numbers (``rng``, ``uniforms`` and ``sampler`` of :func:`mc_mse`): chunk ``i`` draws all
its uniforms with ``fold_in(key, i)``; the key comes from ``_validation.seed_key(seed, key)``.

* ``rng="rbg"`` (default): the bits come from XLA's RngBitGenerator (Philox-4x32-10 on CPU and
  GPU, a counter-based generator that passes TestU01 BigCrush); keys are still split and folded
  with threefry, so chunk streams are as independent as threefry's. JAX does not promise the
  same stream across backends or XLA versions: a result is reproducible for a given
  ``(seed, n_reps, chunk)`` on one installation, and statistically equivalent elsewhere.
* ``rng="threefry"``: JAX's default Threefry-2x32 (20 rounds; BigCrush-clean), the same stream on
  every backend and version (use it to reproduce numbers across machines).
* ``rng="unsafe_rbg"``: as ``rbg`` but keys are also derived by RngBitGenerator, whose
  split/fold-in streams have no tested independence (JAX's documentation: use where that does
  not matter); offered for measurement only.
* ``rng="splitmix"``: each chunk's key (threefry, as above) gives one 64-bit seed, and the
  chunk's uniforms are that seed's SplitMix64 sequence (Steele, Lea and Flood 2014; the
  generator that seeds xoshiro, BigCrush-clean), ``z_i = mix64(seed + i * 0x9E3779B97F4A7C15)``,
  i = 1, 2, ... (:func:`splitmix_uniforms`): a few integer operations per number, vectorised by
  XLA, where RngBitGenerator's Philox is the engine's bottleneck on CPU. The same stream on every
  backend and version (the seed comes from threefry).
* ``uniforms="float32"``: 23-bit uniforms compared with a float64 CDF, so every cell probability
  is rounded to a multiple of about 2**-23 (1.2e-7); accumulation stays float64.
* ``uniforms="uint32"``: one 32-bit word per uniform, ``u = k / 2**32`` (exact in float64), so
  cell probabilities are multiples of 2**-32 (2.3e-10); half the generator work of float64
  uniforms (which take 64 bits each) at a resolution 512 times finer than float32.
* ``sampler="separate"``: the draws of :func:`~grpo_theory.core.sampling.sample_from_uniforms`
  (two uniforms per response) instead of the joint one-uniform draw.

Default by measurement (``benchmarks/bench_mc_gradients.py``, 2-core CPU): the counts route
took 0.37-0.86x the responses route's time with SplitMix64 bits and 0.64-0.68x with the default
bits at (B, G) = (4, 64) (at (1, 8) and (8, 8) the default bits are the bottleneck); ``rbg`` with float64
uniforms; threefry took about 1.8x its time at (B, G) = (8, 8) and the same at (4, 64); float32
or 32-bit uniforms were not reliably faster on CPU (XLA's generators are the cost, not the bits). Sampling sufficient statistics (the group's (response, reward) counts, one multinomial
per group) was measured 2-7x slower than the joint inverse-CDF draw at G = 8 and 64: JAX draws a
multinomial as a sequence of rejection-sampled binomials.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from .estimators import Estimator, PromptContext, batch_context, get_estimator
from .problem import DiscreteProblem, as_problem
from .exact import binary_advantages, binary_advantages_hold
from .sampling import (safe_cdf, joint_cell_cdf, sample_cell_counts_from_uniforms,
                       sample_cells_from_uniforms, sample_from_uniforms, sample_groups)
from .stats import (Estimate, ScalarResultMixin, estimate_mean, moments_estimate, moments_init,
                    moments_update)
from .._precision import float64


#: PRNG implementations accepted by :func:`mc_mse` (see the module docstring)
RNG_IMPLS = ("threefry", "rbg", "unsafe_rbg", "splitmix")
#: uniform dtypes accepted by :func:`mc_mse`
UNIFORM_DTYPES = ("float64", "float32", "uint32")
#: samplers: ``joint`` (one uniform per response, the default) or ``separate`` (the draws of
#: :func:`~grpo_theory.core.sampling.sample_from_uniforms`, two uniforms per response)
SAMPLERS = ("joint", "separate")
#: weight routes: ``counts`` (cell counts and advantage tables), ``responses`` (per response)
ROUTES = ("auto", "counts", "responses")
#: defaults, chosen by ``benchmarks/bench_mc_gradients.py`` (see the performance page of the docs)
DEFAULT_RNG = "rbg"
DEFAULT_UNIFORMS = "float64"
#: bytes a default chunk aims at
_CHUNK_BYTES = 2**24


_GAMMA, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def splitmix_bits(start, n: int) -> jnp.ndarray:
    """The first ``n`` outputs of SplitMix64 from the state ``start`` (uint64), as uint64.

    ``z_i = mix64(start + i * gamma)`` for i = 1..n with gamma = 0x9E3779B97F4A7C15 and
    ``mix64(x)``: ``x ^= x >> 30; x *= 0xBF58476D1CE4E5B9; x ^= x >> 27;
    x *= 0x94D049BB133111EB; x ^= x >> 31`` (arithmetic mod 2**64).

    Examples:
        >>> import jax, jax.numpy as jnp
        >>> from grpo_theory.core.montecarlo import splitmix_bits
        >>> with jax.enable_x64(True):
        ...     hex(int(splitmix_bits(jnp.uint64(0), 1)[0]))  # the reference's first output
        '0xe220a8397b1dcdaf'
    """
    u64 = jnp.uint64
    x = jnp.asarray(start, u64) + jnp.arange(1, n + 1, dtype=u64) * u64(_GAMMA)
    x = (x ^ (x >> u64(30))) * u64(_MIX1)
    x = (x ^ (x >> u64(27))) * u64(_MIX2)
    return x ^ (x >> u64(31))


def splitmix_uniforms(key, shape, dtype=jnp.float64) -> jnp.ndarray:
    """Uniforms in [0, 1) from one JAX key: its 64-bit seed's SplitMix64 sequence
    (:func:`splitmix_bits`), ``(z >> 11) / 2**53`` (float64), ``(z >> 40) / 2**24`` (float32)
    or ``(z >> 32) / 2**32`` in float64 (``uint32``)."""
    n = int(np.prod(shape))
    z = splitmix_bits(jax.random.bits(key, (), jnp.uint64), n)
    if dtype == jnp.float32:
        u = (z >> jnp.uint64(40)).astype(jnp.float32) * jnp.float32(2.0**-24)
    elif dtype == jnp.uint32:
        u = (z >> jnp.uint64(32)).astype(jnp.float64) * 2.0**-32
    else:
        u = (z >> jnp.uint64(11)).astype(jnp.float64) * 2.0**-53
    return u.reshape(shape)


def _context(problem: DiscreteProblem, est: Estimator, x, y) -> PromptContext:
    return batch_context(est, x, y, problem.values(), problem.optimal_baselines(),
                         lambda: jnp.sum(problem.scores**2, axis=-1), problem.n_prompts)


@float64
def estimate_gradient(problem: DiscreteProblem, estimator: Estimator, x, y, z) -> jnp.ndarray:
    """The estimate ``(1/BG) sum A_bg s(x_b, y_bg)`` from one sampled batch.

    Args:
        problem: the problem.
        estimator: an :class:`Estimator`.
        x: prompts ``(B,)``; y: responses ``(B, G)``; z: rewards ``(B, G)``.

    Returns:
        The gradient estimate, shape ``(D,)``.
    """
    b, g = z.shape
    adv = estimator.advantage(z, _context(problem, estimator, x, y))
    if b * g <= problem.n_prompts * problem.n_responses:
        return jnp.einsum("bg,bgd->d", adv, problem.scores[x[:, None], y]) / (b * g)
    weights = jnp.zeros(problem.probs.shape).at[x[:, None], y].add(adv) / (b * g)
    return jnp.einsum("pk,pkd->d", weights, problem.scores)


def _ctx_axes(ctx: PromptContext) -> PromptContext:
    """vmap axes of a chunk's context: batch fields along axis 0, the carried state shared."""
    return ctx._replace(**{f: (None if f == "state" else 0) for f in ctx._fields})


def _one_replicate(key, problem, estimator, batch_size, group_size):
    x, y, z = sample_groups(key, problem, batch_size, group_size)
    return estimate_gradient(problem, estimator, x, y, z)


@partial(jax.jit, static_argnames=("estimator", "batch_size", "group_size"))
def _estimates(keys, problem, estimator, batch_size, group_size):
    return jax.vmap(lambda k: _one_replicate(k, problem, estimator, batch_size, group_size))(keys)


def _count_weights(problem, x, n, a1, a0):
    """Per-replicate weights ``W (r, P*K)`` from each group's cell counts ``n (r, B, 2K)``.

    For an estimator whose advantages are a function of the group's binary rewards (and prompt
    constants) alone, every correct response of a group with ``k`` correct has advantage
    ``a1[x, k]`` and every incorrect one ``a0[x, k]``
    (:func:`~grpo_theory.core.exact.binary_advantages`), so
    ``W[x_b, y] += n[b, y, 1] a1[x_b, k_b] + n[b, y, 0] a0[x_b, k_b]``.
    """
    r, B = x.shape
    P, K = problem.n_prompts, problem.n_responses
    n = n.reshape(r, B, K, 2).astype(jnp.float64)
    k = jnp.sum(n[..., 1], axis=-1).astype(jnp.int32)
    wb = n[..., 1] * a1[x, k][..., None] + n[..., 0] * a0[x, k][..., None]  # (r, B, K)
    if B == 1:  # place the one group's K weights in its prompt's block
        onehot = (x[:, 0, None] == jnp.arange(P)).astype(wb.dtype)  # (r, P)
        return (onehot[:, :, None] * wb[:, 0, None, :]).reshape(r, P * K)
    seg = ((jnp.arange(r)[:, None] * P + x)[..., None] * K + jnp.arange(K)).reshape(-1)
    return jax.ops.segment_sum(wb.reshape(-1), seg, num_segments=r * P * K).reshape(r, P * K)


def _weights(problem, adv, x, y, onehot):
    """Per-replicate weights ``W (r, P*K)`` = sum of advantages per (prompt, response) cell."""
    r = adv.shape[0]
    pk = problem.n_prompts * problem.n_responses
    cell = x[..., None] * problem.n_responses + y  # (r, B, G)
    if onehot:
        return jnp.einsum("rbg,rbgj->rj", adv, jax.nn.one_hot(cell, pk, dtype=adv.dtype))
    seg = (jnp.arange(r)[:, None, None] * pk + cell).reshape(-1)
    return jax.ops.segment_sum(adv.reshape(-1), seg, num_segments=r * pk).reshape(r, pk)


@partial(jax.jit, static_argnames=("estimator", "batch_size", "group_size", "chunk", "n_chunks",
                                   "sampler", "dtype", "onehot", "splitmix"))
def _summary_scan(key, problem, n_reps, estimator, batch_size, group_size, chunk, n_chunks,
                  sampler, dtype, onehot, splitmix=False, tables=None):
    """Scan over chunks of replicates; returns the streaming moments of err2, the sum of the
    weights ``W`` over the replicates and the target gradient.

    ``tables``: ``(a1, a0)`` of :func:`~grpo_theory.core.exact.binary_advantages` selects the
    counts route (each group's cell counts from the same uniforms, :func:`_count_weights`);
    ``None`` the responses route (each response's cell, the estimator's advantages, a scatter).

    The estimates are linear in ``W`` (``ghat = W S / (BG)``), so their mean is the summed
    weights' image and needs no per-replicate moments of the (chunk, D) estimates; their
    covariance's trace follows from err2's mean (:func:`mc_mse`). Chunk ``i`` draws its uniforms
    with ``fold_in(key, i)``; replicates ``>= n_reps`` of the last chunk are masked out.
    """
    target = problem.pass_k_gradient(estimator.pass_k)
    B, G = batch_size, group_size
    scores = problem.scores.reshape(-1, problem.dim)  # (P*K, D)
    pcdf, ccdf = safe_cdf(problem.prompt_probs), joint_cell_cdf(problem)
    ctx_value, ctx_opt = problem.values(), problem.optimal_baselines()
    sq_table = jnp.sum(problem.scores**2, axis=-1) if "score_sq" in estimator.needs else None

    def unif(k, shape):
        if splitmix:
            return splitmix_uniforms(k, shape, dtype)
        if dtype == jnp.uint32:  # k / 2**32, exact in float64
            return jax.random.bits(k, shape, jnp.uint32).astype(jnp.float64) * 2.0**-32
        return jax.random.uniform(k, shape, dtype=dtype)

    def draw(k):
        if sampler == "joint":
            u = unif(k, (chunk, B, G + 1))
            return sample_cells_from_uniforms(problem, u[..., 0], u[..., 1:], pcdf, ccdf)
        kx, ky, kz = jax.random.split(k, 3)
        return sample_from_uniforms(problem, unif(kx, (chunk, B)), unif(ky, (chunk, B, G)),
                                    unif(kz, (chunk, B, G)))

    def weights(k):
        if tables is not None:
            u = unif(k, (chunk, B, G + 1))
            x, n = sample_cell_counts_from_uniforms(problem, u[..., 0], u[..., 1:], pcdf, ccdf)
            return _count_weights(problem, x, n, *tables)
        x, y, z = draw(k)
        ctx = batch_context(estimator, x, y, ctx_value, ctx_opt, lambda: sq_table,
                            problem.n_prompts)
        adv = jax.vmap(estimator.advantage, in_axes=(0, _ctx_axes(ctx)))(z, ctx)  # per replicate: (B, G) as in one batch
        return _weights(problem, adv, x, y, onehot)

    def body(carry, i):
        m_err, w_sum = carry
        w = weights(jax.random.fold_in(key, i))  # (chunk, P*K)
        err2 = jnp.sum((w @ scores / (B * G) - target) ** 2, axis=1)
        mask = (i * chunk + jnp.arange(chunk) < n_reps).astype(jnp.float64)
        return (moments_update(m_err, err2, mask), w_sum + mask @ w), None

    init = (moments_init(()), jnp.zeros(scores.shape[0]))
    (m_err, w_sum), _ = jax.lax.scan(body, init, jnp.arange(n_chunks))
    return m_err, w_sum, target


def _count_tables(problem, est, group_size, sampler, route):
    """``(a1, a0)`` for the counts route, or ``None`` for the responses route (``route``).

    The counts route needs an estimator that says its advantages are a function of the group's
    rewards alone (``rewards_only``), the joint sampler, a table within the chunk budget and
    advantages that match the table on a shuffled group (:func:`binary_advantages_hold`): an
    estimator that says so wrongly falls back to (``auto``) or is refused by (``counts``) the
    responses route, which calls its advantage function on every sampled group."""
    fits = est.rewards_only and sampler == "joint"
    if route == "counts" and not fits:
        why = ("its advantages are not a function of the group's rewards alone"
               if not est.rewards_only else "the counts come from the joint sampler")
        raise ValueError(f"route='counts' does not apply to estimator {est.name!r} with "
                         f"sampler={sampler!r} ({why}); use route='responses' or 'auto'")
    if route == "responses" or not fits:
        return None
    rows = problem.n_prompts if est.needs else 1
    if 8 * rows * (group_size + 1) * group_size > _CHUNK_BYTES:  # the (G+1, G) evaluation
        if route == "auto":
            return None
        raise ValueError(f"route='counts' evaluates the estimator on a ({rows}, {group_size + 1}, "
                         f"{group_size}) table of binary groups, over {_CHUNK_BYTES >> 20} MiB "
                         f"at G={group_size}; use route='responses' or 'auto'")
    a1, a0 = binary_advantages(problem, est, group_size)
    if not binary_advantages_hold(problem, est, group_size, (a1, a0)):
        if route == "auto":
            return None
        raise ValueError(f"route='counts' does not apply to estimator {est.name!r}: its advantages "
                         "on a shuffled binary group are not its table's entries (they depend on "
                         "more than each response's reward and the group's count); use "
                         "route='responses' or 'auto'")
    return jnp.asarray(a1, jnp.float64), jnp.asarray(a0, jnp.float64)


def _check_run(problem, est, group_size, batch_size, n_reps=None):
    G, B = V.group_run(est, group_size, batch_size)
    est.check_problem(problem.n_prompts)  # a prompt baseline of the wrong length
    R = None if n_reps is None else V.positive_int("n_reps", n_reps, 2)
    return G, B, R


def _choice(name, value, allowed):
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
    return value


def _rng_key(seed, key, rng):
    """The engine's key: ``seed_key(seed, key)`` re-wrapped for ``rng`` (threefry: unchanged)."""
    k = V.seed_key(seed, key)
    if rng in ("threefry", "splitmix"):  # splitmix: a threefry key per chunk seeds it
        return k
    if jnp.issubdtype(k.dtype, jax.dtypes.prng_key):
        if str(jax.random.key_impl(k)) == rng:
            return k
        k = jax.random.key_data(k).reshape(-1)[:2].astype(jnp.uint32)  # a raw threefry key
    data = jax.random.bits(k, (4,), jnp.uint32)  # RngBitGenerator keys hold 4 words
    return jax.random.wrap_key_data(data, impl=rng)


def _per_rep_bytes(problem, B, G, sampler, onehot):
    pk = problem.n_prompts * problem.n_responses
    n = B * (G + 1) * (1 if sampler == "joint" else 2) + 6 * B * G + pk + 3 * problem.dim
    if onehot:
        n += B * G * pk
    return 8 * n


@float64
def mc_estimates(bandit, estimator, group_size: int, batch_size: int = 1, n_reps: int = 1000,
                 seed: int = 0, key=None) -> jnp.ndarray:
    """All R gradient estimates (for small R; :func:`mc_mse` streams).

    Draws with :func:`~grpo_theory.core.sampling.sample_groups` and one key per replicate.

    Args:
        bandit: a policy or :class:`DiscreteProblem`.
        estimator: a registry name or :class:`Estimator`.
        group_size, batch_size: ``G`` and ``B``.
        n_reps: number of replicates ``R >= 2``.
        seed: any Python/NumPy integer (ignored when ``key`` is given).
        key: optional JAX key.

    Returns:
        Array ``(R, D)`` of estimates.
    """
    problem = as_problem(bandit)
    est = get_estimator(estimator)
    G, B, R = _check_run(problem, est, group_size, batch_size, n_reps)
    V.check_memory("mc_estimates", 8.0 * R * (problem.dim + 4 * B * G),
                   "use mc_mse, which streams its summaries in chunks")
    key = V.seed_key(seed, key)
    return _estimates(jax.random.split(key, R), problem, est, B, G)


@dataclass(frozen=True)
class MCResult(ScalarResultMixin):
    """Monte Carlo summary of R replicates (all in float64).

    ``mse``/``se`` are the mean and standard error of the squared errors; ``ci_low``/``ci_high``
    the 95% normal interval (``interval(alpha)`` for other levels; ``estimate`` is the
    :class:`~grpo_theory.core.stats.Estimate`). The :class:`~grpo_theory.core.stats.Result`
    interface: ``conf_int(alpha)`` and ``summary(alpha)`` are one-row tables (row ``"mse"``),
    ``value`` is ``mse``.
    """

    estimator: str
    group_size: int
    batch_size: int
    n_reps: int
    seed: int
    mse: float
    se: float
    ci_low: float
    ci_high: float
    mean: np.ndarray  # (D,) Monte Carlo mean of the estimates
    bias: np.ndarray  # mean - grad J
    trace_cov: float  # tr Cov(ghat), unbiased (divides by R - 1)

    @property
    @float64
    def estimate(self) -> Estimate:
        """The MSE as an :class:`Estimate` ``(mse, se, n_reps)``."""
        return Estimate(self.mse, self.se, self.n_reps)

    @property
    def value(self) -> float:
        """The MSE (the :class:`~grpo_theory.core.stats.Result` interface's ``value``)."""
        return self.mse

    def _params(self):
        return ("mse",), (self.mse,), (self.se,), None

    @property
    @float64
    def bias_sq_norm(self) -> float:
        return float(np.sum(self.bias**2))

    @float64
    def contains(self, value: float, alpha: float = 0.05) -> bool:
        """Whether ``value`` lies in the ``1 - alpha`` interval (95% by default)."""
        if alpha == 0.05:
            return self.ci_low <= value <= self.ci_high
        return self.estimate.contains(value, alpha)


@float64
def summarize_squared_errors(err2) -> tuple[float, float, float, float]:
    """Mean, standard error and normal 95% CI of per-replicate squared errors.

    Args:
        err2: 1-d array of at least two values.

    Returns:
        ``(mean, se, low, high)`` (see :func:`grpo_theory.core.stats.estimate_mean`).
    """
    e = estimate_mean(err2)
    lo, hi = e.interval()
    return e.value, e.se, lo, hi


@float64
def mc_mse(bandit, estimator, group_size: int, batch_size: int = 1, n_reps: int = 100_000,
           seed: int = 0, key=None, chunk: int | None = None, *, rng: str = DEFAULT_RNG,
           uniforms: str = DEFAULT_UNIFORMS, sampler: str = "joint",
           route: str = "auto") -> MCResult:
    """Monte Carlo MSE ``E||ghat - grad J||^2`` of an estimator with a 95% CI.

    Deterministic for a given ``(seed, n_reps, chunk, rng, uniforms, sampler)``; memory does not
    grow with ``n_reps`` (streaming moments in the scan carry).

    Args:
        bandit: any policy of :mod:`grpo_theory.core.policies` or a :class:`DiscreteProblem`.
        estimator: a registry name or :class:`Estimator`.
        group_size, batch_size: ``G`` and ``B`` (Python/NumPy/JAX integers).
        n_reps: replicates ``R >= 2``.
        seed: any Python/NumPy integer, reduced by :func:`grpo_theory._validation.seed_key`.
        key: optional JAX key (overrides ``seed``).
        chunk: replicates per vmapped block (integer >= 1); default about 16 MB per chunk.
        rng: ``"rbg"`` (default), ``"threefry"``, ``"unsafe_rbg"`` or ``"splitmix"`` (module
            docstring).
        uniforms: ``"float64"`` (default), ``"float32"`` or ``"uint32"`` (32-bit words).
        sampler: ``"joint"`` (one uniform per response, default) or ``"separate"``.
        route: ``"counts"`` (each group's cell counts and the estimator's binary advantage
            tables: the same draws, no per-response advantages), ``"responses"`` (each response's
            cell and the estimator's advantages, scattered into the weights) or ``"auto"``
            (default: counts where the estimator's advantages are a function of the group's
            rewards alone and the sampler is joint). Both give the same estimates from the same
            uniforms, up to rounding.

    Returns:
        :class:`MCResult`.

    Examples:
        The 95% interval of 4000 replicates covers the exact MSE (:func:`exact_mse`):

        >>> from grpo_theory.core import SoftmaxBandit, exact_mse, mc_mse
        >>> bandit = SoftmaxBandit([[0.0, 1.0, -1.0], [0.5, 0.0, 0.0]],
        ...                        [[1.0, 0.0, 0.5], [0.2, 0.9, 0.0]])
        >>> r = mc_mse(bandit, "grpo", group_size=4, batch_size=2, n_reps=4000, seed=0)
        >>> lo, hi = r.interval()
        >>> bool(lo <= exact_mse(bandit, "grpo", group_size=4, batch_size=2) <= hi)
        True
    """
    problem = as_problem(bandit)
    est = get_estimator(estimator)
    G, B, R = _check_run(problem, est, group_size, batch_size, n_reps)
    rng = _choice("rng", rng, RNG_IMPLS)
    uniforms = _choice("uniforms", uniforms, UNIFORM_DTYPES)
    sampler = _choice("sampler", sampler, SAMPLERS)
    route = _choice("route", route, ROUTES)
    pk = problem.n_prompts * problem.n_responses
    onehot = False  # segment_sum measured faster than a one-hot contraction on CPU
    per_rep = _per_rep_bytes(problem, B, G, sampler, onehot)
    V.check_memory(f"one Monte Carlo replicate (B={B}, G={G}, P*K={pk}, D={problem.dim})",
                   per_rep, "reduce batch_size or group_size")
    tables = _count_tables(problem, est, G, sampler, route)
    fit = max(1, int(V.MEMORY_LIMIT // per_rep))
    if chunk is None:
        chunk = int(max(1, min(R, _CHUNK_BYTES // per_rep)))
    else:
        chunk = V.positive_int("chunk", chunk)
        V.check_memory(f"mc_mse chunk={chunk} (B={B}, G={G}, P*K={pk}, D={problem.dim})",
                       chunk * per_rep, f"use chunk <= {fit}")
    n_chunks = -(-R // chunk)
    k = _rng_key(seed, key, rng)
    m_err, w_sum, target = _summary_scan(k, problem, R, est, B, G, chunk, n_chunks, sampler,
                                 jnp.dtype(uniforms), onehot, rng == "splitmix", tables)
    e = moments_estimate(m_err)
    lo, hi = e.interval()
    scores = np.asarray(problem.scores, np.float64).reshape(-1, problem.dim)
    mean = np.asarray(w_sum) @ scores / (R * B * G)
    bias = mean - np.asarray(target)
    # sum_r ||ghat_r - mean||^2 = sum_r ||ghat_r - g||^2 - R ||mean - g||^2 (exact)
    trace_cov = max(R * (float(m_err.mean) - float(bias @ bias)), 0.0) / (R - 1)
    return MCResult(est.name, G, B, R, seed, e.value, e.se, lo, hi, mean, bias, trace_cov)
