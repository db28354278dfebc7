r"""The auditor: exact bias, MSE, rollouts and prompt weights of a rollout rule.

A training batch has B slots; each slot's prompt is drawn from the rule's slot law ``w``
(:meth:`Rule.slot_weights`: ``f``, or ``f(x) a(x) / sum f a`` when rejected groups are refilled)
and its estimate ``ghat_b`` has the per-prompt moments of :mod:`grpo_theory.allocation.dp`,
conditional on the group being kept: ``m_x = E[ghat_x | kept]``, ``s_x = E[||ghat_x||^2 | kept]``.
The batch estimate ``ghat = (1/B) sum_b ghat_b`` then has

.. math:: E\hat g = \sum_x w_x m_x,\qquad
          E\|\hat g - \nabla J\|^2 = \frac{1}{B}\Big(\sum_x w_x s_x - \|E\hat g\|^2\Big)
          + \|E\hat g - \nabla J\|^2,

the bias-variance split of the main paper's minibatch MSE with the slot law in place of f.
"""

from __future__ import annotations

import numpy as np

from .. import _validation as V
from .._precision import float64
from ..core import DESIGNS, as_problem, as_structure, batch_moments, get_estimator
from .dp import check_normaliser
from .result import AllocationAudit
from .rules import get_rule


def check_estimator(estimator):
    """The estimator, or ``ValueError`` when it has no exact route for a rule."""
    est = get_estimator(estimator)
    if not est.rewards_only:
        raise ValueError(f"estimator {est.name!r} has no exact audit: its advantages are not a "
                         "function of one group's rewards; use allocation.monte_carlo")
    return est


@float64
def audit(problem, rule, estimator="grpo", batch_size: int = 1,
          normaliser: str = "group", design: str = "independent") -> AllocationAudit:
    r"""Exact ``E[ghat]``, bias, MSE, expected rollouts and prompt weights of a rollout rule.

    Args:
        problem: a policy, a :class:`~grpo_theory.core.problem.DiscreteProblem` or a score
            structure with binary rewards.
        rule: a :class:`~grpo_theory.allocation.rules.Rule` or a registry name
            (:func:`~grpo_theory.allocation.rules.available_rules`).
        estimator: a registry name or an estimator. Under any rule: those whose advantages
            depend on the group's rewards only (``"vanilla"``, ``"oracle"``, ``"grpo"``, ...).
            Under :func:`~grpo_theory.allocation.rules.fixed` also those that see the whole
            batch (``"jspo"``, the whitening presets) or per-response weights
            (``"norm_weighted"``), by :func:`grpo_theory.core.batch_moments`.
        batch_size: B, the prompts of one training batch.
        normaliser: ``"group"`` (each prompt's sum over its own k, equal prompt weights) or
            ``"token"`` (the batch's sum over its kept responses, TRL's ``dapo``; the
            large-batch limit, :data:`grpo_theory.allocation.dp.NORMALISERS`).
        design: ``"independent"`` (B prompts iid from f) or ``"each"`` (every prompt once per
            batch, B = P; the fixed rule only).

    Returns:
        An :class:`AllocationAudit`.

    Examples:
        >>> from grpo_theory import SoftmaxBandit, allocation
        >>> import numpy as np
        >>> bandit = SoftmaxBandit(np.log([[0.1, 0.6, 0.3]]), [[1.0, 0.0, 0.0]])
        >>> res = allocation.audit(bandit, allocation.conformal_stopping((2, 4, 8)))
        >>> round(res.relative_bias, 2), round(res.cosine, 3), round(res.expected_rollouts, 2)
        (0.38, 1.0, 5.24)
        >>> round(allocation.audit(bandit, allocation.fixed(8)).bias_norm, 12)
        0.0
    """
    r = get_rule(rule)
    est = get_estimator(estimator)
    B = V.integer("batch_size", batch_size, 1)
    check_normaliser(normaliser)
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {list(DESIGNS)}, got {design!r}")
    if not est.rewards_only or design != "independent":
        return _batch_audit(problem, r, est, B, normaliser, design)
    st = as_structure(problem)
    P = st.n_prompts
    r.check_problem(P)
    est.check_problem(P)
    pm = r.prompt_moments(st, est, normaliser)
    f = np.asarray(st.prompt_probs, np.float64)
    w = np.asarray(r.slot_weights(f, pm.accept), np.float64)
    acc = np.where(pm.accept > 0, pm.accept, 1.0)
    m = pm.mean / acc[:, None]
    s = pm.second / acc
    if normaliser == "token":
        kappa = float(np.dot(w, pm.kept / acc))
        m, s = m / kappa, s / kappa**2
    mean = np.asarray(st.combine(w, m))
    g_x = np.asarray(st.pass_k_prompt_gradients(est.pass_k))  # the estimator's target per prompt
    grad = np.asarray(st.combine(f, g_x))
    mse = (float(w @ s) - float(mean @ mean)) / B + float(np.sum((mean - grad) ** 2))
    gn = np.sum(g_x**2, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        weights = np.where(gn > 0, w * np.sum(m * g_x, axis=1) / np.where(gn > 0, gn, 1.0),
                           np.nan)
    batch = r.batch_rollouts(f, pm.rollouts, pm.accept, B)
    shape = st.param_shape
    reshape = (lambda a: a.reshape(shape)) if shape is not None else (lambda a: a)
    norms = (w**2 * np.sum(m**2, axis=1), f**2 * gn)
    return AllocationAudit(
        rule=r.name, estimator=est.name, normaliser=normaliser, batch_size=B,
        mean=reshape(mean), gradient=reshape(grad), mse=float(mse),
        expected_rollouts=batch / B, batch_rollouts=batch, prompt_weights=weights,
        prompt_rollouts=pm.rollouts, acceptance=pm.accept, slot_weights=w, prompt_probs=f,
        prompt_norms=norms)


def _batch_audit(problem, r, est, B, normaliser, design) -> AllocationAudit:
    """The fixed rule's audit by count states (:func:`grpo_theory.core.batch_moments`)."""
    G = r.fixed_group_size()
    if G is None:
        raise ValueError(
            f"estimator {est.name!r} (design {design!r}) has an exact audit under the fixed rule "
            f"only (allocation.fixed(G)), not {r.name!r}: its advantages see the whole batch or "
            "per-response weights; use allocation.monte_carlo")
    if normaliser != "group":
        raise ValueError(f"estimator {est.name!r}: the batch audit uses normaliser='group' (under "
                         "the fixed rule every normaliser is the same up to a constant)")
    bm = batch_moments(problem, est, G, B, design=design)
    st = as_structure(problem)
    P = st.n_prompts
    f = np.asarray(st.prompt_probs, np.float64)
    shape = st.param_shape
    reshape = (lambda a: a.reshape(shape)) if shape is not None else (lambda a: a)
    g_x = np.asarray(as_problem(problem).pass_k_prompt_gradients(est.pass_k))  # (P, D)
    gn = np.sum(g_x**2, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        weights = np.where(gn > 0, np.sum(bm.prompt_means * g_x, axis=1) / np.where(gn > 0, gn, 1),
                           np.nan)
    return AllocationAudit(
        rule=r.name, estimator=est.name, normaliser=normaliser, batch_size=bm.batch_size,
        mean=reshape(bm.mean), gradient=reshape(bm.gradient), mse=bm.mse,
        expected_rollouts=float(G), batch_rollouts=float(G * bm.batch_size),
        prompt_weights=weights, prompt_rollouts=np.full(P, float(G)), acceptance=np.ones(P),
        slot_weights=f, prompt_probs=f,
        prompt_norms=(np.sum(bm.prompt_means**2, axis=1), f**2 * gn))

