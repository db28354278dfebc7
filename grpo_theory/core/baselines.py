r"""Baselines beyond the prompt's own group: cross-prompt shrinkage and score-norm weights.

The estimate is ``ghat = (1/BG) sum_x sum_i (r_xi - b_xi) s_xi``. It is unbiased iff each
``b_xi`` is independent of ``(r_xi, s_xi)`` given the prompt: a baseline built from the other
responses, the other prompts of the batch, or the past. A baseline that contains the response's
own reward ("self-inclusive") is biased; :mod:`grpo_theory.core.batch_exact` gives the exact bias
and MSE of every estimator here.

* ``jspo``: the James-Stein shrinkage baseline of JSPO (arXiv 2511.03710), transcribed from
  ``compute_jspo_outcome_advantage`` in the repository guanning03/JSPO-Official (file
  ``code/verl/trainer/ppo/core_algos.py``, commit 6071c3bb). With ``m_y`` the mean and
  ``v_y = var_ddof1(r_y) / G`` of prompt y's rewards, everything about prompt x is computed from
  the *other* prompts: ``mu_{-x}`` the mean of their means, ``v2 = mean_{y != x} v_y``,
  ``s2 = mean_{y != x} (m_y - mu_{-x})^2`` and ``lam = v2 / (v2 + s2 + 1e-6)``; then
  ``b_xi = (1 - lam) rbar_{x,-i} + lam mu_{-x}`` with ``rbar_{x,-i}`` the leave-one-out mean.
  Unbiased (two-level leave-one-out). Needs B >= 2 prompts (with one prompt the code's
  fallback takes the mean of an empty set).
* ``jspo_pooled``: JSPO++ (``compute_jspo_plus_plus_outcome_advantage``, same commit) without
  its optional EMA over steps (``js_smooth_coef = 0``, the default): ``lam`` and ``mu`` from the
  whole batch, the prompt's own rewards included: self-inclusive, biased.
* ``norm_weighted``: the score-norm-weighted group baseline ``b_x = sum_i ||s_i||^2 r_i /
  sum_i ||s_i||^2`` (the "exact optimal baseline" form; verl's optimal token baseline has this
  form on one-token responses of a softmax over logits, where its weight
  ``1 - 2 pi + sum pi^2`` is the squared score norm). Self-inclusive, biased.
* ``norm_weighted_loo``: its leave-one-out form, ``b_xi = sum_{j != i} ||s_j||^2 r_j /
  sum_{j != i} ||s_j||^2`` (the leave-one-out mean where the other weights are all zero).
  Unbiased.
* ``basis``: BASIS's cross-prompt baseline (arXiv 2605.27293), the mean of the other prompts'
  group means (any G, one response a prompt allowed): unbiased; ``basis_self_inclusive``, the
  mean over all prompts: biased. History baselines (EBPO, DBB, KAE) are in
  :mod:`grpo_theory.core.history_baselines`.
"""

from __future__ import annotations

import jax.numpy as jnp

from .closed_forms import CrossPromptMean
from .estimators import Estimator, PooledForm, register

#: JSPO's epsilon in ``lam = v2 / (v2 + s2 + eps)`` (the code's default ``epsilon``)
JSPO_EPS = 1e-6


def _group_stats(z):
    """Per-prompt means ``m`` (..., B) and ``v = var_ddof1 / G`` (..., B) of ``z`` (..., B, G)."""
    G = z.shape[-1]
    m = jnp.mean(z, axis=-1)
    v = jnp.sum((z - m[..., None]) ** 2, axis=-1) / (G - 1) / G
    return m, v


def _loo_mean(z):
    G = z.shape[-1]
    return (jnp.sum(z, axis=-1, keepdims=True) - z) / (G - 1)


def _jspo(z, ctx):
    if z.ndim < 2 or z.shape[-2] < 2:
        raise ValueError("estimator 'jspo' needs a batch of at least 2 prompts (batch_size >= 2): "
                         "its baseline for one prompt is built from the others")
    B = z.shape[-2]
    m, v = _group_stats(z)
    others = 1.0 - jnp.eye(B, dtype=z.dtype)  # (B, B): row x selects the prompts y != x
    mu = (m @ others) / (B - 1)  # (..., B): mu_{-x}
    v2 = (v @ others) / (B - 1)
    dev = (m[..., None, :] - mu[..., :, None]) ** 2  # (..., x, y)
    s2 = jnp.sum(dev * others, axis=-1) / (B - 1)
    lam = v2 / (v2 + s2 + JSPO_EPS)
    b = (1.0 - lam[..., None]) * _loo_mean(z) + (lam * mu)[..., None]
    return z - b


def _jspo_pooled(z, ctx):
    if z.ndim < 2:
        z2 = z[None, :]
        return _jspo_pooled(z2, ctx)[0]
    m, v = _group_stats(z)
    mu = jnp.mean(m, axis=-1, keepdims=True)  # (..., 1): the whole batch (equal G)
    v2 = jnp.mean(v, axis=-1, keepdims=True)
    s2 = jnp.mean((m - mu) ** 2, axis=-1, keepdims=True)
    lam = v2 / (v2 + s2 + JSPO_EPS)  # (..., 1)
    b = (1.0 - lam[..., None]) * _loo_mean(z) + (lam * mu)[..., None]
    return z - b


def _weights(ctx, name):
    if ctx.score_sq is None:
        raise ValueError(f"estimator {name!r} reads each response's squared score norm: the caller "
                         "must pass PromptContext(score_sq=...) (mc_mse, the exact routes and "
                         "training do)")
    return ctx.score_sq


def _norm_weighted(z, ctx):
    w = _weights(ctx, "norm_weighted")
    tot = jnp.sum(w, axis=-1, keepdims=True)
    b = jnp.where(tot > 0, jnp.sum(w * z, axis=-1, keepdims=True) / jnp.where(tot > 0, tot, 1.0),
                  jnp.mean(z, axis=-1, keepdims=True))
    return z - b


def _norm_weighted_loo(z, ctx):
    w = _weights(ctx, "norm_weighted_loo")
    tot = jnp.sum(w, axis=-1, keepdims=True) - w
    num = jnp.sum(w * z, axis=-1, keepdims=True) - w * z
    b = jnp.where(tot > 0, num / jnp.where(tot > 0, tot, 1.0), _loo_mean(z))
    return z - b


def _jspo_statistic(z):
    """``(m, m^2, v)`` of each group (..., 3): what JSPO's baselines read of the other groups."""
    m, v = _group_stats(z)
    return jnp.stack([m, m**2, v], axis=-1)


def _shrunk(z, mu, v2, s2):
    lam = v2 / (v2 + s2 + JSPO_EPS)
    return z - ((1.0 - lam[..., None]) * _loo_mean(z) + (lam * mu)[..., None])


def _jspo_from_others(z, others, n_others):
    if n_others < 1:
        raise ValueError("estimator 'jspo' needs a batch of at least 2 prompts (batch_size >= 2): "
                         "its baseline for one prompt is built from the others")
    mu, v2 = others[..., 0] / n_others, others[..., 2] / n_others
    return _shrunk(z, mu, v2, others[..., 1] / n_others - mu**2)


def _jspo_pooled_from_others(z, others, n_others):
    own = _jspo_statistic(z)
    tot = (own + others) / (n_others + 1)
    return _shrunk(z, tot[..., 0], tot[..., 2], tot[..., 1] - tot[..., 0] ** 2)


register(Estimator("jspo", _jspo, min_group_size=2, batch_coupled=True,
                   params=dict(source="JSPO-Official 6071c3bb", eps=JSPO_EPS, unbiased=True),
                   pooled=PooledForm(_jspo_statistic, _jspo_from_others)))
register(Estimator("jspo_pooled", _jspo_pooled, min_group_size=2, batch_coupled=True,
                   params=dict(source="JSPO-Official 6071c3bb", eps=JSPO_EPS, unbiased=False),
                   pooled=PooledForm(_jspo_statistic, _jspo_pooled_from_others)),
         "jspo_plus_plus")
register(Estimator("norm_weighted", _norm_weighted, min_group_size=1, needs=("score_sq",),
                   params=dict(unbiased=False)))
register(Estimator("norm_weighted_loo", _norm_weighted_loo, min_group_size=2, needs=("score_sq",),
                   params=dict(unbiased=True)))


# --- BASIS: one response a prompt, the other prompts' rewards as its baseline ------------------


def _basis_statistic(z):
    """The group mean (..., 1): all that BASIS's baseline reads of another prompt."""
    return jnp.mean(z, axis=-1, keepdims=True)


def basis(self_inclusive: bool = False, name: str | None = None) -> Estimator:
    r"""A BASIS-style cross-prompt baseline (arXiv 2605.27293), from the paper's description.

    Any G >= 1 (one response a prompt allowed); the baseline of prompt x is the mean of the
    *other* prompts' group means in the batch,

    .. math:: b_x = \frac{1}{B - 1} \sum_{y \ne x} \bar r_y, \qquad A_{xi} = r_{xi} - b_x.

    The paper weights the other prompts by per-prompt variance estimates that need values from
    outside the batch; with none here the weights are equal (this module's choice). Unbiased
    (the own prompt is excluded); needs B >= 2. ``self_inclusive=True`` is the rival: the mean
    of all B group means, own included: biased. Batch-coupled, with a
    :class:`~grpo_theory.core.estimators.PooledForm` (the sum of the others' group means), so
    the exact pooled route covers any B. The unbiased form carries its exact MSE in closed form
    (:class:`~grpo_theory.core.closed_forms.CrossPromptMean`,
    :func:`~grpo_theory.core.cross_prompt.basis_pieces`); the biased rival carries none.

    Args:
        self_inclusive: the rival form above. name: registry name.

    Returns:
        A batch-coupled :class:`~grpo_theory.core.estimators.Estimator` (``min_group_size`` 1).

    Examples:
        Three prompts with one response each:

        >>> import jax.numpy as jnp
        >>> from grpo_theory.core import get_estimator
        >>> get_estimator("basis")(jnp.array([[1.0], [0.0], [0.0]])).tolist()
        [[1.0], [-0.5], [-0.5]]
    """
    if not isinstance(self_inclusive, bool):
        raise ValueError(f"self_inclusive must be a bool, got {self_inclusive!r}")
    label = name or ("basis_self_inclusive" if self_inclusive else "basis")

    def from_others(z, others, n_others):
        if self_inclusive:
            return z - (others + _basis_statistic(z)) / (n_others + 1)
        if n_others < 1:
            raise ValueError(f"estimator {label!r} needs a batch of at least 2 prompts "
                             "(batch_size >= 2): its baseline for one prompt is the others' mean")
        return z - others / n_others

    def adv(z, ctx):
        if z.ndim < 2:  # one group: B = 1
            return adv(z[None, :], ctx)[0]
        t = _basis_statistic(z)  # (..., B, 1)
        return from_others(z, jnp.sum(t, axis=-2, keepdims=True) - t, z.shape[-2] - 1)

    return Estimator(label, adv, min_group_size=1, batch_coupled=True,
                     closed_form=None if self_inclusive else CrossPromptMean(),
                     params=dict(source="arXiv 2605.27293 (equal weights)",
                                 self_inclusive=self_inclusive, unbiased=not self_inclusive),
                     pooled=PooledForm(_basis_statistic, from_others))


register(basis())
register(basis(self_inclusive=True))


# --- a history baseline: SPO's per-prompt Beta tracker -------------------------------------------

#: SPO's epsilon in the batch normalisation ``(A - mean) / (std + 1e-8)``
SPO_EPS = 1e-8


def spo(rho: float = 0.9, alpha0: float = 0.5, beta0: float = 0.5, whiten: bool = True,
        name: str | None = None) -> Estimator:
    r"""SPO's history baseline (arXiv 2509.13232), as the verl-recipe ``spo`` trainer computes it.

    Transcribed from ``spo/spo_ray_trainer.py`` of verl-project/verl-recipe (commit 550d42f5):
    each prompt carries a Beta tracker ``(alpha, beta)``; a response's advantage is
    ``r - alpha / (alpha + beta)`` with the tracker *before* the step, then (``whiten``)
    ``(A - mean) / (std + 1e-8)`` over the whole batch (``torch.std``, ddof 1). After the step
    every response updates its prompt's tracker, ``alpha <- rho alpha + r``,
    ``beta <- rho beta + (1 - r)``, from the values before the step, and the last response of a
    prompt in the batch is the one kept (the code assigns per response into a dict). The code's
    ``rho`` is a constant or ``2^(-D / 0.06)`` clipped to ``[clip_lower, 0.96]`` with D a
    per-prompt KL proxy; here it is the constant. ``alpha0 = beta0 = 0.5`` is the code's
    initialisation without offline samples.

    Conditional on the tracker the baseline is a prompt constant: without ``whiten`` the
    estimate is unbiased; the batch whitening makes it batch-coupled and biased.

    Args:
        rho: the tracker's discount in (0, 1]. alpha0, beta0: its initial counts (> 0).
        whiten: normalise over the batch as the recipe does.
        name: registry name (default ``spo(rho=..,...)``).

    Returns:
        A stateful :class:`~grpo_theory.core.estimators.Estimator` (its state: the (P,) arrays
        ``(alpha, beta)``).
    """
    for arg, v, lo in (("rho", rho, 0.0), ("alpha0", alpha0, 0.0), ("beta0", beta0, 0.0)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > lo \
                or (arg == "rho" and v > 1):
            raise ValueError(f"{arg} must be a number in {'(0, 1]' if arg == 'rho' else '> 0'}, "
                             f"got {v!r}")
    rho, alpha0, beta0 = float(rho), float(alpha0), float(beta0)

    def init(n_prompts):
        return (jnp.full((n_prompts,), alpha0), jnp.full((n_prompts,), beta0))

    def adv(z, ctx):
        if ctx.state is None or ctx.prompt is None:
            raise ValueError("estimator 'spo' reads its tracker and the prompts: pass "
                             "PromptContext(prompt=..., state=est.initial_state(P))")
        alpha, beta = ctx.state
        x = ctx.prompt
        a = z - (alpha[x] / (alpha[x] + beta[x]))[..., None]
        if not whiten:
            return a
        ax = (-2, -1) if z.ndim >= 2 else (-1,)
        n = a.shape[-1] * (a.shape[-2] if z.ndim >= 2 else 1)
        m = jnp.mean(a, axis=ax, keepdims=True)
        sd = jnp.sqrt(jnp.sum((a - m) ** 2, axis=ax, keepdims=True) / (n - 1))
        return (a - m) / (sd + SPO_EPS)

    def update(state, x, z, ctx):
        alpha, beta = state
        P, B = alpha.shape[0], x.shape[0]
        last = jnp.max(jnp.where(x[None, :] == jnp.arange(P)[:, None], jnp.arange(B), -1), axis=1)
        r = z[jnp.maximum(last, 0), -1]  # the prompt's last response in the batch
        seen = last >= 0
        return (jnp.where(seen, rho * alpha + r, alpha), jnp.where(seen, rho * beta + 1 - r, beta))

    if name is None:
        name = f"spo(rho={rho:g},alpha0={alpha0:g},beta0={beta0:g}{'' if whiten else ',raw'})"
    return Estimator(name, adv, min_group_size=1, batch_coupled=whiten, needs=("prompt", "state"),
                     init_state=init, update_state=update,
                     params=dict(rho=rho, alpha0=alpha0, beta0=beta0, whiten=whiten,
                                 source="verl-recipe 550d42f5", unbiased=not whiten))


register(spo(name="spo"))
register(spo(whiten=False, name="spo_raw"))


# --- pass@k: PKPO's unbiased gradient of pass@k for binary rewards ------------------------------


def _rho(n: int, c, k: int):
    """``1 - C(n - c, k) / C(n, k)``: the share of k-subsets of n responses, c of them correct,
    holding a correct one (an unbiased estimate of pass@k from n samples)."""
    miss = 1.0
    for j in range(k):
        miss = miss * jnp.clip(n - c - j, 0, None) / (n - j)
    return 1.0 - miss


#: PKPO's forms: ``"none"`` (the paper's ``s``) and ``"loo-1"`` (its ``s^(loo-1)``)
PKPO_BASELINES = ("none", "loo-1")


def pkpo(k: int = 2, name: str | None = None, *, baseline: str = "none") -> Estimator:
    r"""PKPO's unbiased gradient of pass@k for binary rewards (arXiv 2505.15201, Walder and
    Karkhanis): the estimator without a baseline (``s``) or with the (k - 1)-subset baseline
    (``s^(loo-1)``).

    ``grad pass@k = k E[s_1 max(r_1, ..., r_k)]``; averaging ``max`` over every k-subset of a
    group of G that holds response i gives its weight: 1 when i is correct, else
    ``rho(G - 1, c, k - 1)`` (the share of (k - 1)-subsets of the other G - 1 responses, c of them
    correct, holding a correct one). ``s^(loo-1)`` averages ``max_I r - max_{I \ i} r`` instead,
    whose baseline ``max_{I \ i} r`` does not depend on response i; for binary rewards it is 1
    exactly when i is correct and the other k - 1 members of I are not. In the package's scale
    (``ghat = (1/BG) sum A s``), with c the group's number of correct responses,

    .. math:: A_i = k\,[r_i = 1] + k\,[r_i = 0]\,\rho(G - 1, c, k - 1) \quad \text{(none)},
              \qquad A_i = k\,[r_i = 1]\,\bigl(1 - \rho(G - 1, c - 1, k - 1)\bigr)
              \quad \text{(loo-1)}.

    Both are unbiased for ``grad pass@k`` (``pass_k = k``): the baseline of ``loo-1`` is a
    function of the other responses only. k = 1 without a baseline is plain REINFORCE
    (``vanilla``); ``loo-1`` needs k >= 2.

    Args:
        k: the pass@k objective's k (at most G). name: registry name (default ``pkpo(k=..)``,
            ``pkpo_loo1(k=..)``).
        baseline: one of :data:`PKPO_BASELINES`.

    Returns:
        An :class:`Estimator` with ``pass_k = k`` (``min_group_size`` k).

    Examples:
        >>> import jax.numpy as jnp
        >>> from grpo_theory.core import pkpo
        >>> pkpo(2)(jnp.array([1.0, 0.0, 0.0])).tolist()  # the incorrect ones: 2 x 1/2
        [2.0, 1.0, 1.0]
        >>> pkpo(2, baseline="loo-1")(jnp.array([1.0, 1.0, 0.0])).tolist()  # 2 x 1/2
        [1.0, 1.0, 0.0]
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if not isinstance(baseline, str) or baseline not in PKPO_BASELINES:
        raise ValueError(f"baseline must be one of {list(PKPO_BASELINES)}, got {baseline!r}")
    loo = baseline == "loo-1"
    if loo and k < 2:
        raise ValueError(f"baseline 'loo-1' needs k >= 2 (a (k - 1)-subset baseline), got k = {k}")
    label = f"pkpo_loo1(k={k})" if loo else f"pkpo(k={k})"

    def adv(z, ctx):
        G = z.shape[-1]
        if G < k:
            raise ValueError(f"estimator {label} needs groups of at least k = {k} responses, "
                             f"got G = {G}")
        c = jnp.sum(z, axis=-1, keepdims=True)
        if loo:
            return k * jnp.where(z > 0.5, 1.0 - _rho(G - 1, c - 1, k - 1), 0.0)
        return k * jnp.where(z > 0.5, 1.0, _rho(G - 1, c, k - 1))

    form = "(k - 1)-subset baseline s^(loo-1)" if loo else "no baseline"
    return Estimator(name or label, adv, min_group_size=k, pass_k=k,
                     params=dict(k=k, baseline=baseline, unbiased=True,
                                 source=f"arXiv 2505.15201 (binary, {form})"))


register(pkpo(2, name="pkpo"))
register(pkpo(2, name="pkpo_loo1", baseline="loo-1"))
