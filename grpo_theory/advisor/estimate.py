r"""Building a :class:`~grpo_theory.advisor.result.ScalingEstimate`: unbiased c1, c2, c3 and G*.

* :func:`estimate_from_rollouts`: from the rewards and the scores, or the inner products they
  enter through (a :class:`~grpo_theory.core.rollouts.RolloutStatistics`, or its arrays);
* :func:`estimate_scaling_constants`: from rollouts it samples, of an enumerable policy of the
  package or of a language-model policy (:func:`grpo_theory.lm.budget.statistics.
  lm_rollout_statistics`).

The U-statistics are those of :mod:`grpo_theory.advisor.pieces` (the main paper, Theorem 7):
``c1 = mean(T) - U``, ``c2 = mean(W - T)``, ``c3 = mean(R + T)``, each unbiased.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from .._precision import float64
from ..core import RolloutStatistics
from ..lm import LMPolicy, ModelOptions, lm_rollout_statistics
from .pieces import MIN_PROMPTS, MIN_SAMPLES, PARAMETERS, statistics_jit
from .result import ScalingEstimate


def check_sizes(m, n):
    if n < MIN_SAMPLES:
        raise ValueError(f"n_samples must be >= {MIN_SAMPLES} (the order-3 U-statistics of "
                         f"E[||s||^2|x] sigma^2(x) and tr Sigma_or(x) need {MIN_SAMPLES} distinct "
                         f"responses per prompt), got {n}")
    if m < MIN_PROMPTS:
        raise ValueError(f"n_prompts must be >= {MIN_PROMPTS} (the across-prompt U-statistic of "
                         f"||grad J||^2 needs 2 distinct prompts and its jackknife one more), "
                         f"got {m}")


def _finite(name, value, shape=None, ndim=None):
    arr = V.finite_array(name, value, ndim=ndim).astype(np.float64)
    if shape is not None:
        V.same_shape(name, arr, shape, "rewards' (n_prompts, n_samples)"
                     if len(shape) == 2 else "(n_prompts,)" if len(shape) == 1 else "(m, m)")
    return arr


@float64
def estimate_from_rollouts(rewards, scores=None, *, sq_norms=None, mean_gram=None, mean_sq=None,
                           mean_dot=None, alpha: float = 0.05) -> ScalingEstimate:
    """:class:`ScalingEstimate` from per-prompt rollouts (the low-level entry point).

    Give the rewards and either the scores, or the inner products they enter through:

    * ``scores`` (m, n, D); or
    * ``sq_norms`` (m, n) ``||s_ai||^2`` and ``mean_gram`` (m, m) the Gram matrix of the
      per-prompt means ``ghat_a = (1/n) sum_i Z_ai s_ai``; or (streaming, O(D) memory)
    * ``sq_norms``, ``mean_sq`` (m,) ``||ghat_a||^2`` and ``mean_dot`` (m,)
      ``<ghat_a, sum_b ghat_b>``; or
    * one :class:`~grpo_theory.core.rollouts.RolloutStatistics` in place of ``rewards`` (what
      the language-model routes return: :func:`grpo_theory.lm.budget.statistics.
      lm_rollout_statistics`, :func:`grpo_theory.torch.score_statistics`), the same as its
      four arrays given as above.

    Prompts must be iid draws from the prompt distribution and the n responses of a prompt iid
    from the policy (the scores true scores, ``E[s|x] = 0``).

    Args:
        rewards: (m, n) real rewards, m >= 3 prompts, n >= 3 responses each, or a
            :class:`~grpo_theory.core.rollouts.RolloutStatistics` (then nothing else but
            ``alpha``).
        scores, sq_norms, mean_gram, mean_sq, mean_dot: as above.
        alpha: level of the ``*_ci`` attributes (0.05: 95%), in (0, 1).

    Returns:
        :class:`ScalingEstimate`.

    Example (8 prompts x 4 responses, scores in D = 3 dimensions; the record of their inner
    products gives the same estimate as the scores):

    >>> import numpy as np
    >>> from grpo_theory.advisor import estimate_from_rollouts
    >>> from grpo_theory.core.rollouts import RolloutStatistics
    >>> rng = np.random.default_rng(0)
    >>> z = rng.integers(0, 2, size=(8, 4)).astype(float)
    >>> s = rng.normal(size=(8, 4, 3))
    >>> est = estimate_from_rollouts(z, s)
    >>> est.n_prompts, est.n_samples
    (8, 4)
    >>> ghat = np.einsum("ai,aid->ad", z, s) / 4
    >>> rec = RolloutStatistics(z, np.sum(s * s, 2), np.sum(ghat**2, 1), ghat @ ghat.sum(0))
    >>> bool(np.allclose(estimate_from_rollouts(rec).theta, est.theta))
    True

    Arithmetic: the U-statistics run on rewards and scores rescaled by powers of two (largest
    |Z| and |s| in [1/2, 1)) and the results are scaled back exactly (every constant scales as
    ``c(a Z, b s) = a^2 b^2 c(Z, s)``), so large-but-finite rewards or scores (1e150, 1e-150)
    neither overflow in the squares nor turn into NaN (a per-prompt piece whose value is beyond
    float64, e.g. ``sigma2`` of rewards near 1e160, is ``inf`` in :attr:`ScalingEstimate.pieces`).

    Raises:
        ValueError: a wrong shape, a non-finite or non-real input, fewer than 3 prompts or
            responses, ``sq_norms`` or ``mean_sq`` negative, ``mean_gram`` not symmetric (relative
            tolerance :data:`GRAM_SYMMETRY_RTOL`) or with a negative diagonal, or an estimate
            (or its covariance) beyond the float64 range, which is refused, never returned as
            inf or NaN.
    """
    if isinstance(rewards, RolloutStatistics):
        if any(a is not None for a in (scores, sq_norms, mean_gram, mean_sq, mean_dot)):
            raise ValueError("rewards is a RolloutStatistics record: give no scores, sq_norms, "
                             "mean_gram, mean_sq or mean_dot besides it")
        rewards, sq_norms, mean_sq, mean_dot = (rewards.rewards, rewards.sq_norms,
                                                rewards.mean_sq, rewards.mean_dot)
    z = _finite("rewards", rewards, ndim=2)
    m, n = z.shape
    check_sizes(m, n)
    alpha = V.real_scalar("alpha", alpha, positive=True)
    if not alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    kz = _exponent(z)
    z_ = np.ldexp(z, -kz)  # rewards / 2^kz, exact: max |Z| in [1/2, 1)
    if scores is not None:
        if any(a is not None for a in (sq_norms, mean_gram, mean_sq, mean_dot)):
            raise ValueError("give scores or the inner products (sq_norms, mean_gram / mean_sq + "
                             "mean_dot), not both")
        s = V.finite_array("scores", scores, ndim=3).astype(np.float64)
        V.same_shape("scores", s, (m, n, s.shape[2]), "rewards' (n_prompts, n_samples, D)")
        ks = _exponent(s)
        s = np.ldexp(s, -ks)
        kq = 2 * ks  # ||s||^2 scales by 2^(2 ks)
        q = np.sum(s * s, axis=2)
        ghat = np.einsum("ai,aid->ad", z_, s) / n
        mq, md = np.sum(ghat * ghat, axis=1), ghat @ ghat.sum(axis=0)
    else:
        if sq_norms is None:
            raise ValueError("give scores (m, n, D), or sq_norms (m, n) with mean_gram (m, m) or "
                             "with mean_sq and mean_dot (m,)")
        q = _finite("sq_norms", sq_norms, (m, n))
        if np.any(q < 0):
            raise ValueError("sq_norms must be non-negative (squared norms)")
        if mean_gram is not None:
            if mean_sq is not None or mean_dot is not None:
                raise ValueError("give mean_gram or (mean_sq, mean_dot), not both")
            gram = _finite("mean_gram", mean_gram, (m, m))
            _check_gram(gram)
            mq, md = np.diag(gram).copy(), _row_sums(gram)
        elif mean_sq is not None and mean_dot is not None:
            mq = _finite("mean_sq", mean_sq, (m,))
            if np.any(mq < 0):
                raise ValueError(f"mean_sq must be non-negative (squared norms ||ghat_a||^2), "
                                 f"got min {float(np.min(mq))!r}")
            md = _finite("mean_dot", mean_dot, (m,))
        else:
            raise ValueError("with sq_norms give mean_gram (m, m), or both mean_sq and mean_dot "
                             "(m,)")
        kq = _exponent(q)
        q = np.ldexp(q, -kq)
        with np.errstate(over="ignore"):  # inf here: refused below as an overflow
            mq, md = np.ldexp(mq, -(2 * kz + kq)), np.ldexp(md, -(2 * kz + kq))
    with jax.enable_x64(True):
        theta, cov, pieces = statistics_jit(jnp.asarray(z_), jnp.asarray(q), jnp.asarray(mq),
                                             jnp.asarray(md))
        theta, cov = np.asarray(theta), np.asarray(cov)
        pieces = {k: np.asarray(v) for k, v in pieces.items()}
    k = 2 * kz + kq  # every constant is quadratic in Z and in s: c(a Z, b s) = a^2 b^2 c(Z, s)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        tiny = np.finfo(np.float64).tiny
        lost = (k < 0) & (theta != 0) & (np.abs(np.ldexp(theta, k)) < tiny)
        if np.any(lost):
            raise ValueError(f"the estimates of {', '.join(np.asarray(PARAMETERS)[lost])} "
                             f"underflow float64 (rewards down to about 2^{kz}, squared scores "
                             f"2^{kq}; the constants scale as rewards^2 x ||s||^2): rescale the "
                             f"rewards or the scores (G* does not change)")
        theta, cov = np.ldexp(theta, k), np.ldexp(cov, 2 * k)
        pieces = {name: np.ldexp(v, _PIECE_SCALE[name](kz, kq)) for name, v in pieces.items()}
    _check_finite_results(theta, cov, kz, kq)
    # BASIS's cross-prompt pieces are computed from the same rescaled arrays when asked for
    rollouts = (z_, np.asarray(q), np.asarray(mq), np.asarray(md), int(k))
    return ScalingEstimate(theta, cov, pieces, z, float(alpha), rollouts)


#: the power of two each per-prompt piece scales by, given rewards x 2^kz, ||s||^2 x 2^kq
_PIECE_SCALE = {"value": lambda kz, kq: kz, "sigma2": lambda kz, kq: 2 * kz,
                "score_sq": lambda kz, kq: kq}
for _name in ("grad_sq", "score_sq_sigma2", "score_sq_dev2", "tr_oracle", "score_sq_z2", "c3",
              "c_v"):
    _PIECE_SCALE[_name] = lambda kz, kq: 2 * kz + kq
del _name

#: relative tolerance of mean_gram's symmetry (|G - G^T| <= tol * max |G|)
GRAM_SYMMETRY_RTOL = 1e-8


def _exponent(x) -> int:
    """e with max |x| = f 2^e, f in [1/2, 1) (0 for an all-zero array): x / 2^e is exact."""
    top = float(np.max(np.abs(x))) if np.size(x) else 0.0
    return int(np.frexp(top)[1]) if top > 0 else 0


def _row_sums(gram):
    """Row sums of a finite matrix without overflow to inf where the sum itself is finite."""
    k = _exponent(gram)
    with np.errstate(over="ignore"):
        return np.ldexp(np.ldexp(gram, -k).sum(axis=1), k)


def _check_gram(gram):
    """mean_gram must be a Gram matrix: symmetric within a tolerance, non-negative diagonal."""
    diag = np.diag(gram)
    if np.any(diag < 0):
        a = int(np.argmin(diag))
        raise ValueError(f"mean_gram must have a non-negative diagonal (||ghat_a||^2), got "
                         f"mean_gram[{a}, {a}] = {float(diag[a])!r}")
    k = _exponent(gram)
    g = np.ldexp(gram, -k)
    asym = float(np.max(np.abs(g - g.T)))
    if asym > GRAM_SYMMETRY_RTOL * float(np.max(np.abs(g))):
        i, j = np.unravel_index(int(np.argmax(np.abs(g - g.T))), g.shape)
        raise ValueError(f"mean_gram must be symmetric (a Gram matrix <ghat_a, ghat_b>), got "
                         f"mean_gram[{i}, {j}] = {float(gram[i, j])!r} != mean_gram[{j}, {i}] = "
                         f"{float(gram[j, i])!r} (relative tolerance {GRAM_SYMMETRY_RTOL})")


def _check_finite_results(theta, cov, kz, kq):
    """The estimates and their covariance finite: beyond float64 is an error, never inf/NaN.

    (A per-prompt piece of :attr:`ScalingEstimate.pieces` whose true value lies beyond float64,
    e.g. ``sigma2`` of rewards near 1e160, is ``inf``; it is never NaN.)"""
    scale = (f"(rewards up to about 2^{kz}, squared scores up to about 2^{kq}; the constants "
             f"scale as rewards^2 x ||s||^2)")
    bad = [PARAMETERS[i] for i in range(len(PARAMETERS)) if not np.isfinite(theta[i])]
    if bad:
        raise ValueError(f"the estimates of {', '.join(bad)} overflow float64 {scale}: rescale "
                         f"the rewards or the scores (c1, c2, c3 scale by a^2 b^2 for rewards "
                         f"x a, scores x b; G* does not change)")
    if not np.all(np.isfinite(cov)):
        raise ValueError(f"the jackknife covariance of the estimates (their square) overflows "
                         f"float64 {scale}: rescale the rewards or the scores (c1, c2, c3 scale "
                         f"by a^2 b^2 for rewards x a, scores x b; G* does not change)")


# --- policies -------------------------------------------------------------------------------------

def _enumerable_rollouts(policy, m, n, key):
    from ..core import as_problem

    prob = as_problem(policy)
    P, K, D = prob.scores.shape
    V.check_memory(f"the sampled ({m}, {n}, {D}) scores", 8.0 * m * n * D * 2,
                   "use fewer prompts or responses")
    with jax.enable_x64(True):
        z, s = _sample_scores(key, prob, m, n)
        return np.asarray(z), np.asarray(s)


@partial(jax.jit, static_argnames=("m", "n"))
def _sample_scores(key, prob, m, n):
    """Rewards (m, n) and the sampled scores (m, n, D) of a DiscreteProblem (one compile)."""
    from ..core import sample_from_uniforms

    kx, ky, kz = jax.random.split(key, 3)
    x, y, z = sample_from_uniforms(prob, jax.random.uniform(kx, (m,)),
                                   jax.random.uniform(ky, (m, n)), jax.random.uniform(kz, (m, n)))
    return z, prob.scores[x[:, None], y]


def estimate_scaling_constants(policy, n_prompts=None, n_samples: int = 8, seed=0, *,
                               prompts=None, reward=None, response_len=None,
                               chunk: int | None = 64, alpha: float = 0.05, progress=None,
                               memory_budget=None, stage=None, key=None,
                               options: ModelOptions | None = None) -> ScalingEstimate:
    """Unbiased c1, c2, c3 and G* with 95% intervals from sampled rollouts of ``policy``.

    ``policy`` may be

    * an enumerable policy of the package (:class:`~grpo_theory.SoftmaxBandit`,
      :class:`~grpo_theory.LinearSoftmaxBandit`, :class:`~grpo_theory.SequencePolicy`) or a
      :class:`~grpo_theory.DiscreteProblem`: ``n_prompts`` prompts drawn from its prompt
      distribution, ``n_samples`` responses each, Bernoulli rewards;
    * a language-model policy (:class:`grpo_theory.lm.policy.LMPolicy`), or a model given as
      ``(params, apply_fn)``: ``apply_fn(params, tokens, prompt_len) -> logits`` with ``tokens``
      an integer (N, T) array (prompt then response), ``prompt_len`` the prompt's length (a
      Python int) and ``logits`` (N, T, vocab) the next-token logits at every position
      (JAX-traceable in ``params``, which may be any pytree; responses end at
      ``grpo_theory.lm.task.EOS``). Then ``prompts`` (the pool, an integer (N, P) array),
      ``reward`` (``reward(rows, responses) -> rewards`` with ``rows`` indices into ``prompts``)
      and ``response_len`` are required; ``n_prompts`` prompts are drawn uniformly with
      replacement from the pool (``None``: each row once, the pool taken as the iid sample).
      Scores come from ``jax.grad`` and are streamed (:func:`lm_rollout_statistics`).

    Args:
        policy: see above.
        n_prompts: m >= 3 prompts (:data:`MIN_PROMPTS`).
        n_samples: n >= 3 responses per prompt (:data:`MIN_SAMPLES`).
        seed: integer seed or JAX key.
        key: a JAX PRNG key (or an integer), used instead of ``seed`` when given.
        prompts, reward, response_len, chunk, progress, memory_budget, stage, options: the
            language-model route (above; :func:`grpo_theory.lm.budget.statistics.
            lm_rollout_statistics`).
        alpha: level of the ``*_ci`` attributes.

    Returns:
        :class:`ScalingEstimate` (``c1``, ``c2``, ``c3``, ``c*_ci``, ``g_star``, ``g_star_ci``,
        ``conf_int()``, ``summary()``, ``mse(B, G, estimator)``, ``recommended_group_size(N)``).
    """
    n = V.integer("n_samples", n_samples)
    key = V.key_or_seed(seed, "seed") if key is None else V.key_or_seed(key, "key")
    if isinstance(policy, tuple):
        if len(policy) != 2 or not callable(policy[1]):
            raise ValueError("a model given as a tuple must be (params, apply_fn) with a callable "
                             "apply_fn(params, tokens, prompt_len) -> logits")
        policy = LMPolicy(policy[0], policy[1])
    if isinstance(policy, LMPolicy):
        if prompts is None or reward is None or response_len is None:
            raise ValueError("a language-model policy needs prompts (N, P), reward(rows, "
                             "responses) and response_len")
        if not callable(reward):
            raise ValueError(f"reward must be callable, got {type(reward).__name__}")
        pool = np.asarray(policy.check_prompts(prompts))
        kp, ks = jax.random.split(key)
        if n_prompts is None:
            rows = np.arange(pool.shape[0])
        else:
            m = V.integer("n_prompts", n_prompts)
            check_sizes(m, n)
            rows = np.asarray(jax.random.randint(kp, (m,), 0, pool.shape[0]))
        check_sizes(len(rows), n)
        if options is None:
            options = ModelOptions(memory_budget=memory_budget, chunk=chunk)
        elif chunk != 64 or memory_budget is not None:
            raise ValueError("give options or (chunk, memory_budget), not both")
        st = lm_rollout_statistics(policy, pool[rows], lambda r, y: reward(rows[r], y), n, ks,
                                   response_len, progress=progress, stage=stage,
                                   options=options)
        return estimate_from_rollouts(st, alpha=alpha)
    if n_prompts is None:
        raise ValueError("n_prompts is required for an enumerable policy")
    m = V.integer("n_prompts", n_prompts)
    check_sizes(m, n)
    z, s = _enumerable_rollouts(policy, m, n, key)
    return estimate_from_rollouts(z, s, alpha=alpha)
