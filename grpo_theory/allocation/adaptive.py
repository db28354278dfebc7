"""The data-dependent rules: each reads the rewards of the current samples.

DAPO's dynamic sampling filters and refills, C-GRPO stops on agreement, PODS keeps a subset,
Reinforce-Ada eliminates resolved prompts; every one is biased in general (the current samples
decide which of them enter the estimate), which :func:`grpo_theory.allocation.audit` measures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from .. import _validation as V
from .rules import Rule, register_rule


# --- DAPO dynamic sampling -----------------------------------------------------------------------

@dataclass(frozen=True)
class DynamicSampling(Rule):
    """DAPO: sample G, drop the group if its rewards are all equal, refill the batch."""

    group_size: int = 8
    max_rounds: int | None = None
    refills = True

    def horizon(self) -> int:
        return self.group_size

    def training_rounds(self) -> int:
        if self.max_rounds is None:
            raise ValueError(f"rule {self.name!r} needs max_rounds for a training step (its "
                             "rounds are drawn at once): dynamic_sampling(G, max_rounds=R)")
        return self.max_rounds

    def decide(self, t, n1):
        G = self.group_size
        stop = np.full((1, t + 1), t == G)
        mixed = (n1 > 0) & (n1 < t)
        return stop, np.where(mixed, n1, 0)[None, :], np.where(mixed, t - n1, 0)[None, :]

    def rounds_pmf(self, prompt_probs, accept, batch_size: int, max_rounds: int = 10_000):
        """P(R = r), r = 1.., for the number of generation rounds of B prompts each that fill a
        batch of B accepted groups: ``P(R <= r) = P(Binomial(r B, a) >= B)``, ``a = sum f acc``.
        """
        a = float(np.dot(prompt_probs, accept))
        B = batch_size
        r = np.arange(1, max_rounds + 1)
        cdf = binom.sf(B - 1, r * B, a)
        return r, np.diff(np.concatenate([[0.0], cdf]))

    def cap_probability(self, prompt_probs, accept, batch_size: int) -> float:
        """P(more than ``max_rounds`` rounds are needed): verl raises an error then."""
        if self.max_rounds is None:
            return 0.0
        a = float(np.dot(prompt_probs, accept))
        return float(binom.cdf(batch_size - 1, self.max_rounds * batch_size, a))

    def batch_rollouts(self, prompt_probs, rollouts, accept, batch_size):
        """``G B E[R | R <= cap]`` with R the generation rounds (:meth:`rounds_pmf`); without
        a cap ``G B E[R]`` with ``E[R] = sum_{r >= 0} P(Binomial(r B, a) < B)``, summed until
        the tail is below 1e-12 of the sum (never truncated: a sum that has not converged by
        :data:`UNCAPPED_ROUNDS` rounds is a ``ValueError``)."""
        cap = self.max_rounds if self.max_rounds is not None else 10_000
        r, pmf = self.rounds_pmf(prompt_probs, accept, batch_size, cap)
        mass = float(pmf.sum())
        if self.max_rounds is None and not mass >= 1.0 - 1e-12:
            return float(self.group_size * batch_size
                         * _expected_rounds(float(np.dot(prompt_probs, accept)), batch_size,
                                            self.name))
        return float(self.group_size * batch_size * np.dot(r, pmf) / pmf.sum())


#: the uncapped dynamic-sampling audit's bound on the rounds summed for E[R]
UNCAPPED_ROUNDS = 10_000_000


def _expected_rounds(a: float, B: int, name: str) -> float:
    """``E[R] = sum_{r >= 0} P(Binomial(r B, a) <= B - 1)``, in blocks until the tail is below
    1e-12 of the sum (bounded by :data:`UNCAPPED_ROUNDS`)."""
    if not a > 0:
        raise ValueError(f"rule {name!r}: every group is dropped with probability 1, so the "
                         "batch is never filled")
    total, start, block = 0.0, 0, 100_000
    while start < UNCAPPED_ROUNDS:
        r = np.arange(start, start + block)
        terms = binom.cdf(B - 1, r * B, a)
        total += float(terms.sum())
        if terms[-1] <= 1e-12 * a * total:  # the tail is about terms[-1] / a
            return total
        start += block
    raise ValueError(f"rule {name!r}: the expected rounds of an uncapped refill do not "
                     f"converge within {UNCAPPED_ROUNDS} rounds (acceptance {a:.3g}); give "
                     "max_rounds")


# --- C-GRPO conformal stopping -------------------------------------------------------------------

@dataclass(frozen=True)
class ConformalStopping(Rule):
    """C-GRPO: stop at the first grid size whose conformal prediction set is one answer."""

    grid: tuple = (2, 4, 8)
    qhat: tuple = (1.0, 1.0, 1.0)   # one threshold per grid size
    agree: str = "answer"
    score: str = "aps"

    def horizon(self) -> int:
        return int(self.grid[-1])

    def _threshold(self, t):
        return dict(zip(self.grid, self.qhat)).get(int(t), np.inf)

    def decide(self, t, n1):
        q = self._threshold(t)
        # the trainer's own float expressions, so a share at the threshold rounds as there
        if self.score == "pass_rate":  # a pass seen and 1 - n_pass / k <= qhat_k
            resolved = (n1 > 0) & (1.0 - n1 / t <= q)
        else:  # APS singleton: the top answer's share reaches qhat_k
            resolved = np.maximum(n1, t - n1) / t >= q
        stop = (t == self.grid[-1]) | ((t in self.grid) & resolved)
        return stop[None, :], n1[None, :], (t - n1)[None, :]

    def step(self, key, sampler, batch_size, state):
        if self.agree == "reward":
            return super().step(key, sampler, batch_size, state)
        from .steps import conformal_answer_sizes, sizes_step

        return sizes_step(lambda d, s: (conformal_answer_sizes(d.same, self.grid), s), key,
                          sampler, batch_size, self.horizon(), state)

    def prompt_moments(self, structure, estimator, normaliser):
        if self.agree == "reward":
            return super().prompt_moments(structure, estimator, normaliser)
        from .dp import answer_agreement_moments

        return answer_agreement_moments(structure, self, estimator, normaliser)

    def run(self, prompts, answers, rewards):
        if self.agree == "reward":
            return super().run(prompts, answers, rewards)
        y = np.asarray(answers)
        N, H = y.shape
        n_sampled = np.full(N, H, np.int64)
        done = np.zeros(N, bool)
        for k in self.grid[:-1]:
            same = np.all(y[:, :k] == y[:, :1], axis=1)
            now = ~done & same
            n_sampled[now] = k
            done |= now
        keep = np.arange(H)[None, :] < n_sampled[:, None]
        return n_sampled, keep


def conformal_stopping(grid=(2, 4, 8), qhat=1.0, agree: str = "answer",
                       score: str = "aps") -> ConformalStopping:
    r"""C-GRPO's conformal stopping, as PyPI ``trl-cgrpo`` 0.2.0 implements it
    (``CGRPOTrainer._generate_single_turn`` and ``conformal.resolves_singleton``).

    Sample along ``grid`` and stop a prompt at the first size k whose prediction set over the
    k sampled answers is resolved, otherwise at the last grid size; the estimator is applied to
    the k responses sampled. The trainer's set (APS, ``score="aps"``): answers by decreasing
    frequency until their cumulative share reaches the size's threshold ``qhat_k``; resolved
    when it is one answer whose share reaches ``qhat_k``, i.e. iff the top answer's share is
    ``>= qhat_k`` (its random tie-breaking and its randomised score change which answer is
    listed, not whether the set is a singleton; ``qhat_k = 1``: all k answers agree).
    ``score="pass_rate"`` is the trainer's execution score for pass/fail rewards: resolved when
    some completion passed and ``1 - n_pass / k <= qhat_k``. (Its ``first_success`` score
    depends on the position of the first pass, not on counts, and has no exact route here.)

    The trainer calibrates one threshold per grid size (``qhats[k]``) on held-out prompts and
    pads a stopped group with masked rows of NaN reward: the group baseline is over the k real
    completions, and only token-normalised losses (``dapo``, ``bnpo``, ``cispo``, ``vespo``)
    are allowed, so a prompt's weight is its share of the batch's real tokens: the audit's
    ``normaliser="token"``. Its default grid is ``(2, 4, 8, 16, 32)``.

    ``agree="answer"`` takes a response's identity as its answer (a bandit's responses are its
    answers); only ``qhat = 1`` has an exact route there, where stopping happens at ``grid[0]``
    (all of the first ``grid[0]`` responses equal) or at ``grid[-1]``: a prefix that disagrees
    never agrees later. ``agree="reward"`` takes the reward value as the answer (any ``qhat``).

    Args:
        grid: strictly increasing integers >= 2.
        qhat: the threshold in [0, 1], one for every grid size, or a sequence of one per size.
        agree: ``"answer"`` or ``"reward"`` (``score="pass_rate"`` reads the rewards).
        score: ``"aps"`` or ``"pass_rate"``.

    Returns:
        A :class:`ConformalStopping` rule.

    >>> conformal_stopping((2, 4, 8), qhat=[0.9, 0.75, 1.0], agree="reward").name
    'conformal_stopping(grid=(2, 4, 8),qhat=(0.9, 0.75, 1),reward)'
    """
    try:
        g = tuple(int(v) for v in grid)
    except (TypeError, ValueError):
        raise ValueError(f"grid must be a sequence of integers >= 2, got {grid!r}") from None
    if not g or any(a != b for a, b in zip(g, grid)) or g[0] < 2 or any(
            b <= a for a, b in zip(g, g[1:])):
        raise ValueError(f"grid must be strictly increasing integers >= 2, got {grid!r}")
    if score not in ("aps", "pass_rate"):
        hint = (" (it depends on the position of the first pass: no exact route)"
                if score == "first_success" else "")
        raise ValueError(f"score must be 'aps' or 'pass_rate', got {score!r}{hint}")
    qs = np.ravel(np.asarray(qhat, dtype=object))
    if qs.size == 1:
        qs = np.repeat(qs, len(g))
    if qs.size != len(g):
        raise ValueError(f"qhat must be one number or one per grid size ({len(g)}), got {qhat!r}")
    q = []
    for v in qs:
        v = V.real_scalar("qhat", v)
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"qhat must lie in [0, 1], got {qhat!r}")
        q.append(float(v))
    q = tuple(q)
    if agree not in ("answer", "reward"):
        raise ValueError(f"agree must be 'answer' or 'reward', got {agree!r}")
    if score == "pass_rate":
        agree = "reward"
    if agree == "answer" and any(v != 1.0 for v in q):
        raise ValueError(f"qhat must be 1 with agree='answer' (the exact route needs it), got "
                         f"{qhat!r}; use agree='reward' for qhat < 1")
    qtext = f"{q[0]:g}" if len(set(q)) == 1 else "(" + ", ".join(f"{v:g}" for v in q) + ")"
    extra = ",pass_rate" if score == "pass_rate" else ""
    return ConformalStopping(f"conformal_stopping(grid={g},qhat={qtext},{agree}{extra})", g, q,
                             agree, score)


# --- PODS max-variance down-sampling -------------------------------------------------------------

@dataclass(frozen=True)
class MaxVarianceSubset(Rule):
    """PODS: sample n, keep the m whose rewards have the largest variance."""

    n: int = 16
    m: int = 8

    def horizon(self) -> int:
        return self.n

    def decide(self, t, n1):
        n, m = self.n, self.m
        stop = np.full((1, t + 1), t == n)
        n0 = t - n1
        # keep i correct and m - i incorrect; variance i (m - i) / m^2 is largest for i nearest
        # m / 2; among feasible i the first maximiser (the smaller i) is taken
        i = np.arange(m + 1)[None, :]
        feasible = (i <= n1[:, None]) & (m - i <= n0[:, None])
        score = np.where(feasible, i * (m - i), -1)
        best = np.argmax(score, axis=1)
        return stop, best[None, :], (m - best)[None, :]


def max_variance_subset(n: int = 16, m: int = 8) -> MaxVarianceSubset:
    """PODS max-variance down-sampling (arXiv 2504.13818, Algorithm 2 for binary rewards).

    Sample n responses, keep the m that maximise the sample variance of their rewards: for binary
    rewards, i correct and m - i incorrect with i as near m / 2 as the sample allows (ties: the
    smaller i).

    Args:
        n: responses sampled, ``n >= m``.
        m: responses kept, ``m >= 2``.

    Returns:
        A :class:`MaxVarianceSubset` rule.
    """
    m = V.integer("m", m, 2)
    n = V.integer("n", n, m)
    return MaxVarianceSubset(f"max_variance_subset(n={n},m={m})", n, m)


# --- Reinforce-Ada successive elimination --------------------------------------------------------

@dataclass(frozen=True)
class SuccessiveElimination(Rule):
    """Reinforce-Ada: rounds of samples until a prompt is resolved, then a final group."""

    samples_per_round: int = 8
    max_rounds: int = 4
    final_size: int = 4
    balanced: bool = False

    def horizon(self) -> int:
        return self.samples_per_round * self.max_rounds

    def _finished(self, n1, n0):
        if self.balanced:
            return (n1 >= self.final_size // 2) & (n0 >= self.final_size - self.final_size // 2)
        return n1 >= 1

    def decide(self, t, n1):
        n0 = t - n1
        finished = (t % self.samples_per_round == 0) & self._finished(n1, n0)
        stop = finished | (t == self.horizon())
        total = min(self.final_size, t)
        if self.balanced:
            k1 = np.minimum(total // 2, n1)
            k0 = np.minimum(total - k1, n0)
            short = k1 + k0 < total
            more1 = short & (n1 > k1)
            k1 = np.where(more1, np.minimum(n1, total - k0), k1)
            k0 = np.where(short & ~more1 & (n0 > k0), np.minimum(n0, total - k1), k0)
        else:
            # finished: min(n1, total) correct; unfinished after the last round (the source's
            # fallback): a target of max(1, min(floor(n1 total / t), n1)) correct, of which only
            # the existing ones can be taken; the rest of the target is filled with incorrect ones
            target1 = np.where(finished, np.minimum(n1, total),
                               np.maximum(1, np.minimum((n1 * total) // t, n1)))
            k1 = np.minimum(target1, n1)
            k0 = np.minimum(n0, total - target1)
        return stop[None, :], k1[None, :], k0[None, :]


def successive_elimination(samples_per_round: int = 8, max_rounds: int = 4,
                           final_size: int = 4) -> SuccessiveElimination:
    """Reinforce-Ada, plain variant (``strategy="positive_focused"``).

    Transcribed from RLHFlow/Reinforce-Ada-Tinker, ``tinker_cookbook/rl/adaptive_sampling.py``
    (commit 6ecb88f; arXiv 2510.04996): every round samples ``samples_per_round`` responses for
    each active prompt; after a round a prompt is finished once it holds a correct response and
    keeps ``min(final_size, seen)`` responses, correct ones first; a prompt unfinished after
    ``max_rounds`` keeps ``max(1, floor(share * total))`` correct ones (as many as exist) and
    fills with incorrect ones. The paper's global-statistics baseline is not modelled: the
    estimator is applied to the kept group.

    Args:
        samples_per_round: M >= 1; max_rounds: >= 1; final_size: the kept group, >= 2.

    Returns:
        A :class:`SuccessiveElimination` rule.
    """
    return _elimination(samples_per_round, max_rounds, final_size, False)


def balanced_elimination(samples_per_round: int = 8, max_rounds: int = 4,
                         final_size: int = 4) -> SuccessiveElimination:
    """Reinforce-Ada, balanced variant (``strategy="balanced"``, same source as
    :func:`successive_elimination`): a prompt is finished once it holds ``final_size // 2``
    correct and ``final_size - final_size // 2`` incorrect responses, and keeps that many of
    each; an unfinished prompt keeps ``min(total // 2, n1)`` correct ones and fills with the
    other kind."""
    return _elimination(samples_per_round, max_rounds, final_size, True)


def _elimination(M, R, n, balanced):
    M = V.integer("samples_per_round", M, 1)
    R = V.integer("max_rounds", R, 1)
    n = V.integer("final_size", n, 2)
    kind = "balanced_elimination" if balanced else "successive_elimination"
    return SuccessiveElimination(f"{kind}(M={M},rounds={R},n={n})", M, R, n, balanced)


def dynamic_sampling(group_size: int = 8, max_rounds: int | None = None) -> DynamicSampling:
    r"""DAPO dynamic sampling (arXiv 2503.14476; verl ``recipe/dapo/dapo_ray_trainer.py``,
    ``algorithm.filter_groups`` with ``metric="acc"``).

    Each prompt gets G responses; a group whose rewards are all equal is dropped; rounds of B
    prompts are generated until B groups are kept (verl raises an error after
    ``max_num_gen_batches`` rounds: ``max_rounds``). The batch model: the kept prompts are iid
    from the acceptance-reweighted law ``f(x) a(x) / sum_x' f(x') a(x')`` with ``a(x) = 1 -
    V(x)^G - (1 - V(x))^G`` (exact for rejection sampling; the truncation at the last round
    keeps the first B kept groups, which are exchangeable), each group conditioned on being kept.

    Args:
        group_size: G >= 2.
        max_rounds: the cap on generation rounds (``None``: none).

    Returns:
        A :class:`DynamicSampling` rule.
    """
    G = V.integer("group_size", group_size, 2)
    cap = None if max_rounds is None else V.integer("max_rounds", max_rounds, 1)
    return DynamicSampling(f"dynamic_sampling({G})", G, cap)


register_rule(dynamic_sampling(8), "dynamic_sampling", "dapo")
register_rule(conformal_stopping(), "conformal_stopping", "cgrpo")
register_rule(max_variance_subset(16, 8), "max_variance_subset", "pods")
register_rule(successive_elimination(), "successive_elimination", "reinforce_ada")
register_rule(balanced_elimination(), "balanced_elimination", "reinforce_ada_balanced")
