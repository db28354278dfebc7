r"""Figure 4 analogue: gradient MSE of vanilla / grpo / oracle on a small language model.

Design (the paper's): all B questions of the evaluation set, G responses each (no prompt
sampling), so for any estimator whose per-prompt part is unbiased

.. math:: \mathrm{MSE}(G) = \frac{1}{B^2 G} \sum_x m_G(x), \qquad \hat g = \frac1{BG}\sum_{x,g} A_{xg} s_{xg},

with per-prompt terms (Theorem 2 and Proposition 3; ``V = V(x)``, ``S2 = E[||s||^2 | x]``,
``S2Z = E[||s||^2 Z | x]``, ``g(x) = E[s Z | x]``):

* vanilla ``m = S2Z - ||g(x)||^2``;  oracle ``m = V^2 S2 - 2 V S2Z + S2Z - ||g(x)||^2``;
* vanilla minus oracle (any constant baseline b = V): ``(S2Z - ...) = -(V^2 S2 - 2 V S2Z)``; with a
  unique correct answer y* (``S2Z = V ||s*||^2``) this is ``-V^2 (M - (2 - V) ||s*||^2)``;
* grpo minus oracle (exact): ``(S2 V (1 - V) + ||g(x)||^2) / (G - 1)``.

*Answer-only* format: ``y*`` is unique, so ``V = pi(y*|x)``, ``g(x) = V s*`` and ``grad J`` are
exact by teacher forcing; only ``S2`` needs samples. *Trace* format: ``V`` and ``grad J`` come from
an independent reference sample of ``ref_samples`` responses per question (``grad J`` by the
leave-one-out estimator, split in two halves so its own error ``eps_ref = E||g_ref - g||^2`` is
estimated as ``||g_1 - g_2||^2 / 4`` and subtracted; it is reported next to the MSEs).

Every estimator's advantages come from :func:`grpo_theory.estimators.compute_advantages` and every
CI from :func:`grpo_theory.montecarlo.summarize_squared_errors`; every group size uses all
``G_max`` responses per question of a replicate, as ``G_max // G`` disjoint blocks of G (independent
estimates whose squared errors are averaged: the small groups, whose squared errors are the most
right-skewed, get the most draws), and one chunked
per-sample-score pass (:func:`grpo_theory.lm.policy.score_contractions`) contracts all of them.

Answer-only predictions: vanilla's is exact; oracle's and grpo's contain ``S2``, estimated in the
same replicate, so each replicate carries its own prediction and ``z`` is the mean over replicates
of ``(squared error - prediction)`` over its standard error: the prediction's noise and its
correlation with the measurement are both in the standard error (``predicted_se`` reports the
prediction's part alone).
"""

from __future__ import annotations

import jax
import numpy as np

from ..._validation import random_key
from ...core import compute_advantages, summarize_squared_errors, z_value
from ...lm import RESPONSE_LEN, LMPolicy, encode_prompts, reward, target_responses
from ...lm.training import exact_answer_quantities


ESTIMATORS = ("vanilla", "grpo", "oracle")


def _z(diff, se):
    """Standardised difference; 0 when both are 0 (e.g. no correct sample at all)."""
    if se > 0:
        return float(diff / se)
    return 0.0 if abs(diff) <= 1e-12 else float("inf")


def _rewards(fmt, y, answers, canon):
    return np.asarray(reward(fmt, y, answers, canon), np.float64)


def reference_quantities(policy: LMPolicy, x, answers, fmt, n_ref: int, key, chunk=256):
    """Reference ``V`` (B,) and ``grad J`` (D,) from ``n_ref`` samples per question, with
    ``eps_ref`` the estimated ``E||g_ref - grad J||^2``."""
    if n_ref < 4 or n_ref % 2:
        raise ValueError(f"n_ref must be an even integer >= 4, got {n_ref}")
    b = x.shape[0]
    xr = np.repeat(x, n_ref, axis=0)
    y = policy.sample_blocked(key, xr, RESPONSE_LEN[fmt])
    z = _rewards(fmt, y, np.repeat(answers, n_ref), None).reshape(b, n_ref)
    v = z.mean(axis=1)
    h = n_ref // 2
    w = np.zeros((2, b, n_ref))
    for j in range(2):  # each half: leave-one-out advantages, unbiased for grad J
        a = np.asarray(compute_advantages("grpo", z[:, j * h:(j + 1) * h]))
        w[j, :, j * h:(j + 1) * h] = a / (b * h)
    halves, _ = policy.score_contractions(xr, y, w.reshape(2, -1), chunk=chunk)
    g_ref = halves.mean(axis=0)
    eps_ref = float(np.sum((halves[0] - halves[1]) ** 2) / 4.0)
    return v, g_ref, eps_ref


def gradient_mse_study(policy: LMPolicy, questions, fmt: str, icl: bool, group_sizes,
                       n_reps: int, seed: int, n_ref: int = 256, chunk: int = 256,
                       progress=None, *, key=None) -> dict:
    """Measured and predicted MSEs for every estimator and G (see module doc).

    Returns ``{"rows": [...], "V": (B,), ...}``; each row has estimator, G, mse, se, ci_low,
    ci_high (the error is ``||ghat - grad J||^2`` summed over all parameters), the MSE relative
    to ``||grad J||^2``, and the predicted vanilla - oracle and grpo - oracle differences.
    ``key`` (a JAX key or an integer) replaces the integer ``seed`` when given.
    """
    group_sizes = sorted(int(g) for g in group_sizes)
    if group_sizes[0] < 2:
        raise ValueError(f"group sizes must be >= 2 (grpo needs G >= 2), got {group_sizes}")
    gmax = group_sizes[-1]
    b = len(questions)
    x = encode_prompts(questions, fmt, icl)
    canon = target_responses(questions, fmt) if fmt == "answer" else None
    key = random_key(seed, key)
    key, kref = jax.random.split(key)
    if fmt == "answer":
        v, s_star_sq, gj = exact_answer_quantities(policy, x, canon, chunk)
        eps_ref, exact = 0.0, True
    else:
        v, gj, eps_ref = reference_quantities(policy, x, questions.answer, fmt, n_ref, kref, chunk)
        s_star_sq, exact = None, False
    xs = np.repeat(x, gmax, axis=0)
    ans = np.repeat(questions.answer, gmax)
    can = np.repeat(canon, gmax, axis=0) if canon is not None else None
    # every group size uses all G_max responses: gmax // G disjoint blocks of G per question,
    # each an independent estimate, averaged within the replicate
    names = [(e, G, k) for G in group_sizes for e in ESTIMATORS for k in range(gmax // G)]
    err2 = np.zeros((n_reps, len(names)))
    s2 = np.zeros((n_reps, b))  # per-replicate MC estimates of E[||s||^2 | x]
    s2z = np.zeros((n_reps, b))  # and of E[||s||^2 Z | x]
    zbar = np.zeros((n_reps, b))
    for r in range(n_reps):  # replicates: each is one full batched pass (B * G_max samples)
        key, ks = jax.random.split(key)
        y = policy.sample_blocked(ks, xs, RESPONSE_LEN[fmt])
        z = _rewards(fmt, y, ans, can).reshape(b, gmax)
        w = np.zeros((len(names), b, gmax))
        for i, (e, G, k) in enumerate(names):
            blk = slice(k * G, (k + 1) * G)
            a = np.asarray(compute_advantages(e, z[:, blk], value=v))
            w[i, :, blk] = a / (b * G)
        est, sq = policy.score_contractions(xs, y, w.reshape(len(names), -1), chunk=chunk)
        err2[r] = np.sum((est - gj[None, :]) ** 2, axis=1) - eps_ref
        sq = sq.reshape(b, gmax)
        s2[r], s2z[r], zbar[r] = sq.mean(1), (sq * z).mean(1), z.mean(1)
        if progress is not None:
            progress(r + 1, n_reps, float(z.mean()))
    gnorm2 = float(gj @ gj)
    if exact:  # S2Z = V ||s*||^2 and ||g(x)||^2 = V^2 ||s*||^2 exactly
        s2z_used = np.broadcast_to(v * s_star_sq, s2.shape)
        gx2 = v**2 * s_star_sq
    else:
        s2z_used = s2z
        gx2 = None
    # per-replicate predicted per-sample (G = 1) differences, summed over prompts / B^2
    d_vo = -(v**2 * s2 - 2 * v * s2z_used).sum(1) / b**2  # vanilla - oracle
    d_go = ((s2 * (v * (1 - v))[None, :]).sum(1) + (gx2.sum() if exact else 0.0)) / b**2
    rows = []
    # per replicate and (estimator, G): the mean squared error over its blocks
    blocks = {}
    for i, (e, G, _) in enumerate(names):
        blocks.setdefault((e, G), []).append(i)
    err2 = {n: err2[:, idx].mean(axis=1) for n, idx in blocks.items()}
    for G in group_sizes:
        # per-replicate predictions: vanilla's is exact; oracle's and grpo's add MC estimates of
        # E[||s||^2 | x] from the same replicate, so z is the paired difference (measured -
        # predicted) per replicate, carrying the prediction's own noise and its correlation
        pred = {}
        if exact:  # vanilla exact: V (1 - V) ||s*||^2 per prompt
            pv = float((v * (1 - v) * s_star_sq).sum() / b**2 / G)
            pred["vanilla"] = np.full(n_reps, pv)
            pred["oracle"] = pv - d_vo / G
            pred["grpo"] = pred["oracle"] + d_go / (G * (G - 1))
        for e in ESTIMATORS:
            e2 = err2[(e, G)]
            mse, se, lo, hi = summarize_squared_errors(e2)
            if e in pred:
                p, sp, _, _ = summarize_squared_errors(pred[e])
                dz, sz, _, _ = summarize_squared_errors(e2 - pred[e])
                z = _z(dz, sz)
            else:
                p = sp = z = float("nan")
            rows.append(dict(estimator=e, G=G, mse=mse, se=se, ci_low=lo, ci_high=hi,
                             rel_mse=mse / gnorm2, n_reps=n_reps, predicted=p,
                             predicted_se=sp, z=z))
        dv = err2[("vanilla", G)] - err2[("oracle", G)]
        dg = err2[("grpo", G)] - err2[("oracle", G)]
        m_vo, se_vo, _, _ = summarize_squared_errors(dv)
        m_go, se_go, _, _ = summarize_squared_errors(dg)
        p_vo, sp_vo, _, _ = summarize_squared_errors(d_vo / G)
        p_go, sp_go, _, _ = summarize_squared_errors(d_go / (G * (G - 1)))
        if not exact:  # ||g(x)||^2 is not available per prompt in the trace format
            p_go = float("nan")
            sp_go = float("nan")
        rows.append(dict(estimator="vanilla-oracle", G=G, mse=m_vo, se=se_vo,
                         ci_low=m_vo - z_value() * se_vo, ci_high=m_vo + z_value() * se_vo,
                         predicted=p_vo, predicted_se=sp_vo, n_reps=n_reps,
                         z=_z(m_vo - p_vo, np.hypot(se_vo, sp_vo))))
        rows.append(dict(estimator="grpo-oracle", G=G, mse=m_go, se=se_go,
                         ci_low=m_go - z_value() * se_go, ci_high=m_go + z_value() * se_go,
                         predicted=p_go, predicted_se=sp_go, n_reps=n_reps,
                         z=_z(m_go - p_go, np.hypot(se_go, sp_go)) if exact else float("nan")))
    return dict(rows=rows, V=v, J=float(v.mean()), grad_norm2=gnorm2, eps_ref=eps_ref,
                exact=exact, mean_reward=float(zbar.mean()), dim=int(gj.shape[0]))
