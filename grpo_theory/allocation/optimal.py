r"""The MSE-optimal unbiased allocation of rollouts over prompts.

Setting. Prompts are drawn iid from ``f``; prompt ``x`` gets ``G_x >= 2`` responses, chosen from
data that the estimate does not use (the previous step's samples, or a cross-fitted half), and
every prompt keeps weight one in the batch mean ``ghat = (1/B) sum_b ghat_(x_b)``. Given
``G_x``, each prompt's leave-one-out estimate is unbiased for ``g(x)``, so the estimate is
unbiased for ``grad J`` whatever the allocation. Its per-prompt variance is a U-statistic's
(Lemma 1, Theorem 7):

.. math:: v_x(G) = \frac{a_x}{G} + \frac{b_x}{G(G-1)}, \qquad
          a_x = \operatorname{tr}\Sigma_{or}(x),\quad
          b_x = E[\|s\|^2 \mid x]\,\sigma^2(x) + \|g(x)\|^2,

with ``E_f a = c2`` and ``E_f b = c3`` (the scaling constants). For B prompts,

.. math:: \mathrm{MSE} = \frac{c_1 + \sum_x f_x v_x(G_x)}{B}, \qquad
          E[\text{rollouts}] = B\,m, \quad m = \sum_x f_x G_x .

**Inner problem** (a fixed budget m per prompt): minimise ``sum_x f_x v_x(G_x)`` subject to
``sum_x f_x G_x = m``. Each ``v_x`` is convex and decreasing in G: its marginal gain
``Delta_x(G) = v_x(G) - v_x(G+1) = (a_x + 2 b_x/(G-1)) / (G (G+1))`` is positive and
decreasing. A step ``G_x -> G_x + 1`` costs ``f_x`` rollouts and saves ``f_x Delta_x(G_x)``, so
its gain per rollout is ``Delta_x(G_x)`` whatever ``f``. **Greedy marginal allocation** (start
at ``G_x = 2``, repeatedly add one response to the prompt with the largest ``Delta_x(G_x)``) is
exact for separable convex costs (Gross 1956; Fox 1966; Ibaraki and Katoh 1988): after k steps
the allocation minimises ``sum_x f_x (v_x(G_x) + lambda G_x)`` for every ``lambda`` between the
k-th and (k+1)-th gains taken (the gains are decreasing along each prompt, so these are the k
largest gains of the union), and a Lagrangian minimiser is optimal for the budget it spends.
With equal weights (a batch whose B prompts are given, or ``f`` uniform) every integer total
``N = sum_x G_x`` is reached, so greedy is the exact integer optimum (checked against brute
force over all allocations in the tests). Between two consecutive greedy points the optimum
over allocations randomised independently of the rewards (so still unbiased) is the linear
interpolation: one prompt gets ``n`` or ``n + 1`` responses with the probability that spends
exactly m. :class:`Allocation` writes such a prompt's size as the non-integer ``n + t``.

**Outer problem** (the budget N = B m free): ``N MSE = m (c1 + V*(m))`` with ``V*`` the convex,
decreasing, piecewise-linear optimum of the inner problem. On each linear piece this is a
quadratic in m with leading coefficient ``slope(V*) <= 0``, hence concave, so its minimum over
m lies at a greedy point; and ``N MSE >= c1 m`` stops the search once ``c1 m`` exceeds the best
value found. **Alike prompts** (equal ``a_x = c2``, ``b_x = c3``): greedy raises the prompts in
turn, ``V*`` is linear between integer m, and ``N MSE = c1 G + c2 + c3/(G-1)`` at ``m = G``:
the optimum is the scaling law's uniform ``G* = 1 + sqrt(c3/c1)`` (its integer argmin).

The per-prompt constants are read from the package's exact per-prompt MSE
(:func:`grpo_theory.core.exact.exact_prompt_mse` at G = 2 and 3), the estimator's own closed
form, so any estimator unbiased per prompt with this two-term form works (``grpo``; ``oracle``,
``vanilla`` and ``optimal`` with ``b_x = 0``).
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from .._precision import float64
from ..core import (Estimate, ScalingConstants, Step, as_structure, estimate_mean,
                    exact_prompt_mse, get_estimator, mask_from_sizes, scaling_constants)
from .rules import Rule, per_prompt


@dataclass(frozen=True)
class PromptConstants:
    """Per-prompt constants of ``v_x(G) = a_x/G + b_x/(G(G-1))`` (module docstring).

    Attributes:
        a, b: (P,) arrays, ``a_x = tr Sigma_or(x)`` and ``b_x = E[||s||^2|x] sigma^2(x) +
            ||g(x)||^2`` for ``grpo`` (``b = 0`` for prompt baselines).
        c1: ``E_X||g(X) - g||^2``, the between-prompt spread.
        prompt_probs: f (P,).
        estimator: the estimator's registry name.
    """

    a: np.ndarray
    b: np.ndarray
    c1: float
    prompt_probs: np.ndarray
    estimator: str

    @property
    def n_prompts(self) -> int:
        return int(self.a.size)

    @property
    def scaling(self) -> ScalingConstants:
        """``(c1, E_f a, E_f b)``: the scaling constants (c1, c2, c3) for ``grpo``."""
        f = self.prompt_probs
        return ScalingConstants(float(self.c1), float(f @ self.a), float(f @ self.b))

    def _check_sizes(self, group_sizes) -> np.ndarray:
        g = V.real_array("group_sizes", group_sizes)
        g = np.broadcast_to(g, (self.n_prompts,)) if g.ndim == 0 else g
        if g.shape != (self.n_prompts,):
            raise ValueError(f"group_sizes must have shape ({self.n_prompts},), got {g.shape}")
        if np.any(g < 2):
            raise ValueError(f"group_sizes must be >= 2, got min {float(g.min())!r}")
        return g

    def variance(self, group_sizes) -> np.ndarray:
        """Per-prompt ``v_x(G_x)`` (P,); a non-integer ``n + t`` means ``n + 1`` responses with
        probability t (drawn independently of the rewards): ``(1 - t) v(n) + t v(n + 1)``.

        Args:
            group_sizes: (P,) sizes >= 2 (or one scalar for every prompt).
        Returns:
            (P,) array.
        """
        g = self._check_sizes(group_sizes)
        n = np.floor(g)
        t = g - n
        return (1 - t) * _v(self.a, self.b, n) + t * _v(self.a, self.b, n + 1)

    def mse(self, group_sizes, batch_size: int = 1) -> float:
        """Exact ``E||ghat - grad J||^2 = (c1 + sum_x f_x v_x(G_x)) / B`` (B prompts iid).

        Args:
            group_sizes: (P,) sizes >= 2 (or a scalar).
            batch_size: B.
        Returns:
            The MSE (float).
        """
        B = V.positive_int("batch_size", batch_size)
        return float(self.c1 + self.prompt_probs @ self.variance(group_sizes)) / B

    def expected_rollouts(self, group_sizes) -> float:
        """``m = sum_x f_x G_x``, the expected rollouts per prompt drawn."""
        return float(self.prompt_probs @ self._check_sizes(group_sizes))


def _v(a, b, G):
    return a / G + b / (G * (G - 1))


def _gain(a, b, G):
    """``v(G) - v(G + 1) = (a + 2 b / (G - 1)) / (G (G + 1))`` (G >= 2)."""
    return (a + 2.0 * b / (G - 1)) / (G * (G + 1))


def _check_estimator(estimator):
    est = get_estimator(estimator)
    if est.closed_form is None or not est.closed_form.unbiased:
        raise ValueError(f"estimator must be unbiased per prompt with a closed-form MSE (grpo, "
                         f"oracle, vanilla, optimal or any whose ClosedForm is unbiased), got "
                         f"{est.name!r}")
    return est


@float64
def prompt_constants(problem, estimator="grpo") -> PromptConstants:
    """Exact per-prompt constants ``a_x, b_x`` and ``c1`` of an enumerable problem.

    ``v_x(2) = (a + b)/2`` and ``v_x(3) = a/3 + b/6`` give ``a = 6 v(3) - 2 v(2)`` and
    ``b = 4 v(2) - 6 v(3)`` from :func:`~grpo_theory.core.exact.exact_prompt_mse`.

    Args:
        problem: a policy, a :class:`~grpo_theory.core.problem.DiscreteProblem` or a score
            structure.
        estimator: an unbiased registry estimator (``"grpo"`` by default).
    Returns:
        :class:`PromptConstants`.
    """
    est = _check_estimator(estimator)
    st = as_structure(problem)
    v2 = np.asarray(exact_prompt_mse(st, est, 2), dtype=np.float64)
    v3 = np.asarray(exact_prompt_mse(st, est, 3), dtype=np.float64)
    a = np.maximum(6 * v3 - 2 * v2, 0.0)  # >= 0 exactly; rounding only
    b = np.maximum(4 * v2 - 6 * v3, 0.0)
    if not est.closed_form.pair_term:  # v(G) = a/G: no U-statistic term (rounding only)
        b = np.zeros_like(b)
    return PromptConstants(a, b, scaling_constants(st).c1, np.asarray(st.prompt_probs,
                                                                      dtype=np.float64), est.name)


@float64
def estimated_constants(problem, n_previous: int, seed=0, estimator="grpo",
                        model: str = "responses", prior: float = 1.0) -> PromptConstants:
    """Plug-in constants from an independent previous sample of ``n_previous`` rollouts a prompt.

    The previous sample draws ``n_previous`` responses of every prompt from the current policy
    with Bernoulli rewards. ``model="responses"`` estimates each reward mean by
    ``(successes + prior) / (trials + 2 prior)`` (an unseen response reads 1/2);
    ``model="pass_rate"`` only the pass rate ``p_x`` the same way, taken for every response of
    the prompt (``g(x) = 0`` in the plug-in, so ``v_x(G) ∝ E||s||^2 p_x(1 - p_x)/(G - 1)``, a
    VIP-style proxy). The policy (hence the scores) is known; only rewards are estimated.

    Args:
        problem: a policy, a DiscreteProblem or a score structure.
        n_previous: rollouts per prompt in the previous sample (>= 1).
        seed: an int or a ``numpy.random.Generator``.
        estimator: an unbiased registry estimator.
        model: ``"responses"`` or ``"pass_rate"``.
        prior: the pseudo-count (> 0).
    Returns:
        :class:`PromptConstants` of the plug-in problem (its ``c1`` is the plug-in's).
    """
    n = V.positive_int("n_previous", n_previous)
    prior = V.real_scalar("prior", prior, positive=True)
    if model not in ("responses", "pass_rate"):
        raise ValueError(f"model must be 'responses' or 'pass_rate', got {model!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(
        V.integer("seed", seed, 0))
    st = as_structure(problem)
    pi = np.asarray(st.probs, dtype=np.float64)
    mu = np.asarray(st.reward_means, dtype=np.float64)
    pi = pi / pi.sum(axis=1, keepdims=True)
    counts = np.stack([rng.multinomial(n, row) for row in pi])  # (P, K)
    wins = rng.binomial(counts, np.clip(mu, 0.0, 1.0))
    if model == "responses":
        mu_hat = (wins + prior) / (counts + 2 * prior)
    else:
        p_hat = (wins.sum(axis=1) + prior) / (n + 2 * prior)
        mu_hat = np.broadcast_to(p_hat[:, None], mu.shape).copy()
    hat = dataclasses.replace(st, reward_means=np.asarray(mu_hat))
    return prompt_constants(hat, estimator)


@dataclass(frozen=True)
class Allocation:
    """An allocation of rollouts and its exact MSE (B = 1; divide by B for B prompts).

    Attributes:
        group_sizes: (P,) sizes; a non-integer ``n + t`` (at most one prompt) means ``n + 1``
            responses with probability t, drawn independently of the rewards.
        expected_rollouts: ``m = sum_x f_x G_x``.
        mse: ``c1 + sum_x f_x v_x(G_x)`` (one prompt drawn; unbiased, so all variance).
        budget_mse: ``m * mse``, i.e. ``N MSE`` at a budget of N rollouts (B = N/m).
        constants: the :class:`PromptConstants` the sizes were chosen from.
    """

    group_sizes: np.ndarray
    expected_rollouts: float
    mse: float
    budget_mse: float
    constants: PromptConstants


def _as_constants(problem, estimator) -> PromptConstants:
    if isinstance(problem, PromptConstants):
        return problem
    return prompt_constants(problem, estimator)


def _allocation(c: PromptConstants, sizes) -> Allocation:
    m = c.expected_rollouts(sizes)
    mse = c.mse(sizes)
    return Allocation(np.asarray(sizes, dtype=np.float64), m, mse, m * mse, c)


def _greedy(c: PromptConstants):
    """The greedy path: yields the sizes (int64, updated in place), m and ``sum_x f_x v_x`` at
    every greedy point, from G = 2 on (ties to the lowest prompt index; ends only if every
    prompt has f_x = 0)."""
    f, a, b = c.prompt_probs, c.a, c.b
    G = np.full(c.n_prompts, 2, dtype=np.int64)
    m = 2.0 * float(f.sum())
    var = float(f @ _v(a, b, 2.0))
    heap = [(-float(_gain(a[x], b[x], 2.0)), x) for x in range(c.n_prompts) if f[x] > 0]
    heapq.heapify(heap)
    yield G, m, var
    while heap:
        neg, x = heapq.heappop(heap)
        G[x] += 1
        m += float(f[x])
        var += float(f[x]) * neg  # minus the gain
        heapq.heappush(heap, (-float(_gain(a[x], b[x], float(G[x]))), x))
        yield G, m, var


@float64
def optimal_allocation(problem, expected_rollouts=None, estimator="grpo",
                       max_rollouts: float = 1e6) -> Allocation:
    """The MSE-optimal unbiased allocation (greedy marginal allocation; module docstring).

    Args:
        problem: a policy, DiscreteProblem, score structure or :class:`PromptConstants`.
        expected_rollouts: m, the expected rollouts per prompt drawn (>= 2): the sizes that
            minimise the MSE at that budget (one prompt randomised between n and n + 1 where m
            falls between greedy points). ``None``: m chosen too, minimising ``N MSE``.
        estimator: an unbiased registry estimator (ignored for :class:`PromptConstants`).
        max_rollouts: refuse (``ValueError``) a free-m search that passes this m (``c1 = 0``:
            larger groups are always better).
    Returns:
        :class:`Allocation`.

    Example: a nearly unsolvable prompt and a prompt half its responses solve, 6 rollouts a
    prompt on average; the optimum gives the informative prompt more and beats uniform G = 6:

    >>> import numpy as np
    >>> from grpo_theory import SoftmaxBandit
    >>> from grpo_theory.allocation import optimal_allocation, uniform_allocation
    >>> bandit = SoftmaxBandit(np.zeros((2, 2)), [[0.02, 0.0], [0.0, 1.0]])
    >>> best = optimal_allocation(bandit, 6.0)
    >>> best.group_sizes.tolist()
    [3.0, 9.0]
    >>> round(best.mse / uniform_allocation(bandit, 6.0).mse, 3)
    0.953
    """
    c = _as_constants(problem, estimator)
    if not np.any(c.prompt_probs > 0):
        raise ValueError("problem must give some prompt a positive probability")
    if expected_rollouts is None:
        best, best_G = np.inf, None
        for G, m, var in _greedy(c):
            val = m * (c.c1 + var)
            if val < best:
                best, best_G = val, G.copy()
            if c.c1 * m >= best:  # N MSE >= c1 m: no later point can be better
                break
            if m > max_rollouts:
                raise ValueError(f"the budget-optimal m passes max_rollouts={max_rollouts} "
                                 f"(c1 = {c.c1!r}): larger groups keep lowering N MSE")
        return _allocation(c, best_G.astype(np.float64))
    m_target = V.real_scalar("expected_rollouts", expected_rollouts)
    tol = 1e-12 * max(1.0, m_target)
    if m_target < 2.0 * float(c.prompt_probs.sum()) - tol:
        raise ValueError(f"expected_rollouts must be >= 2 (every prompt gets at least 2), got "
                         f"{m_target!r}")
    prev, m_prev = None, None
    for G, m, _ in _greedy(c):
        if m >= m_target - tol:
            if prev is None or m - m_target <= tol:
                return _allocation(c, G.astype(np.float64))
            x = int(np.flatnonzero(G != prev)[0])
            sizes = prev.astype(np.float64)
            sizes[x] += (m_target - m_prev) / c.prompt_probs[x]
            return _allocation(c, sizes)
        prev, m_prev = G.copy(), m


@float64
def uniform_allocation(problem, expected_rollouts, estimator="grpo") -> Allocation:
    """Every prompt gets ``m`` responses (a non-integer m: ``floor(m)`` or ``floor(m) + 1`` at
    random, independently of the rewards); the fixed-G baseline at matched rollouts.

    Args:
        problem: a policy, DiscreteProblem, score structure or :class:`PromptConstants`.
        expected_rollouts: m >= 2.
        estimator: an unbiased registry estimator.
    Returns:
        :class:`Allocation`.
    """
    c = _as_constants(problem, estimator)
    m = V.real_scalar("expected_rollouts", expected_rollouts)
    if m < 2:
        raise ValueError(f"expected_rollouts must be >= 2, got {m!r}")
    return _allocation(c, np.full(c.n_prompts, m))


def greedy_allocation(a, b, total: int, min_group_size: int = 2) -> np.ndarray:
    """Integer sizes minimising ``sum_i a_i/G_i + b_i/(G_i(G_i - 1))`` with ``sum_i G_i = total``.

    The batch view: B given prompts (one entry each, repeats allowed), equal weights. Greedy
    marginal allocation is the exact integer optimum here (module docstring).

    Args:
        a, b: (B,) non-negative constants (e.g. a :class:`PromptConstants`' ``a[x_b]``).
        total: the total rollouts N (>= ``min_group_size * B``).
        min_group_size: the smallest size (>= 2).
    Returns:
        (B,) int64 sizes.
    """
    a = V.real_array("a", a, ndim=1)
    b = V.real_array("b", b, ndim=1)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have one shape, got {a.shape} and {b.shape}")
    if np.any(a < 0) or np.any(b < 0):
        raise ValueError("a and b must be >= 0 (variances)")
    lo = V.integer("min_group_size", min_group_size, 2)
    N = V.integer("total", total, lo * a.size)
    G = np.full(a.size, lo, dtype=np.int64)
    heap = [(-float(_gain(a[i], b[i], float(lo))), i) for i in range(a.size)]
    heapq.heapify(heap)
    for _ in range(N - lo * a.size):
        _, i = heapq.heappop(heap)
        G[i] += 1
        heapq.heappush(heap, (-float(_gain(a[i], b[i], float(G[i]))), i))
    return G


@dataclass(frozen=True)
class OptimalAllocation(Rule):
    """The MSE-optimal unbiased allocation as a rollout rule, ``rollouts`` a prompt on average.

    In a training step the B prompts of the batch share ``rollouts B`` responses in sizes
    ``[2, max_group]`` that minimise ``sum_b a_b/G_b + b_b/(G_b (G_b - 1))``, with ``(a_b, b_b)``
    from the loop's sampler (:meth:`~grpo_theory.core.rollout_rules.Sampler.mse_constants`, which
    may read the sampler's state; :meth:`~grpo_theory.core.rollout_rules.Sampler.observe` updates
    it after the step). The exact audit allocates ``rollouts P`` over the problem's P prompts
    with their exact constants (:func:`prompt_constants`). No current sample decides a size: the
    leave-one-out estimate stays unbiased per prompt.
    """

    rollouts: int = 4
    max_group: int = 16
    reads_state = True

    def horizon(self) -> int:
        return self.max_group

    def decide(self, t, n1):
        raise ValueError(f"rule {self.name!r} decides from the prompts' constants before "
                         "sampling, not from counts: its exact route is per_prompt(sizes)")

    def sizes(self, a, b, budget: int) -> np.ndarray:
        """Sizes (n,) in ``[2, max_group]`` summing to ``budget`` for constants ``a, b``."""
        from .steps import optimal_sizes

        return np.asarray(optimal_sizes(jnp.asarray(a, jnp.float64), jnp.asarray(b, jnp.float64),
                                        int(budget), self.max_group))

    def prompt_moments(self, structure, estimator, normaliser: str):
        c = prompt_constants(structure, estimator)
        sizes = self.sizes(c.a, c.b, self.rollouts * c.n_prompts)
        return per_prompt(sizes).prompt_moments(structure, estimator, normaliser)

    def step(self, key, sampler, batch_size, state):
        from .steps import optimal_sizes

        W = self.max_group
        d = sampler.draw(key, batch_size, W)
        a, b = sampler.mse_constants(d.x, state)
        n = optimal_sizes(a, b, self.rollouts * batch_size, W)
        mask = mask_from_sizes(n, W, d.z.dtype)
        return Step(d, mask, jnp.sum(n), sampler.observe(state, d, mask))


def optimal_rule(rollouts: int = 4, max_group: int = 16) -> OptimalAllocation:
    """An :class:`OptimalAllocation` rule.

    Args:
        rollouts: m >= 2, the responses a prompt on average.
        max_group: the largest group, ``>= rollouts``.

    Returns:
        The rule, named ``"optimal(m=..,max=..)"``.
    """
    m = V.integer("rollouts", rollouts, 2)
    hi = V.integer("max_group", max_group, m)
    return OptimalAllocation(f"optimal(m={m},max={hi})", m, hi)


@dataclass(frozen=True)
class PlugInResult:
    """The exact MSE of allocations chosen from noisy plug-in constants, over their draws.

    Attributes:
        mse: :class:`~grpo_theory.core.stats.Estimate` of ``E_draws[mse(G_hat)]`` (the MSE is
            exact given the chosen sizes; the mean over draws is Monte Carlo).
        ratio: Estimate of ``E_draws[mse(G_hat)] / mse(G_opt)`` (``>= 1``).
        oracle: the optimal allocation with the true constants at the same m.
        uniform: the uniform allocation at the same m.
        draws: (n_draws,) exact MSEs, one per plug-in draw.
    """

    mse: Estimate
    ratio: Estimate
    oracle: Allocation
    uniform: Allocation
    draws: np.ndarray


@float64
def plug_in_mse(problem, expected_rollouts, n_previous: int, n_draws: int = 200, seed=0,
                estimator="grpo", model: str = "responses") -> PlugInResult:
    """The MSE of the optimal allocation when its constants are estimated (Monte Carlo).

    Each draw estimates the constants from an independent previous sample
    (:func:`estimated_constants`), allocates optimally at ``expected_rollouts`` with them
    (:func:`optimal_allocation`) and scores the chosen sizes with the true constants exactly.

    Args:
        problem: a policy, DiscreteProblem or score structure.
        expected_rollouts: m per prompt drawn (>= 2).
        n_previous: rollouts per prompt of each previous sample.
        n_draws: independent previous samples (>= 2).
        seed: an int (one NumPy generator for every draw).
        estimator, model: as in :func:`estimated_constants`.
    Returns:
        :class:`PlugInResult`.
    """
    n_draws = V.positive_int("n_draws", n_draws, 2)
    true = prompt_constants(problem, estimator)
    opt = optimal_allocation(true, expected_rollouts)
    rng = np.random.default_rng(V.integer("seed", seed, 0))
    st = as_structure(problem)
    vals = np.empty(n_draws)
    for i in range(n_draws):
        hat = estimated_constants(st, n_previous, rng, estimator, model)
        sizes = optimal_allocation(hat, opt.expected_rollouts).group_sizes
        vals[i] = true.mse(sizes)
    return PlugInResult(estimate_mean(vals), estimate_mean(vals / opt.mse), opt,
                        uniform_allocation(true, opt.expected_rollouts), vals)
