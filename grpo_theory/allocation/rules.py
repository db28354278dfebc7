r"""Rollout rules as small frozen values in a registry keyed by name.

A rule decides, for one prompt, how many responses to sample and which of them enter the
estimator. Every rule of this module reads the rewards only through the exchangeable counts
``(n1, n0)`` of correct and incorrect responses sampled so far, so it is described by one
method, :meth:`Rule.decide`: after ``t`` samples with ``n1`` correct ones, stop or continue, and
if it stops keep ``(m1, m0)`` correct and incorrect responses (the first ones of each kind: given
the counts, the kept responses are iid from the conditional laws ``pi(y | x, Z = z)``).
:mod:`grpo_theory.allocation.dp` turns :meth:`Rule.decide` into exact moments; a rule that reads
more than the reward counts (:class:`ConformalStopping` with ``agree="answer"``) overrides
:meth:`Rule.prompt_moments` and :meth:`Rule.run`.

Batch-level effects are two more methods with defaults: :meth:`Rule.slot_weights` (the law of
the prompt in one slot of the training batch: ``f`` unless the rule drops and refills groups)
and :meth:`Rule.batch_rollouts` (the expected rollouts one batch costs).

This module holds the rules decided before sampling (unbiased for leave-one-out):

* :func:`fixed`, :func:`per_prompt` - fixed group sizes, equal or per prompt;
* :func:`pass_rate_allocation` - G_x from pass-rate estimates that do not use the current samples
  (VIP's variance model p(1-p); sGPO's G proportional to 1 / success rate);

and :mod:`grpo_theory.allocation.adaptive` the data-dependent ones (the source read is named in
each constructor):

* :func:`~grpo_theory.allocation.adaptive.dynamic_sampling` - DAPO (filter constant groups,
  refill the batch);
* :func:`~grpo_theory.allocation.adaptive.conformal_stopping` - C-GRPO (stop on agreement along
  a budget grid);
* :func:`~grpo_theory.allocation.adaptive.max_variance_subset` - PODS (keep the m of n with the
  largest reward variance);
* :func:`~grpo_theory.allocation.adaptive.successive_elimination` and ``balanced_elimination`` -
  Reinforce-Ada.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _validation as V
from ..core import RolloutRule
from .greedy import knapsack_value


@dataclass(frozen=True)
class Rule(RolloutRule):
    """A rollout rule (see the module docstring). Subclasses implement :meth:`horizon` and
    :meth:`decide`; the other methods have defaults (the training loops' contract,
    :class:`~grpo_theory.core.rollout_rules.RolloutRule`, included)."""

    name: str
    #: whether a dropped (empty) group is replaced by another prompt's (the batch is refilled)
    refills = False
    #: whether a training step reads and updates the sampler's state (a plug-in carried over)
    reads_state = False
    #: whether every prompt's group size is decided before its responses are sampled, from
    #: pass rates known before the batch (:meth:`presampled_sizes`): the rules a trainer that
    #: generates a whole batch at once (TRL's ``RolloutAllocator``) can run
    decided_before_sampling = False

    def horizon(self) -> int:  # pragma: no cover - abstract
        """The largest number of responses the rule can sample for one prompt."""
        raise NotImplementedError

    def decide(self, t: int, n1: np.ndarray):  # pragma: no cover - abstract
        """After ``t`` samples with ``n1`` (an integer array) correct: ``(stop, m1, m0)``.

        Args:
            t: the number of responses sampled so far (1..horizon).
            n1: the possible numbers of correct responses, ``np.arange(t + 1)``.

        Returns:
            Three arrays broadcastable to ``(P, t + 1)`` (one row, or one row per prompt):
            whether to stop, and the kept counts of correct and incorrect responses when it
            stops (``m1 <= n1``, ``m0 <= t - n1``; ``m1 = m0 = 0`` drops the group). Every state
            must stop at ``t = horizon()``.
        """
        raise NotImplementedError

    def check_problem(self, n_prompts: int) -> None:
        """``ValueError`` if the rule cannot serve a problem with ``n_prompts`` prompts."""

    def fixed_group_size(self) -> int | None:
        """G when the rule samples and keeps G responses for every prompt, else ``None``.

        The audit of estimators that see the whole batch or per-response weights
        (:func:`grpo_theory.core.batch_moments`) needs it."""
        return None

    # -- the training step (jit-able; :mod:`grpo_theory.allocation.steps`)
    def training_rounds(self) -> int:
        """Rounds of B prompts one training step draws (1; a refilling rule's cap)."""
        return 1

    def step(self, key, sampler, batch_size: int, state):
        """One training step: draw with the caller's ``sampler``, decide, report the spend.

        By default derived from :meth:`decide` (:func:`~grpo_theory.allocation.steps.
        count_step`); a rule that reads more than the reward counts overrides it.

        Args:
            key: a JAX key.
            sampler: the loop's :class:`~grpo_theory.core.rollout_rules.Sampler`.
            batch_size: B prompts a step (kept prompts for a refilling rule).
            state: the sampler's state (read and updated by the rules that need it).

        Returns:
            A :class:`~grpo_theory.core.rollout_rules.Step` (B rows).
        """
        from .steps import count_step

        return count_step(self, key, sampler, batch_size, state)

    def check_decided_before_sampling(self) -> None:
        """``ValueError`` naming the loops that run the rule unless it is
        :attr:`decided_before_sampling` (what a trainer's allocator needs)."""
        if not self.decided_before_sampling:
            raise ValueError(
                f"rule {self.name!r} decides from the rewards it samples (or from what a trainer "
                "that generates a batch at once cannot give): a trainer's allocator takes the "
                "rules decided before sampling (allocation.fixed(G), "
                "allocation.pass_rate_rule(...)); train this one with "
                "grpo_theory.optim.make_train(..., TrainConfig(rule=...)) or "
                "grpo_theory.lm.training.allocation.train_with_rule")

    def presampled_sizes(self, pass_rates, budget: int, width: int, min_size: int) -> np.ndarray:
        """The group sizes (n,) of n prompts with ``pass_rates`` known before sampling, in
        ``[min_size, width]`` and summing to at most ``budget`` (the rules with
        :attr:`decided_before_sampling` override it).

        Raises:
            ValueError: the rule is not decided before sampling
                (:meth:`check_decided_before_sampling`).
        """
        self.check_decided_before_sampling()
        raise NotImplementedError(f"rule {self.name!r} is decided before sampling: implement "
                                  "Rule.presampled_sizes")

    def slot_weights(self, prompt_probs, accept):
        """The law of the prompt in one batch slot.

        ``f`` when dropped groups stay in the batch (contributing zero); ``f(x) a(x) / sum_x'
        f(x') a(x')`` when they are refilled (:attr:`refills`): rejection sampling.

        Args:
            prompt_probs: (P,) the prompt distribution f.
            accept: (P,) the probability that a prompt's group is kept (non-empty).

        Returns:
            (P,) probabilities.
        """
        f = np.asarray(prompt_probs, np.float64)
        if not self.refills:
            return f
        w = f * np.asarray(accept, np.float64)
        if not w.sum() > 0:
            raise ValueError(f"rule {self.name!r}: every group is dropped with probability 1, "
                             "so the batch is never filled")
        return w / w.sum()

    def batch_rollouts(self, prompt_probs, rollouts, accept, batch_size: int) -> float:
        """Expected rollouts of one training batch of ``batch_size`` prompts.

        By default every slot is one prompt drawn from f: ``B sum_x f(x) r(x)``.
        """
        return float(batch_size * np.dot(prompt_probs, rollouts))

    def prompt_moments(self, structure, estimator, normaliser: str):
        """Per-prompt moments of one slot's estimate (by default
        :func:`grpo_theory.allocation.dp.count_moments`)."""
        from .dp import count_moments

        return count_moments(structure, self, estimator, normaliser)

    def run(self, prompts, answers, rewards):
        """The rule on sampled sequences (the brute-force and Monte Carlo references).

        Args:
            prompts: (N,) prompt indices; answers: (N, H) response indices; rewards: (N, H) in
                {0, 1}, with ``H = horizon()``.

        Returns:
            ``(n_sampled (N,), keep (N, H) bool)``: how many responses were sampled and which of
            them enter the estimator (the first ``m1`` correct and ``m0`` incorrect ones).
        """
        prompts = np.asarray(prompts)
        z = np.asarray(rewards).astype(np.int64)
        N, H = z.shape
        c1 = np.cumsum(z, axis=1)
        done = np.zeros(N, bool)
        n_sampled = np.zeros(N, np.int64)
        m1 = np.zeros(N, np.int64)
        m0 = np.zeros(N, np.int64)
        for t in range(1, H + 1):
            stop, k1, k0 = (np.asarray(a) for a in self.decide(t, np.arange(t + 1)))
            shape = np.broadcast_shapes(stop.shape, k1.shape, k0.shape)
            stop, k1, k0 = (np.broadcast_to(a, shape) for a in (stop, k1, k0))
            rows = prompts if shape[0] > 1 else np.zeros(N, np.int64)
            n1 = c1[:, t - 1]
            now = ~done & stop[rows, n1]
            n_sampled[now] = t
            m1[now], m0[now] = k1[rows, n1][now], k0[rows, n1][now]
            done |= now
        if not done.all():
            raise ValueError(f"rule {self.name!r} did not stop by its horizon {H}")
        pos_rank = np.cumsum(z, axis=1)
        neg_rank = np.cumsum(1 - z, axis=1)
        keep = np.where(z == 1, pos_rank <= m1[:, None], neg_rank <= m0[:, None])
        keep &= np.arange(H)[None, :] < n_sampled[:, None]
        return n_sampled, keep


# --- fixed and per-prompt group sizes ------------------------------------------------------------

@dataclass(frozen=True)
class FixedSize(Rule):
    """G responses for every prompt, all kept."""

    group_size: int = 8
    decided_before_sampling = True

    def horizon(self) -> int:
        return self.group_size

    def fixed_group_size(self) -> int:
        return self.group_size

    def presampled_sizes(self, pass_rates, budget, width, min_size):
        n, G = len(pass_rates), self.group_size
        if not min_size <= G <= width or n * G > budget:
            raise ValueError(f"rule {self.name!r}: G = {G} must lie in [min_size {min_size}, "
                             f"width {width}] and {n} prompts x G within the budget {budget}")
        return np.full(n, G, dtype=int)

    def decide(self, t, n1):
        stop = np.full((1, t + 1), t == self.group_size)
        return stop, n1[None, :], (t - n1)[None, :]


@dataclass(frozen=True, eq=False)
class PerPromptSize(Rule):
    """G_x responses for prompt x (decided before sampling), all kept."""

    sizes: tuple = ()

    def horizon(self) -> int:
        return int(max(self.sizes))

    def check_problem(self, n_prompts):
        if len(self.sizes) != int(n_prompts):
            raise ValueError(f"group_sizes must have one entry per prompt (n_prompts="
                             f"{int(n_prompts)}), got {len(self.sizes)}")

    def decide(self, t, n1):
        sizes = np.asarray(self.sizes)[:, None]
        stop = np.broadcast_to(sizes == t, (len(self.sizes), t + 1))
        return stop, n1[None, :], (t - n1)[None, :]


def fixed(group_size: int = 8) -> FixedSize:
    """Fixed G: the package's estimator (the main paper, Algorithm 1).

    Args:
        group_size: G >= 1.

    Returns:
        A :class:`FixedSize` rule named ``"fixed(G)"``.
    """
    G = V.integer("group_size", group_size, 1)
    return FixedSize(f"fixed({G})", G)


def per_prompt(group_sizes, name: str | None = None) -> PerPromptSize:
    """Per-prompt group sizes G_x fixed before sampling (unbiased for leave-one-out).

    Args:
        group_sizes: one integer >= 1 per prompt.
        name: the rule's name (default ``"per_prompt"``).

    Returns:
        A :class:`PerPromptSize` rule.
    """
    arr = V.finite_array("group_sizes", group_sizes, ndim=1)
    if arr.size == 0 or np.any(arr != np.round(arr)) or np.any(arr < 1):
        raise ValueError(f"group_sizes must be integers >= 1, one per prompt, got {arr.tolist()!r}")
    return PerPromptSize(name or "per_prompt", tuple(int(g) for g in arr))


def _largest_remainder(share, total, minimum):
    """Integers >= minimum summing to ``total``, proportional to ``share`` (largest remainders)."""
    P = share.size
    spare = total - minimum * P
    raw = spare * share / share.sum()
    base = np.floor(raw).astype(np.int64)
    order = np.argsort(-(raw - base), kind="stable")
    base[order[:spare - base.sum()]] += 1
    return base + minimum


def _knapsack_sizes(p, total, lo, hi):
    """argmax of ``sum_x knapsack_value(G_x, p_x)`` at ``sum G_x = total``, ``lo <= G_x <= hi``:
    the largest marginal gains, one rollout at a time (exact for concave values)."""
    import heapq

    sizes = np.full(p.size, lo, np.int64)
    gain = lambda x: float(knapsack_value(sizes[x] + 1, p[x])  # noqa: E731
                           - knapsack_value(sizes[x], p[x]))
    heap = [(-gain(x), x) for x in range(p.size) if sizes[x] < hi]
    heapq.heapify(heap)
    for _ in range(total - lo * p.size):
        _, x = heapq.heappop(heap)
        sizes[x] += 1
        if sizes[x] < hi:
            heapq.heappush(heap, (-gain(x), x))
    return sizes


def pass_rate_allocation(pass_rates, budget: int, method: str = "vip", min_size: int = 2,
                         max_size: int | None = None) -> PerPromptSize:
    r"""Group sizes from pass-rate estimates that do not use the current samples.

    ``"vip"``: VIP (arXiv 2602.01601) takes a prompt's gradient variance as proportional to
    ``p(1 - p)``; minimising ``sum_x p_x (1 - p_x) / G_x`` at ``sum_x G_x = N`` (Lagrange) gives
    ``G_x \propto \sqrt{p_x (1 - p_x)}``. ``"sgpo"``: sGPO's ``G_x \propto 1 / p_x``. Both are
    rounded by largest remainders to integers ``>= min_size`` summing to ``budget``.
    ``"knapsack"``: Knapsack RL (arXiv 2509.25849) values G rollouts of a prompt as the chance of
    a non-zero GRPO gradient times its information gain,
    ``v(G, p) = (1 - p^G - (1 - p)^G) p (1 - p)^2``, and maximises ``sum_x v(G_x, p_x)`` at
    ``sum_x G_x = N`` with ``min_size <= G_x <= max_size`` (solved exactly: ``v`` is concave in
    G, so taking the largest marginal gains one rollout at a time is optimal; ties go to the
    earlier prompt; prompts with p in {0, 1} have no value and keep ``min_size`` unless the
    budget cannot be spent otherwise). Because the sizes are fixed before sampling,
    leave-one-out stays unbiased per prompt (with the default per-prompt normaliser).

    Args:
        pass_rates: (P,) estimates in [0, 1] (previous step or cross-fitted).
        budget: N, the total rollouts per pass over the P prompts, ``>= min_size * P``.
        method: ``"vip"``, ``"sgpo"`` or ``"knapsack"``.
        min_size: the smallest G_x (2 for leave-one-out).
        max_size: an optional cap on G_x (vip, sgpo: the excess is not redistributed;
            knapsack: a constraint, ``budget <= max_size * P``).

    Returns:
        A :class:`PerPromptSize` rule named ``"pass_rate(<method>)"``.
    """
    p = V.finite_array("pass_rates", pass_rates, ndim=1)
    if p.size == 0 or np.any(p < 0) or np.any(p > 1):
        raise ValueError(f"pass_rates must be a non-empty 1-d array in [0, 1], got {p.tolist()!r}")
    if method not in ("vip", "sgpo", "knapsack"):
        raise ValueError(f"method must be 'vip', 'sgpo' or 'knapsack', got {method!r}")
    lo = V.integer("min_size", min_size, 1)
    N = V.integer("budget", budget, lo * p.size)
    if method == "knapsack":
        hi = N if max_size is None else V.integer("max_size", max_size, lo)
        if hi * p.size < N:
            raise ValueError(f"budget {N} exceeds max_size {hi} times the {p.size} prompts")
        sizes = _knapsack_sizes(p, N, lo, hi)
        return PerPromptSize("pass_rate(knapsack)", tuple(int(g) for g in sizes))
    if method == "vip":
        share = np.sqrt(p * (1 - p))
    else:
        share = 1.0 / np.maximum(p, 1e-12)
    if not np.any(share > 0):
        share = np.ones_like(p)
    sizes = _largest_remainder(share, N, lo)
    if max_size is not None:
        sizes = np.minimum(sizes, V.integer("max_size", max_size, lo))
    return PerPromptSize(f"pass_rate({method})", tuple(int(g) for g in sizes))


@dataclass(frozen=True)
class PassRateRule(Rule):
    """Group sizes from pass rates known before sampling, ``rollouts`` a prompt on average.

    ``method`` as :func:`pass_rate_allocation` (``"knapsack"``, ``"vip"``, ``"sgpo"``). In a
    training step the B prompts of the batch share ``rollouts B`` responses, with the pass rates
    the loop's sampler gives (:meth:`~grpo_theory.core.rollout_rules.Sampler.pass_rates`); the
    exact audit allocates ``rollouts P`` over the problem's P prompts at their exact pass rates
    (the rule with perfect predictions). The sizes use no current sample: leave-one-out stays
    unbiased per prompt.
    """

    method: str = "knapsack"
    rollouts: int = 4
    max_group: int = 16
    min_size: int = 2
    decided_before_sampling = True

    def horizon(self) -> int:
        return self.max_group

    def presampled_sizes(self, pass_rates, budget, width, min_size):
        """:func:`pass_rate_allocation` with the caller's budget, width and least size (a
        trainer's layout, not the rule's own ``rollouts`` and ``max_group``)."""
        return np.asarray(pass_rate_allocation(pass_rates, budget, self.method, min_size,
                                               width).sizes)

    def decide(self, t, n1):
        raise ValueError(f"rule {self.name!r} decides from pass rates before sampling, not from "
                         "counts: its exact route is per_prompt(rule.sizes(pass_rates, budget))")

    def sizes(self, pass_rates, budget: int) -> np.ndarray:
        """The sizes (P,) of :func:`pass_rate_allocation` for ``budget`` responses."""
        return np.asarray(pass_rate_allocation(pass_rates, budget, self.method, self.min_size,
                                               self.max_group).sizes)

    def prompt_moments(self, structure, estimator, normaliser: str):
        p = np.clip(np.asarray(structure.values(), np.float64), 0.0, 1.0)
        sizes = self.sizes(p, self.rollouts * p.size)
        return per_prompt(sizes).prompt_moments(structure, estimator, normaliser)

    def step(self, key, sampler, batch_size, state):
        import jax.numpy as jnp

        from .steps import knapsack_sizes, remainder_sizes, sizes_step

        total, W, lo = self.rollouts * batch_size, self.max_group, self.min_size

        def sizes(d, s):
            p = sampler.pass_rates(d.x, s)
            if self.method == "knapsack":
                return knapsack_sizes(p, total, W, lo), s
            share = jnp.sqrt(p * (1 - p)) if self.method == "vip" else 1.0 / jnp.maximum(p, 1e-12)
            return remainder_sizes(share, total, lo, W), s

        return sizes_step(sizes, key, sampler, batch_size, W, state)


def pass_rate_rule(method: str = "knapsack", rollouts: int = 4, max_group: int = 16,
                   min_size: int = 2) -> PassRateRule:
    """A :class:`PassRateRule` (Knapsack RL, VIP or sGPO with pass rates known before sampling).

    Args:
        method: ``"knapsack"``, ``"vip"`` or ``"sgpo"``.
        rollouts: m, the responses a prompt on average (the batch's budget is m B).
        max_group: the largest group, ``>= rollouts`` (the training step's width).
        min_size: the smallest group (2 for leave-one-out), ``<= rollouts``.

    Returns:
        The rule, named ``"pass_rate(<method>,m=..,max=..)"``.

    >>> pass_rate_rule("knapsack", rollouts=4, max_group=8).name
    'pass_rate(knapsack,m=4,max=8)'
    """
    if method not in ("vip", "sgpo", "knapsack"):
        raise ValueError(f"method must be 'vip', 'sgpo' or 'knapsack', got {method!r}")
    lo = V.integer("min_size", min_size, 1)
    m = V.integer("rollouts", rollouts, lo)
    hi = V.integer("max_group", max_group, m)
    return PassRateRule(f"pass_rate({method},m={m},max={hi})", method, m, hi, lo)


# --- the registry --------------------------------------------------------------------------------

_RULES: dict[str, Rule] = {}


def register_rule(rule: Rule, *aliases: str) -> Rule:
    """Add a rule (and aliases) to the registry; returns it."""
    if not isinstance(rule, Rule):
        raise ValueError(f"rule must be a Rule, got {type(rule).__name__}")
    for key in (rule.name, *aliases):
        _RULES[key] = rule
    return rule


def available_rules() -> list[str]:
    """The names of the registered rules (:func:`register_rule`), sorted."""
    return sorted(_RULES)


def get_rule(name_or_rule) -> Rule:
    """Look up a rule by registry name, or pass a :class:`Rule` through."""
    if isinstance(name_or_rule, Rule):
        return name_or_rule
    if not isinstance(name_or_rule, str) or name_or_rule not in _RULES:
        raise ValueError(f"rule must be one of {available_rules()} or a Rule, got {name_or_rule!r}")
    return _RULES[name_or_rule]


register_rule(fixed(8), "fixed")
