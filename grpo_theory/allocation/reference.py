"""References for the auditor: brute-force enumeration of response sequences and Monte Carlo.

Both run the rule on sampled sequences (:meth:`Rule.run`) and apply the estimator to the kept
rewards directly (no advantage table), so they check the dynamic programme's recursion, its
conditioning on counts and its batch model.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from .._precision import float64
from ..core import Estimate, PromptContext, ResultMixin, as_problem, estimate_mean
from .auditor import check_estimator
from .dp import check_normaliser
from .rules import get_rule


class EnumeratedAudit(NamedTuple):
    """Brute-force moments of one batch slot (B = 1): ``mean`` (D,), ``mse``, ``acceptance``
    (P,), ``prompt_rollouts`` (P,), ``expected_rollouts``."""

    mean: np.ndarray
    mse: float
    acceptance: np.ndarray
    prompt_rollouts: np.ndarray
    expected_rollouts: float


def _estimates(problem, est, x, answers, rewards, keep, normaliser):
    """Per-sequence estimates ``c sum_{kept} A_j s(x, y_j)`` (N, D) and kept sizes (N,)."""
    N, H = answers.shape
    k = keep.sum(axis=1)
    out = np.zeros((N, problem.dim))
    vals = np.asarray(problem.values())
    opt = np.asarray(problem.optimal_baselines())
    scores = np.asarray(problem.scores)
    for size in np.unique(k):
        if size == 0:
            continue
        rows = np.nonzero(k == size)[0]
        idx = np.argsort(~keep[rows], axis=1, kind="stable")[:, :size]  # kept positions in order
        z = np.take_along_axis(rewards[rows], idx, axis=1).astype(np.float64)
        y = np.take_along_axis(answers[rows], idx, axis=1)
        xs = x[rows]
        ctx = PromptContext(prompt=jnp.asarray(xs), value=jnp.asarray(vals[xs]),
                            optimal_baseline=jnp.asarray(opt[xs]))
        a = np.asarray(est.advantage(jnp.asarray(z), ctx))
        c = 1.0 / size if normaliser == "group" else 1.0
        out[rows] = c * np.einsum("ng,ngd->nd", a, scores[xs[:, None], y])
    return out, k


@float64
def enumerate_rule(problem, rule, estimator="grpo", normaliser: str = "group",
                   max_sequences: int = 500_000) -> EnumeratedAudit:
    """Exact slot moments by enumerating every response sequence of the rule's horizon.

    For each prompt, every sequence of ``H = rule.horizon()`` atoms (response, reward) with
    positive probability is enumerated (``A^H`` of them, A the atoms), the rule is run on it and
    the estimator applied to the kept responses. Only for tiny problems: the reference the
    dynamic programme is tested against.

    Args:
        problem: a policy or :class:`~grpo_theory.core.problem.DiscreteProblem`.
        rule: a rule or registry name; estimator: a registry name or estimator.
        normaliser: ``"group"`` or ``"token"``.
        max_sequences: refuse more sequences per prompt than this (``ValueError``).

    Returns:
        :class:`EnumeratedAudit` for one batch slot (B = 1).
    """
    r = get_rule(rule)
    est = check_estimator(estimator)
    check_normaliser(normaliser)
    pb = as_problem(problem)
    P = pb.n_prompts
    r.check_problem(P)
    H = int(r.horizon())
    pi = np.asarray(pb.probs)
    mu = np.asarray(pb.reward_means)
    grad = np.asarray(pb.pass_k_gradient(est.pass_k))  # grad J, or grad pass@k (pass_k = k)
    acc, kept, rolls = np.zeros(P), np.zeros(P), np.zeros(P)
    mean_acc = np.zeros((P, pb.dim))
    sq_acc = np.zeros(P)
    err_acc = np.zeros(P)
    for x in range(P):
        atoms = [(y, z, pi[x, y] * (mu[x, y] if z else 1 - mu[x, y]))
                 for y in range(pb.n_responses) for z in (0, 1)]
        atoms = [a for a in atoms if a[2] > 0]
        if len(atoms) ** H > max_sequences:
            raise ValueError(f"enumeration has {len(atoms) ** H} sequences per prompt > "
                             f"max_sequences={max_sequences}")
        seq = np.array(list(itertools.product(range(len(atoms)), repeat=H)))
        y = np.array([a[0] for a in atoms])[seq]
        z = np.array([a[1] for a in atoms])[seq]
        prob = np.prod(np.array([a[2] for a in atoms])[seq], axis=1)
        xs = np.full(len(seq), x)
        n, keep = r.run(xs, y, z)
        g, k = _estimates(pb, est, xs, y, z, keep, normaliser)
        ok = k > 0
        acc[x] = prob[ok].sum()
        kept[x] = prob @ k
        rolls[x] = prob @ n
        mean_acc[x] = (prob * ok) @ g
        sq_acc[x] = (prob * ok) @ np.sum(g**2, axis=1)
        err_acc[x] = (prob * ok) @ np.sum((g - grad) ** 2, axis=1)
    f = np.asarray(pb.prompt_probs)
    w = np.asarray(r.slot_weights(f, acc))
    a = np.where(acc > 0, acc, 1.0)
    kappa = float(w @ (kept / a)) if normaliser == "token" else 1.0
    mean = (w / a) @ mean_acc / kappa
    if normaliser == "token":
        mse = float((w / a) @ sq_acc / kappa**2 - 2 * mean @ grad + grad @ grad)
    else:
        mse = float((w / a) @ err_acc)
    batch = r.batch_rollouts(f, rolls, acc, 1)
    return EnumeratedAudit(mean, mse, acc, rolls, batch)


class MonteCarloAudit(ResultMixin):
    """Monte Carlo estimates (mean coordinates, MSE, rollouts per prompt) with standard errors."""

    __slots__ = ("mean", "mean_se", "mse", "expected_rollouts", "n_batches")

    def __init__(self, mean, mean_se, mse: Estimate, rollouts: Estimate, n_batches: int):
        self.mean, self.mean_se = mean, mean_se
        self.mse, self.expected_rollouts, self.n_batches = mse, rollouts, n_batches

    def _params(self):
        names = ["mse", "expected_rollouts"] + [f"mean[{i}]" for i in range(self.mean.size)]
        vals = [self.mse.value, self.expected_rollouts.value] + list(self.mean)
        ses = [self.mse.se, self.expected_rollouts.se] + list(self.mean_se)
        return names, vals, ses, None


#: the Monte Carlo audit's bound on drawn prompts: MAX_DRAWS_PER_SLOT per batch slot plus
#: MAX_DRAWS_EMPTY (an acceptance below about 1e-3 is refused rather than sampled for ever)
MAX_DRAWS_PER_SLOT, MAX_DRAWS_EMPTY = 1000, 1_000_000


@float64
def monte_carlo(problem, rule, estimator="grpo", n_batches: int = 20_000, batch_size: int = 1,
                normaliser: str = "group", seed: int = 0) -> MonteCarloAudit:
    """Monte Carlo moments of a rule's batch estimate (the sampled counterpart of ``audit``).

    Prompts are drawn from f; a rule that refills dropped groups (:attr:`Rule.refills`) draws
    prompts until each batch holds B kept groups (rejection), and every sampled response counts
    as a rollout. The ``"token"`` normaliser divides each batch's sum by its kept responses.
    The draws are bounded (:data:`MAX_DRAWS_PER_SLOT` prompts per slot plus
    :data:`MAX_DRAWS_EMPTY`): a rule that drops (almost) every group is a ``ValueError``.

    Args:
        problem: a policy or DiscreteProblem; rule: a rule or name; estimator: name or estimator.
        n_batches: batches sampled (>= 2); batch_size: B; normaliser: ``"group"``/``"token"``.
        seed: the NumPy generator's seed.

    Returns:
        :class:`MonteCarloAudit` (``mse`` and ``expected_rollouts`` are
        :class:`~grpo_theory.core.stats.Estimate`).
    """
    r = get_rule(rule)
    est = check_estimator(estimator)
    check_normaliser(normaliser)
    R = V.integer("n_batches", n_batches, 2)
    B = V.integer("batch_size", batch_size, 1)
    rng = np.random.default_rng(V.integer("seed", seed, 0))
    pb = as_problem(problem)
    r.check_problem(pb.n_prompts)
    H = int(r.horizon())
    f = np.asarray(pb.prompt_probs)
    pi = np.asarray(pb.probs)
    mu = np.asarray(pb.reward_means)
    need = R * B
    sums, ks, slot_rollouts, slots, carry, drawn = [], [], [], 0, 0.0, 0
    while slots < need:
        if drawn >= MAX_DRAWS_PER_SLOT * need + MAX_DRAWS_EMPTY:
            raise ValueError(
                f"rule {r.name!r} kept {slots} of the {need} groups (n_batches x batch_size) "
                f"in {drawn} drawn prompts: it drops (almost) every group, so the batch is "
                f"never filled (the exact audit refuses a rule that drops every group)")
        n = max(2 * (need - slots), 1024) if r.refills else need
        drawn += n
        x = rng.choice(pb.n_prompts, size=n, p=f / f.sum())
        cum = np.cumsum(pi[x], axis=1)
        y = np.minimum((rng.random((n, H))[:, :, None] > cum[:, None, :]).sum(-1),
                       pb.n_responses - 1)
        z = (rng.random((n, H)) < mu[x[:, None], y]).astype(np.int64)
        ns, keep = r.run(x, y, z)
        g, k = _estimates(pb, est, x, y, z, keep, normaliser)
        if r.refills:  # each kept group pays for the dropped ones drawn since the previous one
            use = np.nonzero(k > 0)[0][:need - slots]
            spent = carry + np.cumsum(ns)
            paid = np.diff(np.concatenate([[0.0], spent[use]]))
            carry = float(spent[-1] - (spent[use[-1]] if use.size else 0.0))
            slot_rollouts.append(np.asarray(paid, np.float64))
        else:
            use = np.arange(n)
            slot_rollouts.append(ns.astype(np.float64))
        sums.append(g[use])
        ks.append(k[use])
        slots += int(use.size)
    g = np.concatenate(sums)[:need].reshape(R, B, -1)
    k = np.concatenate(ks)[:need].reshape(R, B)
    if normaliser == "token":
        den = np.maximum(k.sum(axis=1), 1)[:, None]
        batch = g.sum(axis=1) / den
    else:
        batch = g.mean(axis=1)
    grad = np.asarray(pb.pass_k_gradient(est.pass_k))  # grad J, or grad pass@k (pass_k = k)
    err = np.sum((batch - grad) ** 2, axis=1)
    mean = batch.mean(axis=0)
    se = batch.std(axis=0, ddof=1) / np.sqrt(R)
    rollouts = estimate_mean(np.concatenate(slot_rollouts)[:need])
    return MonteCarloAudit(mean, se, estimate_mean(err), rollouts, R)

