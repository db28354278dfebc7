r"""Effective rank of a language model's per-response group-gradient matrix (credit-assignment
companion paper, its "rank about 2 whatever G" claim).

For one prompt and a group of G responses with scores ``s_g = grad log pi(y_g|x)`` (D = all
parameters) and advantages ``A_g``, the per-response gradient matrix is ``M = diag(A) S`` (G x D);
its Gram matrix is

.. math:: M M^\top = \operatorname{diag}(A)\, K\, \operatorname{diag}(A), \qquad K = S S^\top,

so every rank measure (entropy effective rank, #components for 90% of ``||M||_F^2``; see
:func:`grpo_theory.companions.credit.rank_measures_from_gram`) needs only the G x G score Gram
``K``. :func:`group_score_grams` computes ``K`` for every group, scoring the samples chunk by
chunk (at most ``chunk`` per-sample scores are held at a time).

Guarantees checked on the real scores (no approximation): with binary rewards and zero-sum
two-valued advantages, ``(1/G) sum_g A_g s_g = c(k, G) (sbar_+ - sbar_-)`` with ``c = k a_1 / G``
(:func:`binary_identity_residual`: the squared residual via ``K``); the class-aggregate matrix has
rank <= 2; and ``rank M <= #distinct responses`` (equal responses have equal scores).

Sparsity: a group has no gradient when all G rewards are equal, with probability
``q(x) = V^G + (1 - V)^G``; :func:`zero_share_unbiased` estimates ``q`` without bias from an
independent sample of n >= G rewards (``[C(k, G) + C(n - k, G)] / C(n, G)``);
:func:`zero_share_difference` is the observed minus predicted share with its standard error.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy.special import gammaln

from ... import _validation as V
from ...companions import RANK_FIELDS, rank_measures_from_gram
from ...core import Estimate, compute_advantages, estimate_mean
from ...lm import LMPolicy, checked_tokens, seq_log_probs


@partial(jax.jit, static_argnames=("apply_fn", "qchunk", "eos"))
def _grams(apply_fn, params, prompts, responses, temperature, qchunk, eos):
    flat, unravel = ravel_pytree(params)

    def lp_one(theta, x, y):
        return seq_log_probs(apply_fn, unravel(theta), x[None], y[None], temperature, eos)[0]

    grad_one = jax.grad(lp_one)
    nb, g = responses.shape[:2]
    xs = prompts.reshape(nb // qchunk, qchunk, -1)
    ys = responses.reshape(nb // qchunk, qchunk * g, -1)

    def body(_, inp):
        x, y = inp
        xr = jnp.repeat(x, g, axis=0)
        s = jax.vmap(grad_one, in_axes=(None, 0, 0))(flat, xr, y).astype(jnp.float64)
        s = s.reshape(qchunk, g, -1)
        return None, jnp.einsum("bgd,bhd->bgh", s, s)

    _, k = jax.lax.scan(body, None, (xs, ys))
    return k.reshape(nb, g, g)


def group_score_grams(policy: LMPolicy, prompts, responses, chunk: int = 256) -> np.ndarray:
    """Score Gram matrices ``K_b = S_b S_b^T`` of every group (float64).

    Args:
        policy: the language-model policy.
        prompts: (B, P) integer ids, one prompt per group.
        responses: (B, G, R) integer ids, G responses per prompt.
        chunk: about how many per-sample scores are held at a time (>= G; whole groups).

    Returns:
        (B, G, G) array ``K[b, g, h] = <s(x_b, y_bg), s(x_b, y_bh)>``.
    """
    prompts = np.asarray(prompts)
    responses = np.asarray(responses)
    if responses.ndim != 3:
        raise ValueError(f"responses must have shape (B, G, R), got {responses.shape}")
    b, g, r = responses.shape
    if prompts.ndim != 2 or prompts.shape[0] != b:
        raise ValueError(f"prompts must have shape ({b}, P), got {prompts.shape}")
    chunk = V.positive_int("chunk", chunk)
    checked_tokens(np.repeat(prompts, g, 0), responses.reshape(b * g, r), policy._vocab())
    qc = int(max(1, min(b, chunk // g)))
    pad = (-b) % qc
    if pad:
        prompts = np.concatenate([prompts, np.repeat(prompts[:1], pad, 0)])
        responses = np.concatenate([responses, np.repeat(responses[:1], pad, 0)])
    k = _grams(policy.apply_fn, policy.params, jnp.asarray(prompts), jnp.asarray(responses),
               policy.temperature, qc, policy.eos_ids)
    return np.asarray(k)[:b]


def dense_scores(policy: LMPolicy, prompts, responses) -> np.ndarray:
    """Per-sample scores (N, D) materialised (for small N: tests and cross-checks).

    Args:
        policy: the policy; prompts (N, P) and responses (N, R) integer ids.

    Returns:
        float64 (N, D) ``s(x_n, y_n)``.
    """
    prompts, responses = checked_tokens(prompts, responses, policy._vocab())
    flat, unravel = ravel_pytree(policy.params)

    def lp_one(theta, x, y):
        return seq_log_probs(policy.apply_fn, unravel(theta), x[None], y[None],
                             policy.temperature, policy.eos_ids)[0]

    s = jax.jit(jax.vmap(jax.grad(lp_one), in_axes=(None, 0, 0)))(
        flat, jnp.asarray(prompts), jnp.asarray(responses))
    return np.asarray(s, np.float64)


def weighted_grams(K, adv) -> np.ndarray:
    """Gram of ``diag(A) S``: ``A_g A_h K_gh`` (..., G, G); ``K`` (..., G, G), ``adv`` (..., G)."""
    K = np.asarray(K, np.float64)
    adv = np.asarray(adv, np.float64)
    if K.shape[-1] != K.shape[-2] or adv.shape != K.shape[:-1]:
        raise ValueError(f"adv must have shape K.shape[:-1] = {K.shape[:-1]}, got {adv.shape}")
    return adv[..., :, None] * K * adv[..., None, :]


def numerical_rank(gram, rtol: float = 1e-9) -> np.ndarray:
    """Rank of ``M`` from its Gram ``M M^T`` (..., n, n): eigenvalues above ``rtol`` x the
    largest (``rtol`` is on ``sigma^2``); 0 for a zero matrix."""
    if not 0 < rtol < 1:
        raise ValueError(f"rtol must lie in (0, 1), got {rtol!r}")
    gram = np.asarray(gram, np.float64)
    e = np.linalg.eigvalsh(0.5 * (gram + np.swapaxes(gram, -1, -2)))
    top = np.max(np.abs(e), axis=-1, keepdims=True)
    return np.sum(e > rtol * np.where(top > 0, top, np.inf), axis=-1)


def distinct_responses(responses) -> np.ndarray:
    """Number of distinct responses in each group: ``responses`` (..., G, R) -> (...)."""
    y = np.asarray(responses)
    if y.ndim < 2:
        raise ValueError(f"responses must have shape (..., G, R), got {y.shape}")
    flat = y.reshape(-1, *y.shape[-2:])
    out = np.array([len({row.tobytes() for row in grp}) for grp in flat])
    return out.reshape(y.shape[:-2])


def binary_identity_residual(K, z, adv) -> np.ndarray:
    r"""Relative squared residual of ``(1/G) sum_g A_g s_g = c(k, G)(sbar_+ - sbar_-)``,
    ``c = k a_1 / G`` (``a_1`` the correct responses' advantage), computed through ``K``:
    ``w^T K w / (|A/G|^T K |A/G|)`` with ``w = A/G - c (z/k - (1 - z)/(G - k))``.

    Args:
        K: (..., G, G) score Grams; z: (..., G) binary rewards; adv: (..., G) advantages
            (two-valued and zero-sum on mixed groups, as every GRPO advantage is).

    Returns:
        (...) residuals; NaN for groups with equal rewards (no gradient).
    """
    K = np.asarray(K, np.float64)
    z = np.asarray(z, np.float64)
    adv = np.asarray(adv, np.float64)
    if z.shape != adv.shape or K.shape[:-1] != z.shape:
        raise ValueError(f"z and adv must have shape {K.shape[:-1]}, got {z.shape}, {adv.shape}")
    if not np.all((z == 0) | (z == 1)):
        raise ValueError("z must be binary (0/1 rewards)")
    G = z.shape[-1]
    k = z.sum(-1, keepdims=True)
    mixed = (k > 0) & (k < G)
    ks = np.where(mixed, k, 1.0)
    a1 = np.sum(adv * z, -1, keepdims=True) / ks
    c = ks * a1 / G
    w = adv / G - c * (z / ks - (1 - z) / np.where(mixed, G - k, 1.0))
    num = np.einsum("...g,...gh,...h->...", w, K, w)
    a = np.abs(adv) / G
    den = np.einsum("...g,...gh,...h->...", a, K, a)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = num / den
    return np.where(mixed[..., 0] & (den > 0), out, np.nan)


def _log_comb(n, k):
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def zero_share_unbiased(k, n: int, G: int) -> np.ndarray:
    """Unbiased estimate of ``V^G + (1 - V)^G`` from k successes in n >= G independent draws:
    ``[C(k, G) + C(n - k, G)] / C(n, G)`` (a U-statistic)."""
    n = V.positive_int("n", n)
    G = V.positive_int("G", G)
    if G > n:
        raise ValueError(f"G must be <= n={n}, got {G}")
    k = np.asarray(k, np.float64)
    if np.any((k < 0) | (k > n)):
        raise ValueError(f"k must lie in 0..n={n}")
    ln = _log_comb(n, G)
    t1 = np.where(k >= G, np.exp(_log_comb(k, np.minimum(k, G)) - ln), 0.0)
    t0 = np.where(n - k >= G, np.exp(_log_comb(n - k, np.minimum(n - k, G)) - ln), 0.0)
    return t1 + t0


def zero_share_difference(zero, qx, exact: bool) -> Estimate:
    """Observed minus predicted zero-advantage share, with the standard error of check (iii).

    Args:
        zero: (reps, b) indicators that a group (rep, question) has equal rewards.
        qx: (b,) predicted ``V^G + (1 - V)^G`` per question.
        exact: whether ``qx`` is exact (answer-only, ``V = pi(y*|x)``); else it is the unbiased
            estimate from the question's reference responses (trace format).

    Returns:
        :class:`~grpo_theory.core.stats.Estimate` of ``mean(zero) - mean(qx)`` over ``b``
        questions. Exact ``qx``: under the claim each indicator is Bernoulli(qx), so
        ``se^2 = sum_x qx (1 - qx) / (reps b^2)`` exactly (no variance estimated from the few
        questions whose groups can be mixed, which made the se itself noisy). Estimated ``qx``:
        a question's groups share its estimate, so the question is the unit and
        ``se = sd_x(mean_rep zero - qx) / sqrt(b)`` carries both the groups' and the reference
        sample's noise.
    """
    reps, b = zero.shape
    d = zero.mean(0) - qx
    if not exact:
        return estimate_mean(d)
    return Estimate(float(d.mean()), float(np.sqrt(np.sum(qx * (1 - qx)) / reps) / b), b)


def group_rank_table(K, z, responses, group_sizes, estimator: str = "grpo_std") -> list[dict]:
    """Rank measures of ``diag(A) S`` for nested prefixes of every group, one row per G.

    Args:
        K: (N, Gmax, Gmax) score Grams (:func:`group_score_grams`).
        z: (N, Gmax) binary rewards; responses: (N, Gmax, R) token ids.
        group_sizes: G values (2 <= G <= Gmax); a G-group is the first G responses.
        estimator: advantage estimator (default ``grpo_std``, std-normalised as in
            :func:`grpo_theory.companions.credit.rank_study`).

    Returns:
        Rows with G, n_groups, n_mixed, zero_obs (share of equal-reward groups), and over mixed
        groups the mean and se of erank / participation / n90 (entropy effective rank,
        participation ratio, components for 90%), class_n (numerical rank of the class
        aggregates, max), excess (max of numerical rank - #distinct responses), distinct mean,
        identity (max binary-identity residual).
    """
    K = np.asarray(K, np.float64)
    z = np.asarray(z, np.float64)
    n, gmax = z.shape
    if K.shape != (n, gmax, gmax):
        raise ValueError(f"K must have shape ({n}, {gmax}, {gmax}), got {K.shape}")
    rows = []
    for G in sorted(int(g) for g in group_sizes):
        if not 2 <= G <= gmax:
            raise ValueError(f"group_sizes must lie in [2, {gmax}], got {G}")
        zg, Kg = z[:, :G], K[:, :G, :G]
        adv = np.asarray(compute_advantages(estimator, zg), np.float64)
        kk = zg.sum(1)
        mixed = (kk > 0) & (kk < G)
        r = dict(G=G, n_groups=n, n_mixed=int(mixed.sum()), zero_obs=float(1 - mixed.mean()))
        if mixed.any():
            W = weighted_grams(Kg[mixed], adv[mixed])
            m = rank_measures_from_gram(W)
            for i, f in enumerate(RANK_FIELDS):
                v = m[:, i]
                v = v[np.isfinite(v)]
                r[f] = float(v.mean()) if v.size else float("nan")
                r[f + "_se"] = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else 0.0
            zm, am = zg[mixed], adv[mixed]
            cls = np.stack([am * zm, am * (1 - zm)], axis=1)  # (n, 2, G) class-aggregate weights
            Kc = np.einsum("nag,ngh,nbh->nab", cls, Kg[mixed], cls)
            nd = distinct_responses(np.asarray(responses)[mixed, :G])
            r.update(class_n=int(numerical_rank(Kc).max()),
                     excess=int((numerical_rank(W) - nd).max()), distinct=float(nd.mean()),
                     identity=float(np.nanmax(binary_identity_residual(Kg[mixed], zm, am))))
        rows.append(r)
    return rows
