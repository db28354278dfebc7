r"""History baselines: a prior or a per-prompt tracker carried across steps (EBPO, DBB, KAE).

Each is a stateful :class:`~grpo_theory.core.estimators.Estimator` (``init_state`` /
``update_state``): the advantage reads the state *before* the step and the state is updated
*after* it, so conditional on the state the baseline's history part is a constant. A response's
baseline then depends on its own group only through the other responses (a leave-one-out
mean), so every estimator here is unbiased given the state, and its exact bias and MSE given the
state come from :func:`~grpo_theory.core.batch_moments` with ``state=`` (binary rewards). For
Monte Carlo and enumeration at a chosen state, :func:`at_state` makes it the initial state.

All three are transcribed from the papers' descriptions only (no public code): the choices
this module had to make are stated in each docstring.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from .estimators import Estimator, register


def _number(arg, v, lo, hi=None, lo_open=True):
    ok = not isinstance(v, bool) and isinstance(v, (int, float))
    ok = ok and (v > lo if lo_open else v >= lo) and (hi is None or v <= hi)
    if not ok:
        rng = f"{'(' if lo_open else '['}{lo:g}, {'inf)' if hi is None else f'{hi:g}]'}"
        raise ValueError(f"{arg} must be a number in {rng}, got {v!r}")
    return float(v)


def _need(ctx, name, fields):
    for f in fields:
        if getattr(ctx, f) is None:
            raise ValueError(f"estimator {name!r} reads PromptContext.{f}: pass "
                             "PromptContext(prompt=..., state=est.initial_state(P))")


def _loo_mean(z):
    G = z.shape[-1]
    return (jnp.sum(z, axis=-1, keepdims=True) - z) / (G - 1)


def _per_prompt(x, z, n_prompts):
    """Per prompt: the sum of its rewards in the batch and its number of responses, (P,) each."""
    hit = (x[None, :] == jnp.arange(n_prompts)[:, None]).astype(z.dtype)  # (P, B)
    return hit @ jnp.sum(z, axis=-1), jnp.sum(hit, axis=1) * z.shape[-1]


def at_state(est: Estimator, state, name: str | None = None) -> Estimator:
    """``est`` with ``state`` as its initial state (Monte Carlo and enumeration at that state).

    Args:
        est: a stateful :class:`~grpo_theory.core.estimators.Estimator`.
        state: the state (the pytree ``est.initial_state(P)`` returns).
        name: the copy's name (default ``est.name + "@state"``).

    Returns:
        An unregistered copy whose ``initial_state`` is ``state``.
    """
    if not est.stateful:
        raise ValueError(f"estimator {est.name!r} carries no state: at_state needs a stateful one")
    return dataclasses.replace(est, name=name or f"{est.name}@state",
                               init_state=lambda n_prompts: state)


# --- EBPO: an empirical-Bayes prior over prompts' means, Welford-updated ----------------------


def _welford_merge(state, m):
    """Add the values ``m`` (..., B) to Welford accumulators ``(n, mean, m2)`` (Chan's merge,
    equal to adding them one at a time)."""
    n, mean, m2 = state
    nb = m.shape[-1]
    mb = jnp.mean(m, axis=-1)
    m2b = jnp.sum((m - mb[..., None]) ** 2, axis=-1)
    tot = n + nb
    d = mb - mean
    return tot, mean + d * nb / tot, m2 + m2b + d**2 * n * nb / tot


def _ebpo_merge(state, z):
    """The prior's state after groups ``z`` (..., B, G): Welford over their means, and the
    running mean of their within-group variances (ddof 1)."""
    n, mu, m2, within = state
    nn, mu, m2 = _welford_merge((n, mu, m2), jnp.mean(z, axis=-1))
    v = jnp.var(z, axis=-1, ddof=1)
    within = within + (jnp.sum(v, axis=-1) - v.shape[-1] * within) / nn
    return nn, mu, m2, within


def _ebpo_shrunk(z, n, mu, m2, within):
    """``z - b`` with ``b = (1 - lam) rbar_{-i} + lam mu``, ``lam = w / (w + tau^2)``."""
    G = z.shape[-1]
    loo = (jnp.sum(z, axis=-1, keepdims=True) - z) / (G - 1)
    w = within / (G - 1)
    tau2 = jnp.maximum(m2 / jnp.maximum(n - 1, 1) - within / G, 0.0)
    tot = w + tau2
    lam = jnp.where((n >= 2) & (tot > 0), w / jnp.where(tot > 0, tot, 1.0), 0.0)
    return z - ((1 - lam) * loo + lam * mu)


def ebpo(self_inclusive: bool = False, name: str | None = None) -> Estimator:
    r"""EBPO's empirical-Bayes shrinkage baseline (arXiv 2602.05165), from the paper's
    description (no public code).

    A global prior over prompts' mean rewards is kept online from past batches: Welford's
    accumulators ``(n, mu, M2)`` over their group means and the running mean ``sigma_w^2`` of
    their within-group reward variances (ddof 1). A response's baseline shrinks its group's
    leave-one-out mean toward the prior mean by the empirical-Bayes factor:

    .. math:: b_i = (1 - \lambda)\,ar r_{-i} + \lambda \mu, \qquad
              \lambda = rac{\sigma_w^2 / (G - 1)}{\sigma_w^2 / (G - 1) + 	au^2}, \qquad
              	au^2 = \max\Bigl(rac{M_2}{n - 1} - rac{\sigma_w^2}{G}, 0\Bigr),

    the sampling variance of the other G - 1 responses' mean against the prior's spread of
    prompts' true means (the spread of group means less their sampling noise); ``lam = 0``
    (plain leave-one-out) until the prior has two group means. A group whose responses all
    agree still gets the signal ``lam (r - mu)``: the paper's motivation (saturated groups learn
    from the prior). The state is updated with the batch *after* the step. Choices made here
    (the paper's description leaves them open): the leave-one-out group part (so the baseline
    never reads ``r_i``), one prior value per group, the pooled within-variance, ``tau^2`` floored
    at 0 (then ``lam = 1``).

    Unbiased conditional on the state (``lam`` and ``mu`` are constants, the rest reads the
    other responses only). ``self_inclusive=True`` is the rival: the prior is updated with the
    current batch *before* the advantage (batch-coupled, own rewards in ``mu``): biased.

    Args:
        self_inclusive: the rival form above. name: registry name.

    Returns:
        A stateful :class:`~grpo_theory.core.estimators.Estimator`; state
        ``(n, mu, M2, sigma_w^2)`` (scalars), initially zeros.

    Examples:
        A prior from five past group means (mean 0.2, M2 0.4: spread 0.1) and within-group
        variance 0.12, groups of G = 3: ``w = 0.06``, ``tau^2 = 0.1 - 0.04 = 0.06``, ``lam = 1/2``;
        a constant group still learns from the prior:

        >>> import jax.numpy as jnp
        >>> from grpo_theory.core import PromptContext, get_estimator
        >>> est = get_estimator("ebpo")
        >>> st = (jnp.array(5.0), jnp.array(0.2), jnp.array(0.4), jnp.array(0.12))
        >>> [round(v, 4) for v in est(jnp.array([1.0, 0.0, 0.0]), PromptContext(state=st)).tolist()]
        [0.9, -0.35, -0.35]
        >>> [round(v, 4) for v in est(jnp.array([1.0, 1.0, 1.0]), PromptContext(state=st)).tolist()]
        [0.4, 0.4, 0.4]
    """
    if not isinstance(self_inclusive, bool):
        raise ValueError(f"self_inclusive must be a bool, got {self_inclusive!r}")
    label = "ebpo_self_inclusive" if self_inclusive else "ebpo"

    def init(n_prompts):
        return (jnp.zeros(()), jnp.zeros(()), jnp.zeros(()), jnp.zeros(()))

    def adv(z, ctx):
        _need(ctx, label, ("state",))
        if not self_inclusive:
            return _ebpo_shrunk(z, *ctx.state)
        zb = z if z.ndim >= 2 else z[None, :]
        merged = _ebpo_merge(ctx.state, zb)  # (...,) each
        out = _ebpo_shrunk(zb, *(a[..., None, None] for a in merged))
        return out if z.ndim >= 2 else out[0]

    def update(state, x, z, ctx):
        return _ebpo_merge(state, z)

    return Estimator(name or label, adv, min_group_size=2, batch_coupled=self_inclusive,
                     needs=("state",), init_state=init, update_state=update,
                     params=dict(source="arXiv 2602.05165 (paper's description)",
                                 self_inclusive=self_inclusive, unbiased=not self_inclusive))


register(ebpo())
register(ebpo(self_inclusive=True))


# --- DBB: a discounted Beta-Bernoulli posterior mean per prompt ------------------------------


def dbb(rho: float = 0.9, alpha0: float = 1.0, beta0: float = 1.0,
        name: str | None = None) -> Estimator:
    r"""DBB's discounted Beta-Bernoulli baseline (arXiv 2603.18444), from the paper's
    description (no public code).

    Each prompt carries ``(alpha, beta)``; a response's advantage is ``r - alpha / (alpha +
    beta)`` (the posterior mean before the step). After the step every drawn prompt's counts
    are discounted once and take all of its responses in the batch:

    .. math:: \alpha \leftarrow \rho\,\alpha + \sum_i r_i, \qquad
              \beta \leftarrow \rho\,\beta + \sum_i (1 - r_i).

    Unlike SPO (:func:`~grpo_theory.core.spo`): every response updates the tracker (SPO keeps
    the last one), ``rho`` is a constant (SPO's is KL-adaptive), no batch whitening. Choices
    made here: one discount per step for a prompt drawn several times, the uniform prior
    ``alpha0 = beta0 = 1``. Conditional on the state the baseline is a prompt constant:
    unbiased, with the exact MSE of a given baseline.

    Args:
        rho: the discount in (0, 1]. alpha0, beta0: the initial counts (> 0). name: registry
            name.

    Returns:
        A stateful :class:`~grpo_theory.core.estimators.Estimator`; state ``(alpha, beta)``,
        (P,) each.

    Examples:
        >>> import jax.numpy as jnp
        >>> from grpo_theory.core import PromptContext, dbb
        >>> est = dbb(rho=0.5)
        >>> st = est.initial_state(2)
        >>> est(jnp.array([[1.0, 0.0]]), PromptContext(prompt=jnp.array([1]), state=st)).tolist()
        [[0.5, -0.5]]
        >>> [v.tolist() for v in est.next_state(st, jnp.array([1]), jnp.array([[1.0, 1.0]]))]
        [[1.0, 2.5], [1.0, 0.5]]
    """
    rho = _number("rho", rho, 0.0, 1.0)
    alpha0, beta0 = _number("alpha0", alpha0, 0.0), _number("beta0", beta0, 0.0)
    label = name or f"dbb(rho={rho:g},alpha0={alpha0:g},beta0={beta0:g})"

    def init(n_prompts):
        return (jnp.full((n_prompts,), alpha0), jnp.full((n_prompts,), beta0))

    def adv(z, ctx):
        _need(ctx, label, ("prompt", "state"))
        alpha, beta = ctx.state
        x = jnp.asarray(ctx.prompt)
        return z - (alpha[x] / (alpha[x] + beta[x]))[..., None]

    def update(state, x, z, ctx):
        alpha, beta = state
        s, n = _per_prompt(x, z, alpha.shape[0])
        seen = n > 0
        return (jnp.where(seen, rho * alpha + s, alpha),
                jnp.where(seen, rho * beta + n - s, beta))

    return Estimator(label, adv, min_group_size=1, needs=("prompt", "state"), init_state=init,
                     update_state=update,
                     params=dict(rho=rho, alpha0=alpha0, beta0=beta0, unbiased=True,
                                 source="arXiv 2603.18444 (paper's description)"))


register(dbb(name="dbb"))


# --- KAE: kernel smoothing of a prompt's past batch means over the iteration index -----------


def kae(bandwidth: float = 2.0, window: int = 8, mix: float = 0.5,
        name: str | None = None) -> Estimator:
    r"""KAE's kernel-smoothed history baseline (arXiv 2604.28005), from the paper's description
    (no public code).

    Each prompt keeps its last ``W = window`` batch means ``m_j`` with their step indices
    ``t_j``; at step t their Nadaraya-Watson estimate with a Gaussian kernel of bandwidth h is
    mixed with the group's leave-one-out mean:

    .. math:: \hat m = \frac{\sum_j K_h(t - t_j)\, m_j}{\sum_j K_h(t - t_j)}, \quad
              K_h(u) = e^{-u^2 / 2h^2}, \qquad b_i = (1 - c)\,\bar r_{-i} + c\,\hat m,

    ``c = mix`` when the prompt has history, else 0 (plain leave-one-out). The mixture weight
    ``c`` (a constant, 1/2 by default) is this module's choice; the paper mixes the two. After
    the step a drawn prompt's window drops its oldest entry and takes the mean of all of its
    responses in the batch, at index t; t grows by one. Unbiased conditional on the state.

    Args:
        bandwidth: h > 0 (steps). window: W >= 1 past means kept. mix: c in [0, 1].
        name: registry name.

    Returns:
        A stateful :class:`~grpo_theory.core.estimators.Estimator`; state ``(means (P, W),
        steps (P, W), t)``, empty entries with step -1.

    Examples:
        A prompt seen at steps 0 and 1 with means 0.2 and 0.6, now at step 2 (h = 1):

        >>> import jax.numpy as jnp
        >>> from grpo_theory.core import PromptContext, kae
        >>> est = kae(bandwidth=1.0, window=2)
        >>> st = (jnp.array([[0.2, 0.6]]), jnp.array([[0.0, 1.0]]), jnp.array(2.0))
        >>> a = est(jnp.array([[1.0, 0.0, 1.0]]), PromptContext(prompt=jnp.array([0]), state=st))
        >>> [round(v, 4) for v in a[0].tolist()]
        [0.4865, -0.7635, 0.4865]
    """
    h = _number("bandwidth", bandwidth, 0.0)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    c = _number("mix", mix, 0.0, 1.0, lo_open=False)
    W = window
    label = name or f"kae(h={h:g},W={W},mix={c:g})"

    def init(n_prompts):
        return (jnp.zeros((n_prompts, W)), jnp.full((n_prompts, W), -1.0), jnp.zeros(()))

    def adv(z, ctx):
        _need(ctx, label, ("prompt", "state"))
        means, steps, t = ctx.state
        x = jnp.asarray(ctx.prompt)
        m, s = means[x], steps[x]  # (..., W)
        k = jnp.where(s >= 0, jnp.exp(-0.5 * ((t - s) / h) ** 2), 0.0)
        tot = jnp.sum(k, axis=-1)
        has = tot > 0
        smooth = jnp.sum(k * m, axis=-1) / jnp.where(has, tot, 1.0)
        w = jnp.where(has, c, 0.0)[..., None]
        return z - ((1 - w) * _loo_mean(z) + w * smooth[..., None])

    def update(state, x, z, ctx):
        means, steps, t = state
        s, n = _per_prompt(x, z, means.shape[0])
        seen = (n > 0)[:, None]
        new_m = jnp.concatenate([means[:, 1:], (s / jnp.maximum(n, 1))[:, None]], axis=1)
        new_s = jnp.concatenate([steps[:, 1:], jnp.full_like(steps[:, :1], t)], axis=1)
        return jnp.where(seen, new_m, means), jnp.where(seen, new_s, steps), t + 1

    return Estimator(label, adv, min_group_size=2, needs=("prompt", "state"), init_state=init,
                     update_state=update,
                     params=dict(bandwidth=h, window=W, mix=c, unbiased=True,
                                 source="arXiv 2604.28005 (paper's description)"))


register(kae(name="kae"))
