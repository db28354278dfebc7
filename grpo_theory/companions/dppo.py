r"""DPPO: unbiased random pruning of prompts and completions (arXiv 2603.04135).

A sampled batch of B prompts x G completions gives the full-batch estimate

.. math:: \hat g = \sum_{b,g} t_{bg}, \qquad t_{bg} = \frac{A_{bg}\, s_{bg}}{BG},

with advantages ``A`` from any registry estimator computed on the **full** group. DPPO keeps
prompt b with probability ``qp_b`` and completion (b, g) with probability ``qc_bg`` (independent
Bernoulli masks ``m_b``, ``c_bg``; the q's may depend on the sampled batch, never on the masks)
and rescales the kept terms by ``1/q``:

.. math:: \hat g_{\rm DPPO} = \sum_{b,g} \frac{m_b}{qp_b} \frac{c_{bg}}{qc_{bg}}\, t_{bg},
          \qquad E_{\rm mask}[\hat g_{\rm DPPO} \mid {\rm batch}] = \hat g

(a Horvitz-Thompson estimator). Its added variance given the batch is exact
(:func:`added_variance`), with ``T_b = sum_g t_bg``:

.. math:: {\rm tr\,Var}_{\rm mask} = \sum_b \Big[\frac{1-qp_b}{qp_b}\|T_b\|^2
          + \frac{1}{qp_b} \sum_g \frac{1-qc_{bg}}{qc_{bg}} \|t_{bg}\|^2\Big],

so ``MSE_DPPO = MSE_full + E_batch[added variance]`` (the cross term vanishes by conditional
unbiasedness); :func:`exact_pruned_mse` evaluates it in closed form by binary-reward
conditioning. Negative controls (all biased, :data:`METHODS`): ``no_rescale`` (drop the 1/q),
``deterministic`` (drop the lowest-|A| completions / prompts, rescale by the kept fraction),
``recompute`` (advantages recomputed on the kept completions, then 1/q), ``renormalise`` (divide
the kept sum of ``A s`` by the kept count instead of rescaling by 1/q).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import partial
from math import comb

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from ..core import (DiscreteProblem, Estimator, PromptContext, as_problem, exact_mse,
                    get_estimator, sample_groups, summarize_squared_errors)
from .._precision import float64


METHODS = ("dppo", "no_rescale", "deterministic", "recompute", "renormalise")


# --- keep-probability schemes ------------------------------------------------------------------


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class KeepScheme:
    r"""Keep probabilities as a function of one group's full advantages ``A`` (..., G).

    ``kind="uniform"``: ``qp = q_prompt``, ``qc = q_completion``.
    ``kind="advantage"``: per completion ``qc = floor + (1 - floor) |A_g| / max_k |A_k|`` within
    its group (``floor`` for a group whose advantages are all 0), so completions that carry
    little gradient are pruned more; prompts kept with ``q_prompt``, except groups whose
    advantages are all 0, kept with ``zero_group_prompt`` (if given). Every q lies in (0, 1]
    and depends on the batch only, so DPPO stays unbiased.
    """

    kind: str = "uniform"
    q_prompt: float = 1.0
    q_completion: float = 1.0
    floor: float = 0.25
    zero_group_prompt: float | None = None

    @float64
    def __post_init__(self):
        if self.kind not in ("uniform", "advantage"):
            raise ValueError(f"kind must be 'uniform' or 'advantage', got {self.kind!r}")
        for name in ("q_prompt", "q_completion", "floor"):
            _check_q(name, getattr(self, name))
        if self.zero_group_prompt is not None:
            _check_q("zero_group_prompt", self.zero_group_prompt)

    # A pytree whose leaves are all numeric (kind as a 0/1 flag, "no zero-group rule" as 0), so
    # jit traces every scheme with one compilation.
    @float64
    def tree_flatten(self):
        zg = 0.0 if self.zero_group_prompt is None else self.zero_group_prompt
        flag = self.kind if not isinstance(self.kind, str) else float(self.kind == "advantage")
        return (flag, self.q_prompt, self.q_completion, self.floor, zg), None

    @classmethod
    @float64
    def tree_unflatten(cls, aux, leaves):
        new = object.__new__(cls)
        flag, qp, qc, floor, zg = leaves
        if isinstance(flag, (int, float, np.floating)):  # concrete: restore the readable form
            flag = "advantage" if flag > 0.5 else "uniform"
            zg = None if zg == 0 else zg
        for name, val in zip(("kind", "q_prompt", "q_completion", "floor", "zero_group_prompt"),
                             (flag, qp, qc, floor, zg)):
            object.__setattr__(new, name, val)
        return new

    @float64
    def __call__(self, adv):
        adv = jnp.asarray(adv)
        lead = adv.shape[:-1]
        is_adv = self.kind == "advantage" if isinstance(self.kind, str) else self.kind > 0.5
        zg = 0.0 if self.zero_group_prompt is None else self.zero_group_prompt
        mag = jnp.abs(adv)
        top = jnp.max(mag, axis=-1, keepdims=True)
        zero = top <= 0.0
        qc_adv = jnp.where(zero, self.floor, self.floor + (1 - self.floor) * mag
                           / jnp.where(zero, 1.0, top))
        qp_adv = jnp.where(zero[..., 0] & (zg > 0), zg, self.q_prompt)
        qp = jnp.where(is_adv, qp_adv, jnp.full(lead, self.q_prompt))
        qc = jnp.where(is_adv, qc_adv, jnp.full(adv.shape, self.q_completion))
        return qp, qc

    @float64
    def label(self) -> str:
        if self.kind == "uniform":
            return f"uniform(qp={self.q_prompt:g},qc={self.q_completion:g})"
        z = "" if self.zero_group_prompt is None else f",q0={self.zero_group_prompt:g}"
        return f"advantage(qp={self.q_prompt:g},floor={self.floor:g}{z})"


def _check_q(name, q):
    q = np.asarray(q, dtype=np.float64)
    if not np.all(np.isfinite(q)) or np.any(q <= 0.0) or np.any(q > 1.0):
        raise ValueError(f"{name} must be a keep-probability in (0, 1], got {q}")
    return q


def _check_method(method):
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")


# --- a batch's terms ---------------------------------------------------------------------------


def _context(problem: DiscreteProblem, x) -> PromptContext:
    return PromptContext(prompt=x, value=problem.values()[x],
                         optimal_baseline=problem.optimal_baselines()[x])


@float64
def batch_terms(problem: DiscreteProblem, estimator, x, y, z):
    """Full-group advantages ``A`` (B, G), scores ``S`` (B, G, D) and the context of a batch."""
    est = get_estimator(estimator)
    ctx = _context(problem, x)
    return est.advantage(z, ctx), problem.scores[x[..., None], y], ctx


@float64
def full_estimate(adv, scores):
    """The unpruned estimate ``(1/BG) sum A_bg s_bg``, shape (D,)."""
    b, g = adv.shape[-2:]
    return jnp.einsum("...bg,...bgd->...d", adv, scores) / (b * g)


@float64
def masked_advantages(estimator: Estimator, z, keep, ctx: PromptContext):
    """Advantages recomputed on the kept completions of each group (the ``recompute`` control).

    ``keep`` (B, G) booleans. For a group with k kept, the registry estimator is applied to the k
    kept rewards (in their original order); pruned entries and groups with k below the
    estimator's minimum group size get advantage 0 (such a group cannot form its baseline and is
    dropped, as implementations do). Jit-able: every k is evaluated and the right one selected.
    """
    est = get_estimator(estimator)
    G = z.shape[-1]
    order = jnp.argsort(~keep, axis=-1, stable=True)  # kept first, original order
    inverse = jnp.argsort(order, axis=-1)
    zc = jnp.take_along_axis(z, order, axis=-1)
    n = jnp.sum(keep, axis=-1)
    out = jnp.zeros_like(z)
    for k in range(max(1, est.min_group_size), G + 1):
        a = est.advantage(zc[..., :k], ctx)
        a = jnp.concatenate([a, jnp.zeros(z.shape[:-1] + (G - k,))], axis=-1)
        out = jnp.where((n == k)[..., None], a, out)
    return jnp.take_along_axis(out, inverse, axis=-1) * keep


def _deterministic_keep(adv, qp, qc):
    """Keep the round(mean(qc) G) largest-|A| completions per group and the round(mean(qp) B)
    prompts with the largest sum |A| (ties by index); returns masks and rescaling factors."""
    B, G = adv.shape
    mag = jnp.abs(adv)
    n_c = jnp.clip(jnp.round(jnp.mean(qc, axis=-1) * G), 1, G)  # (B,)
    rank_c = jnp.argsort(jnp.argsort(-mag, axis=-1, stable=True), axis=-1)
    c = rank_c < n_c[:, None]
    n_p = jnp.clip(jnp.round(jnp.mean(qp) * B), 1, B)
    rank_p = jnp.argsort(jnp.argsort(-jnp.sum(mag, axis=-1), stable=True))
    m = rank_p < n_p
    return m, c, B / n_p, G / n_c


@float64
def pruned_estimate(method: str, estimator, z, ctx, adv, scores, qp, qc, m, c):
    """One pruned estimate (D,) given masks ``m`` (B,) and ``c`` (B, G) (0/1).

    ``dppo``: ``sum (m/qp)(c/qc) A s / BG`` (unbiased). Controls: ``no_rescale`` (no 1/q),
    ``deterministic`` (ignores the masks, see :func:`_deterministic_keep`), ``recompute``
    (advantages of the kept subset, then 1/q), ``renormalise`` (``sum_kept A s / #kept``).
    """
    B, G = adv.shape
    m = m.astype(jnp.float64)
    c = c.astype(jnp.float64)
    keep = m[:, None] * c
    if method == "dppo":
        w = keep / (qp[:, None] * qc) * adv / (B * G)
    elif method == "no_rescale":
        w = keep * adv / (B * G)
    elif method == "recompute":
        a = masked_advantages(estimator, z, keep > 0, ctx)
        w = keep / (qp[:, None] * qc) * a / (B * G)
    elif method == "renormalise":
        n = jnp.sum(keep)
        w = keep * adv / jnp.where(n > 0, n, 1.0)
    elif method == "deterministic":
        dm, dc, sp, sc = _deterministic_keep(adv, qp, qc)
        w = (dm[:, None] * dc) * sp * sc[:, None] * adv / (B * G)
    else:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return jnp.einsum("bg,bgd->d", w, scores)


# --- exact expectation over all masks ----------------------------------------------------------


@float64
def enumerate_masks(B: int, G: int, max_masks: int = 2**16):
    """All 2^(B + BG) prompt/completion masks: ``m`` (M, B), ``c`` (M, B, G) as float64."""
    units = B + B * G
    if 2**units > max_masks:
        raise ValueError(f"enumeration has 2^{units} masks > max_masks={max_masks}")
    bits = np.array(list(itertools.product((0.0, 1.0), repeat=units)))
    return jnp.asarray(bits[:, :B]), jnp.asarray(bits[:, B:].reshape(-1, B, G))


def _mask_probs(qp, qc, m, c):
    pm = jnp.prod(jnp.where(m > 0, qp, 1 - qp), axis=-1)
    pc = jnp.prod(jnp.where(c > 0, qc, 1 - qc), axis=(-2, -1))
    return pm * pc


@float64
def pruned_estimates_all(estimator, z, ctx, adv, scores, qp, qc, m, c, methods=METHODS):
    """Every method's pruned estimate for one mask, stacked in ``methods`` order, (n, D)."""
    return jnp.stack([pruned_estimate(meth, estimator, z, ctx, adv, scores, qp, qc, m, c)
                      for meth in methods])


@partial(jax.jit, static_argnames=("estimator",))
def _mask_moments(estimator, z, ctx, adv, scores, qp, qc, m, c):
    w = _mask_probs(qp, qc, m, c)
    vals = jax.vmap(lambda mm, cc: pruned_estimates_all(estimator, z, ctx, adv, scores,
                                                        qp, qc, mm, cc))(m, c)  # (M, 5, D)
    mean = jnp.einsum("m,mkd->kd", w, vals)
    second = jnp.einsum("m,mk->k", w, jnp.sum(vals**2, axis=-1))
    return mean, second - jnp.sum(mean**2, axis=-1), jnp.sum(w)


@float64
def exact_mask_moments(estimator, z, ctx, adv, scores, qp, qc) -> dict:
    """Exact ``E_mask[ghat_pruned]`` and ``tr Var_mask`` of every method by enumerating all
    2^(B + BG) masks of one fixed batch: ``{method: (mean (D,), trace variance)}`` plus
    ``"total_probability"`` (sums to 1: a check of the enumeration)."""
    est = get_estimator(estimator)
    _check_q("qp", qp)
    _check_q("qc", qc)
    m, c = enumerate_masks(*adv.shape)
    mean, var, total = _mask_moments(est, z, ctx, adv, scores, jnp.asarray(qp),
                                     jnp.asarray(qc), m, c)
    out = {meth: (mean[i], float(var[i])) for i, meth in enumerate(METHODS)}
    out["total_probability"] = float(total)
    return out


@float64
def added_variance(adv, scores, qp, qc):
    """Exact ``tr Var_mask[ghat_DPPO | batch]`` (Horvitz-Thompson; module docstring)."""
    B, G = adv.shape[-2:]
    t = adv[..., None] * scores / (B * G)
    T2 = jnp.sum(jnp.sum(t, axis=-2) ** 2, axis=-1)
    t2 = jnp.sum(t**2, axis=-1)
    inner = jnp.sum((1 - qc) / qc * t2, axis=-1)
    return jnp.sum((1 - qp) / qp * T2 + inner / qp, axis=-1)


@partial(jax.jit, static_argnames=("method", "estimator", "n_reps"))
def _mc_masks(key, method, estimator, z, ctx, adv, scores, qp, qc, n_reps):
    B, G = adv.shape
    km, kc = jax.random.split(key)
    m = jax.random.bernoulli(km, qp, (n_reps, B))
    c = jax.random.bernoulli(kc, qc, (n_reps, B, G))
    return jax.vmap(lambda mm, cc: pruned_estimate(method, estimator, z, ctx, adv, scores,
                                                   qp, qc, mm, cc))(m, c)


@float64
def mc_mask_estimates(key, method: str, estimator, z, ctx, adv, scores, qp, qc,
                      n_reps: int = 10_000):
    """``n_reps`` pruned estimates (R, D) of one fixed batch, masks drawn at random."""
    _check_method(method)
    V.positive_int("n_reps", n_reps, 2)
    return _mc_masks(key, method, get_estimator(estimator), z, ctx, adv, scores,
                     jnp.asarray(qp), jnp.asarray(qc), n_reps)


# --- exact over the sampling of the batch (brute force) -----------------------------------------


@float64
def enumerate_batches(bandit, group_size: int, batch_size: int = 1, max_outcomes: int = 100_000):
    """Every batch (prompts, responses, binary rewards) with its probability.

    Returns ``prob`` (N,), ``x`` (N, B), ``y`` (N, B, G), ``z`` (N, B, G); N = (P (2K)^G)^B, the
    same outcome space as :func:`grpo_theory.exact.enumerate_estimates`.
    """
    problem = as_problem(bandit)
    G = V.positive_int("group_size", group_size, 1)
    B = V.positive_int("batch_size", batch_size, 1)
    P, K = problem.n_prompts, problem.n_responses
    n_group = P * (2 * K) ** G
    if n_group**B > max_outcomes:
        raise ValueError(f"enumeration has {n_group ** B} batches > max_outcomes={max_outcomes}")
    f, p, mu = (np.asarray(a) for a in (problem.prompt_probs, problem.probs,
                                         problem.reward_means))
    grid = np.array(list(itertools.product(range(P), *[range(2 * K)] * G)))
    x1, y1, z1 = grid[:, 0], grid[:, 1:] // 2, (grid[:, 1:] % 2).astype(np.float64)
    pz = np.where(z1 == 1, mu[x1[:, None], y1], 1 - mu[x1[:, None], y1])
    prob1 = f[x1] * np.prod(p[x1[:, None], y1] * pz, axis=1)
    combos = np.array(list(itertools.product(range(n_group), repeat=B)))
    return (jnp.asarray(np.prod(prob1[combos], axis=1)), jnp.asarray(x1[combos]),
            jnp.asarray(y1[combos]), jnp.asarray(z1[combos]))


@float64
def exact_pruning_expectation(bandit, estimator, group_size: int, batch_size: int,
                              scheme: KeepScheme, lengths=None) -> dict:
    """Brute force over every batch and every mask, for every method (tiny problems only).

    Returns ``{method: dict}`` with ``mean_full`` = E[ghat] (D,), ``mean_pruned`` =
    E[ghat_pruned] (D,), ``mse_full``/``mse_pruned`` = E||. - grad J||^2, ``cond_bias`` = max
    over batches of ``max|E_mask[ghat_pruned | batch] - ghat(batch)|``, ``added_variance`` =
    E_batch of the exact formula (the DPPO one) and ``kept_tokens`` = E[sum qp qc L] / E[sum L].
    """
    problem = as_problem(bandit)
    est = get_estimator(estimator)
    V.group_run(est, group_size, batch_size)
    prob, x, y, z = enumerate_batches(problem, group_size, batch_size)
    m, c = enumerate_masks(batch_size, group_size)
    L = jnp.asarray(response_lengths(bandit) if lengths is None else lengths, dtype=jnp.float64)
    full, mean, second, added, kept, total = _batch_mask_moments(problem, L, est, scheme,
                                                                 x, y, z, m, c)
    grad = problem.gradient()
    common = dict(mean_full=prob @ full,
                  mse_full=float(prob @ jnp.sum((full - grad) ** 2, axis=1)),
                  added_variance=float(prob @ added),
                  kept_tokens=float((prob @ kept) / (prob @ total)))
    out = {}
    for i, meth in enumerate(METHODS):
        mi = mean[:, i]
        out[meth] = dict(common, mean_pruned=prob @ mi,
                         mse_pruned=float(prob @ (second[:, i] - 2 * mi @ grad) + grad @ grad),
                         cond_bias=float(jnp.max(jnp.abs(mi - full))))
    return out


@partial(jax.jit, static_argnames=("estimator",))
def _batch_mask_moments(problem, lengths, estimator, scheme, x, y, z, m, c):
    def one(xb, yb, zb):
        adv, sc, ctx = batch_terms(problem, estimator, xb, yb, zb)
        qp, qc = scheme(adv)
        w = _mask_probs(qp, qc, m, c)
        vals = jax.vmap(lambda mm, cc: pruned_estimates_all(estimator, zb, ctx, adv, sc,
                                                            qp, qc, mm, cc))(m, c)
        toks = lengths[yb]
        return (full_estimate(adv, sc), jnp.einsum("m,mkd->kd", w, vals),
                jnp.einsum("m,mk->k", w, jnp.sum(vals**2, axis=-1)),
                added_variance(adv, sc, qp, qc), jnp.sum(qp[:, None] * qc * toks),
                jnp.sum(toks))

    return jax.lax.map(lambda a: one(*a), (x, y, z), batch_size=256)


# --- exact MSE and kept tokens by binary-reward conditioning ------------------------------------


@float64
def response_lengths(bandit) -> np.ndarray:
    """Token length of every response (K,): a SequencePolicy's ``lengths``, else all 1."""
    lengths = getattr(bandit, "lengths", None)
    if lengths is None:
        return np.ones(as_problem(bandit).n_responses)
    return np.asarray(lengths, dtype=np.float64)


@partial(jax.jit, static_argnames=("estimator",))
def _pattern_terms(problem, estimator, scheme, zpat):
    xs = jnp.broadcast_to(jnp.arange(zpat.shape[0])[:, None], zpat.shape[:2])
    adv = estimator.advantage(zpat, _context(problem, xs))
    return (adv, *scheme(adv))


@float64
def exact_pruned_mse(bandit, estimator, group_size: int, batch_size: int, scheme: KeepScheme,
                     lengths=None) -> dict:
    r"""Exact MSE of DPPO over batch sampling and masks, and the expected kept-token share.

    Conditioning on the number k of correct responses in a group (see :mod:`grpo_theory.exact`):
    correct responses have advantage ``a1(k)`` and keep-probability ``h1(k)``, incorrect ones
    ``a0(k)``, ``h0(k)``; with ``q1 = E[||s||^2 | Z=1]`` etc.,
    ``E[added variance] = (1/B) E_x sum_k P(k) [(1-qp)/qp E||ghat_x||^2|k
    + (k (1-h1)/h1 a1^2 q1 + (G-k)(1-h0)/h0 a0^2 q0) / (qp G^2)]`` and
    ``MSE = MSE_full + E[added variance]``. Returns a dict with ``mse_full``, ``added``, ``mse``,
    ``kept_tokens`` (expected kept / expected total tokens) and ``kept_completions``. Needs keep
    probabilities that depend only on the group's own advantages, symmetrically in the
    completions (true of every :class:`KeepScheme`); checked against brute-force enumeration
    (:func:`exact_pruning_expectation`) in the tests.
    """
    problem = as_problem(bandit)
    est = get_estimator(estimator)
    V.group_run(est, group_size, batch_size)
    G, B = int(group_size), int(batch_size)
    if not est.rewards_only:
        raise ValueError(f"estimator {est.name!r} has no binary-conditioning exact form")
    L = response_lengths(bandit) if lengths is None else V.finite_array("lengths", lengths, 1)
    if L.shape != (problem.n_responses,) or np.any(L <= 0):
        raise ValueError(f"lengths must be positive with shape ({problem.n_responses},)")
    P = problem.n_prompts
    p, mu, s = (np.asarray(a) for a in (problem.probs, problem.reward_means, problem.scores))
    ssq = np.sum(s**2, axis=-1)
    v = np.sum(p * mu, axis=1)
    w1, w0 = p * mu, p * (1 - mu)
    n1 = np.where(v > 0, v, 1.0)[:, None]
    n0 = np.where(v < 1, 1 - v, 1.0)[:, None]
    m1 = np.einsum("pk,pkd->pd", w1 / n1, s)
    m0 = np.einsum("pk,pkd->pd", w0 / n0, s)
    q1, q0 = np.sum(w1 / n1 * ssq, axis=1), np.sum(w0 / n0 * ssq, axis=1)
    el1, el0 = np.sum(w1 / n1 * L, axis=1), np.sum(w0 / n0 * L, axis=1)
    # advantages and keep-probabilities of the pattern "k ones first" (k = 0..G)
    k = np.arange(G + 1)
    zpat = np.broadcast_to((np.arange(G)[None, :] < k[:, None]).astype(np.float64), (P, G + 1, G))
    adv, qp, qc = (np.asarray(a) for a in _pattern_terms(problem, est, scheme, jnp.asarray(zpat)))
    a1, a0 = adv[:, :, 0], adv[:, :, -1]
    h1, h0 = qc[:, :, 0], qc[:, :, -1]
    kf = k[None, :].astype(np.float64)
    binom = np.array([comb(G, j) for j in range(G + 1)], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        pk = binom[None, :] * v[:, None] ** kf * (1 - v[:, None]) ** (G - kf)
    has1, has0 = kf > 0, kf < G
    a1, a0 = np.where(has1, a1, 0.0), np.where(has0, a0, 0.0)
    m11, m00 = np.sum(m1**2, 1)[:, None], np.sum(m0**2, 1)[:, None]
    m10 = np.sum(m1 * m0, 1)[:, None]
    g2 = (a1**2 * (kf * q1[:, None] + kf * (kf - 1) * m11)
          + a0**2 * ((G - kf) * q0[:, None] + (G - kf) * (G - kf - 1) * m00)
          + 2 * a1 * a0 * kf * (G - kf) * m10) / G**2  # E||ghat_x||^2 given k
    inner = (kf * np.where(has1, (1 - h1) / h1, 0.0) * a1**2 * q1[:, None]
             + (G - kf) * np.where(has0, (1 - h0) / h0, 0.0) * a0**2 * q0[:, None]) / G**2
    per_k = (1 - qp) / qp * g2 + inner / qp
    f = np.asarray(problem.prompt_probs)
    added = float(f @ np.sum(pk * per_k, axis=1)) / B
    kept = qp * (kf * np.where(has1, h1, 0.0) * el1[:, None]
                 + (G - kf) * np.where(has0, h0, 0.0) * el0[:, None])
    kept_c = qp * (kf * np.where(has1, h1, 0.0) + (G - kf) * np.where(has0, h0, 0.0))
    tokens = G * (f @ np.sum(p * L, axis=1))
    method = "auto" if est.closed_form is not None else "binary"
    mse_full = float(exact_mse(problem, est, G, B, method=method))
    return dict(mse_full=mse_full, added=added, mse=mse_full + added,
                kept_tokens=float(f @ np.sum(pk * kept, axis=1) / tokens),
                kept_completions=float(f @ np.sum(pk * kept_c, axis=1)) / G)


# --- Monte Carlo over batch sampling and masks --------------------------------------------------


@partial(jax.jit, static_argnames=("estimator", "batch_size", "group_size", "chunk", "methods"))
def _mc_pruned(keys, problem, lengths, estimator, scheme, batch_size, group_size, chunk,
               methods):
    grad = problem.gradient()

    def one(key):
        kb, km, kc = jax.random.split(key, 3)
        x, y, z = sample_groups(kb, problem, batch_size, group_size)
        adv, sc, ctx = batch_terms(problem, estimator, x, y, z)
        qp, qc = scheme(adv)
        m = jax.random.bernoulli(km, qp)
        c = jax.random.bernoulli(kc, qc)
        est = pruned_estimates_all(estimator, z, ctx, adv, sc, qp, qc, m, c, methods)
        toks = lengths[y]
        return (jnp.sum((est - grad) ** 2, axis=-1), jnp.sum((full_estimate(adv, sc) - grad)
                                                              ** 2),
                jnp.sum(m[:, None] * c * toks), jnp.sum(toks))

    keys = keys.reshape(-1, chunk, *keys.shape[1:])
    out = jax.lax.map(jax.vmap(one), keys)
    return jax.tree_util.tree_map(lambda a: a.reshape(-1, *a.shape[2:]), out)


@float64
def mc_pruned_mse(bandit, estimator, group_size: int, batch_size: int, scheme: KeepScheme,
                  n_reps: int = 20_000, seed: int = 0, lengths=None, chunk: int = 1000,
                  methods=METHODS, *, key=None) -> dict:
    """Monte Carlo over batch sampling and masks, every method in ``methods`` from the same draws.

    Returns ``{method: dict(mse, se, ci_low, ci_high)}``, plus ``"full"`` (the unpruned
    estimate from the same batches) and ``"kept_tokens"`` (total kept / total tokens, as in
    :func:`exact_pruned_mse`). ``n_reps`` is rounded up to a multiple of ``chunk``.
    ``key`` (a JAX key or an integer) replaces the integer ``seed`` when given.
    """
    problem = as_problem(bandit)
    est = get_estimator(estimator)
    V.positive_int("n_reps", n_reps, 2)
    V.positive_int("chunk", chunk, 1)
    V.group_run(est, group_size, batch_size)
    L = response_lengths(bandit) if lengths is None else np.asarray(lengths, dtype=np.float64)
    chunk = min(chunk, n_reps)
    n = -(-n_reps // chunk) * chunk
    keys = jax.random.split(V.random_key(seed, key), n)
    methods = tuple(methods)
    for meth in methods:
        _check_method(meth)
    err2, err2_full, kept, total = _mc_pruned(keys, problem, jnp.asarray(L), est, scheme,
                                              batch_size, group_size, chunk, methods)
    err2 = np.asarray(err2)
    out = {}
    for i, meth in enumerate(methods):
        mse, se, lo, hi = summarize_squared_errors(err2[:, i])
        out[meth] = dict(mse=mse, se=se, ci_low=lo, ci_high=hi)
    mse, se, lo, hi = summarize_squared_errors(np.asarray(err2_full))
    out["full"] = dict(mse=mse, se=se, ci_low=lo, ci_high=hi)
    out["kept_tokens"] = float(np.sum(kept) / np.sum(total))
    out["n_reps"] = n
    return out


# --- the example problem of the DPPO driver -----------------------------------------------------
