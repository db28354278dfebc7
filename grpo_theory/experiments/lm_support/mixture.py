r"""Prompt concentration: a training distribution with mass p on fixed questions.

The mixture puts probability ``p`` on a small fixed set F (uniform within it) and ``1 - p`` on a
set R of other questions (uniform). With ``g(x) = V(x) s*(x)`` the per-prompt gradient of the
answer-only format (exact, :func:`grpo_theory.lm.training.grpo.exact_answer_quantities`), Theorem
7's constants under the mixture are weighted means of per-question quantities:

.. math:: c_1(p) = p\,\overline{\|g\|^2}_F + (1-p)\,\overline{\|g\|^2}_R
          - \|p\,\bar g_F + (1-p)\,\bar g_R\|^2,\qquad
          c_3(p) = p\,\bar c_{3,F} + (1-p)\,\bar c_{3,R},

(``c_{3}(x) = E||s||^2 V(1-V) + V^2||s*||^2``, as in
:func:`grpo_theory.lm.training.grpo.predicted_group_size`). ``c1`` is the between-prompt variance of
``g(x)``; for one fixed question it equals
``(1-p) [p ||g_F - \bar g_R||^2 + Var_R g]``, so it vanishes linearly as ``p -> 1`` while ``c3``
tends to the fixed question's within-group noise: ``G* - 1 = sqrt(c3/c1)`` grows like
``(1-p)^{-1/2}``. The held-out objective of the mixture is ``J_p = p mean_F V + (1-p) mean_R V``.

Training realises the mixture with a pool of fixed size holding each fixed question ``m``
times next to other questions (prompts drawn uniformly from the pool), so ``p = k m / n_pool``
exactly (:func:`concentrated_pool`).
"""

from __future__ import annotations

import jax
import numpy as np

from ... import _validation as V
from ...core import ScalingConstants, budget_mse
from ...lm.training import exact_answer_quantities
from ...lm import RESPONSE_LEN, LMPolicy, Questions, encode_prompts, target_responses


def concat_questions(*parts: Questions) -> Questions:
    """The questions of ``parts`` one after the other."""
    if not parts:
        raise ValueError("concat_questions needs at least one Questions")
    return Questions(sum((list(q.text) for q in parts), []),
                     np.concatenate([q.category for q in parts]),
                     np.concatenate([q.answer for q in parts]),
                     np.concatenate([q.hard for q in parts]),
                     np.concatenate([q.terms for q in parts]),
                     np.concatenate([q.n_terms for q in parts]),
                     sum((list(q.shots) for q in parts), []))


def pass_rates(policy: LMPolicy, questions: Questions) -> np.ndarray:
    """``V(x) = pi(y*|x)`` (answer-only, exact) for every question, float64."""
    x = encode_prompts(questions, "answer")
    canon = target_responses(questions, "answer")
    return np.exp(np.asarray(policy.log_probs(x, canon), np.float64))


def pick_fixed_question(policy: LMPolicy, candidates: Questions, target: float = 0.5) -> int:
    """Index of the candidate whose pass rate is closest to ``target`` (first on ties).

    A question with ``V`` near 0 or 1 has ``g(x) = V s*`` near 0 (or no within-group noise), so
    the fixed question is chosen by its measured pass rate at the starting policy.
    """
    if not 0.0 < target < 1.0:
        raise ValueError(f"target must lie in (0, 1), got {target!r}")
    if len(candidates) < 1:
        raise ValueError("candidates must hold at least one question")
    return int(np.argmin(np.abs(pass_rates(policy, candidates) - target)))


def pool_counts(p: float, n_fixed: int, n_pool: int) -> tuple[int, int, float]:
    """Pool layout for mass ``p`` on the fixed set: ``m`` copies of each of the ``k`` fixed
    questions and ``n = n_pool - k m`` other questions, so ``p_exact = k m / n_pool``.

    The pool has the same size for every p (so training runs at different p share compiled
    shapes).

    Args:
        p: the wanted mass on the fixed set, in [0, 1).
        n_fixed: k >= 1 fixed questions; n_pool: the pool's size.
    Returns:
        ``(m, n, p_exact)`` with ``m = round(p n_pool / k)``; ``n >= 1`` is required.
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p must lie in [0, 1), got {p!r}")
    k = V.positive_int("n_fixed", n_fixed)
    size = V.positive_int("n_pool", n_pool, 2)
    m = int(round(p * size / k))
    if size - k * m < 1:
        raise ValueError(f"n_pool={size} leaves no other question at p={p}; use a larger pool")
    return m, size - k * m, k * m / size


def concentrated_pool(fixed: Questions, rest: Questions, p: float,
                      n_pool: int) -> tuple[Questions, float]:
    """A training pool of ``n_pool`` prompts realising the mixture under uniform draws: each
    fixed question ``m`` times, then the first ``n_pool - k m`` questions of ``rest``
    (:func:`pool_counts`). Returns ``(pool, p_exact)``."""
    m, n, pe = pool_counts(p, len(fixed), n_pool)
    if n > len(rest):
        raise ValueError(f"rest must hold >= {n} questions for p={p}, n_pool={n_pool}, "
                         f"got {len(rest)}")
    other = rest.subset(np.arange(n))
    if m == 0:
        return other, pe
    return concat_questions(fixed.subset(np.tile(np.arange(len(fixed)), m)), other), pe


def mixture_parts(policy: LMPolicy, fixed: Questions, rest: Questions, n_samples: int,
                  seed, chunk: int = 256, *, key=None) -> dict:
    """Per-question pieces of the mixture's constants at ``policy`` (answer-only).

    Args:
        policy: the language-model policy.
        fixed, rest: the fixed set F and the other questions R.
        n_samples: sampled responses per question for ``E||s||^2`` (c2, c3).
        seed: integer seed or key for the samples.
        key: a JAX PRNG key (or an integer), used instead of ``seed`` when given.
        chunk: samples per score block.
    Returns:
        ``{"F": {...}, "R": {...}}``, each with ``v``, ``s_star_sq``, ``s2`` (per question),
        ``g_mean`` (the mean of ``V s*`` over the set, shape (D,)).
    """
    n_samples = V.positive_int("n_samples", n_samples)
    key = V.key_or_seed(seed, "seed") if key is None else V.key_or_seed(key, "key")

    out = {}
    for name, q, k in zip(("F", "R"), (fixed, rest), jax.random.split(key)):
        if len(q) < 1:
            raise ValueError(f"{'fixed' if name == 'F' else 'rest'} must hold >= 1 question")
        x = encode_prompts(q, "answer")
        canon = target_responses(q, "answer")
        v, s_star_sq, g_mean = exact_answer_quantities(policy, x, canon, chunk)
        xs = np.repeat(x, n_samples, axis=0)
        y = np.asarray(policy.sample(k, xs, RESPONSE_LEN["answer"]))
        _, sq = policy.score_contractions(xs, y, np.zeros((1, xs.shape[0])), chunk=chunk)
        out[name] = dict(v=v, s_star_sq=np.asarray(s_star_sq, np.float64),
                         s2=np.asarray(sq, np.float64).reshape(len(q), n_samples).mean(1),
                         g_mean=np.asarray(g_mean, np.float64))
    return out


def _means(d: dict) -> dict:
    v, ss, s2 = d["v"], d["s_star_sq"], d["s2"]
    gx2 = v**2 * ss
    tr_or = v * (1 - v) ** 2 * ss + v**2 * (s2 - v * ss) - gx2
    return dict(gx2=gx2.mean(), tr_or=tr_or.mean(), c3=(s2 * v * (1 - v) + gx2).mean(),
                J=v.mean())


def mixture_constants(parts: dict, p: float) -> dict:
    """c1, c2, c3, G* and J of the mixture with mass ``p`` on F (module docstring).

    Args:
        parts: :func:`mixture_parts`' output.
        p: mass on the fixed set, in [0, 1].
    Returns:
        ``p, c1, c2, c3, G_paper (sqrt(c3/c1)), G_continuous (1 + sqrt(c3/c1)), G_exact``
        (integer argmin of ``N MSE`` over 2..4096, Theorem 7) and ``J`` (the mixture's
        objective); G* is ``inf`` (G_exact 4096) when c1 <= 0.
    """
    p = V.real_scalar("p", p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p!r}")
    f, r = _means(parts["F"]), _means(parts["R"])
    g = p * parts["F"]["g_mean"] + (1 - p) * parts["R"]["g_mean"]
    c1 = float(p * f["gx2"] + (1 - p) * r["gx2"] - g @ g)
    c2 = float(p * f["tr_or"] + (1 - p) * r["tr_or"])
    c3 = float(p * f["c3"] + (1 - p) * r["c3"])
    ratio = np.sqrt(c3 / c1) if c1 > 0 else np.inf
    grid = np.arange(2, 4097)
    g_int = (int(grid[np.argmin(budget_mse(ScalingConstants(c1, c2, c3), grid))]) if c1 > 0
             else int(grid[-1]))
    return dict(p=float(p), c1=c1, c2=c2, c3=c3, G_paper=float(ratio),
                G_continuous=float(1 + ratio), G_exact=g_int,
                J=float(p * f["J"] + (1 - p) * r["J"]))


def mixture_objective(policy: LMPolicy, fixed: Questions, rest: Questions, p: float) -> float:
    """``J_p = p mean_F V + (1 - p) mean_R V`` at ``policy`` (exact, answer-only)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p!r}")
    return float(p * pass_rates(policy, fixed).mean() + (1 - p) * pass_rates(policy, rest).mean())
