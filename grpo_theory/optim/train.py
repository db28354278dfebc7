r"""Algorithm 1 (stochastic policy-gradient ascent with group baselines) on enumerable policies.

Each step ``t = 1..n`` draws B prompts ``x_b ~ f`` and G responses ``y_bg ~ pi_theta(.|x_b)`` with
Bernoulli rewards (:func:`grpo_theory.montecarlo.sample_groups`), forms the estimator's gradient
estimate ``ghat_t = (1/BG) sum_bg s_bg A_bg`` (:func:`grpo_theory.montecarlo.estimate_gradient`,
any registry estimator) and ascends

.. math:: \theta_t = \theta_{t-1} + \eta_t \hat g_t, \qquad
          \eta_t = \beta \ (\text{constant}) \quad\text{or}\quad \eta_t = \beta / (t + t_0)\ (\text{inverse}).

The loop is a ``lax.scan`` over steps, ``vmap``-ed over seeds and ``jit``-compiled; seed ``s`` uses
the key ``PRNGKey(s)`` folded with the step index, so a seed's run does not depend on which other
seeds run with it. At every logged step the *exact* objective ``J(theta) = E_X V(X)`` and the
suboptimality gap ``Delta = sup J - J(theta)`` (Lemma 6, Theorem 8) are recorded.

``sup J``: for a tabular :class:`~grpo_theory.policies.SoftmaxBandit` every deterministic response
map is a limit of the parametrisation, so ``sup J = E_X max_y mu(X, y)`` (attained only at infinity).
The same holds for a :class:`~grpo_theory.policies.SequencePolicy` (the next-token table conditions
on prompt, position and previous token, so any single sequence per prompt can be made
deterministic). For a :class:`~grpo_theory.policies.LinearSoftmaxBandit` (shared parameters) the
supremum is found numerically (:func:`max_objective`), which is exact when the maximiser is
interior; pass ``max_objective=`` to :func:`train` to override.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from ..core.estimators import get_estimator
from ..core.montecarlo import estimate_gradient, sample_groups
from ..core.policies import LinearSoftmaxBandit, SequencePolicy, SoftmaxBandit

__all__ = ["TrainResult", "train", "train_schedules", "max_objective", "exact_objective",
           "maximise", "step_sizes", "SCHEDULES"]

SCHEDULES = ("constant", "inverse")


def exact_objective(policy, params=None) -> jnp.ndarray:
    """J(theta) = sum_x f(x) sum_y pi_theta(y|x) mu(x, y), exactly (traceable)."""
    theta = policy.params if params is None else params
    probs = policy.probs(theta)
    return jnp.dot(jnp.asarray(policy.prompt_probs),
                   jnp.sum(probs * jnp.asarray(policy.reward_means), axis=1))


def maximise(fn, theta0, n_starts: int = 4, scale: float = 1.0, seed: int = 0):
    """Maximise a smooth scalar ``fn(theta)`` (jax-traceable) with L-BFGS from several starts.

    Starts at ``theta0`` and ``n_starts - 1`` Gaussian perturbations of it (std ``scale``).
    Returns ``(theta_max, fn(theta_max))`` as NumPy/float. Used for the exact maximisers of
    objectives on shared-parameter bandits (e.g. Proposition 13's E[2 arcsin sqrt V]).
    """
    from scipy.optimize import minimize

    theta0 = np.asarray(theta0, dtype=np.float64)
    shape = theta0.shape
    val_grad = jax.jit(jax.value_and_grad(lambda th: -fn(th.reshape(shape))))

    def f(th):
        v, g = val_grad(jnp.asarray(th))
        return float(v), np.asarray(g, dtype=np.float64)

    rng = np.random.default_rng(seed)
    starts = [theta0.ravel()] + [theta0.ravel() + scale * rng.standard_normal(theta0.size)
                                 for _ in range(max(0, n_starts - 1))]
    best = None
    for s in starts:
        res = minimize(f, s, jac=True, method="L-BFGS-B", options=dict(maxiter=2000, gtol=1e-12))
        if best is None or res.fun < best.fun:
            best = res
    return best.x.reshape(shape), float(-best.fun)


def max_objective(policy) -> float:
    """sup_theta J(theta) (see module docstring for how it is obtained per policy type)."""
    if isinstance(policy, (SoftmaxBandit, SequencePolicy)):
        mu = np.asarray(policy.reward_means)
        return float(np.asarray(policy.prompt_probs) @ mu.max(axis=1))
    if isinstance(policy, LinearSoftmaxBandit):
        _, val = maximise(lambda th: exact_objective(policy, th), policy.params, n_starts=6,
                          scale=2.0)
        return val
    raise ValueError(
        "policy must be a SoftmaxBandit, LinearSoftmaxBandit or SequencePolicy, "
        f"got {type(policy).__name__}"
    )


_max_objective = max_objective  # train() has an argument of the same name


def step_sizes(eta: float, n_steps: int, schedule: str = "constant", offset: float = 0.0):
    """eta_t for t = 1..n: ``eta`` (constant) or ``eta / (t + offset)`` (inverse)."""
    t = np.arange(1, n_steps + 1, dtype=np.float64)
    if schedule == "constant":
        return np.full(n_steps, float(eta))
    return float(eta) / (t + offset)


@dataclass(frozen=True)
class TrainResult:
    """Training trajectories for S seeds logged at L steps (step 0 = initial parameters)."""

    steps: np.ndarray  # (L,)
    objective: np.ndarray  # (S, L) exact J(theta_t)
    gap: np.ndarray  # (S, L) sup J - J(theta_t)
    theta_final: np.ndarray  # (S, *param_shape)
    sup_objective: float
    seeds: np.ndarray  # (S,)
    params: np.ndarray | None = None  # (S, L, *param_shape) when log_params=True
    config: dict = field(default_factory=dict)

    @property
    def final_gap(self) -> np.ndarray:
        """Delta_n for each seed, shape (S,)."""
        return self.gap[:, -1]


@partial(jax.jit, static_argnames=("policy", "est", "batch_size", "group_size", "n_logs",
                                   "log_every", "log_params"))
def _train(policy, est, theta0, seeds, etas, offsets, constant, sup, *, batch_size, group_size,
           n_logs, log_every, log_params):
    """vmap over runs r = (seed, eta, offset, constant?) of the scanned Algorithm 1."""
    shape = theta0.shape

    def one_run(seed, eta, offset, is_const):
        key = jax.random.PRNGKey(seed)

        def step(theta, t):
            problem = policy.problem(theta)
            x, y, z = sample_groups(jax.random.fold_in(key, t), problem, batch_size, group_size)
            ghat = estimate_gradient(problem, est, x, y, z).reshape(shape)
            lr = jnp.where(is_const, eta, eta / (t + offset))
            return theta + lr * ghat, None

        def block(theta, i):
            ts = i * log_every + 1 + jnp.arange(log_every)
            theta, _ = jax.lax.scan(step, theta, ts)
            return theta, (exact_objective(policy, theta), theta if log_params else 0.0)

        theta_n, (objs, thetas) = jax.lax.scan(block, theta0, jnp.arange(n_logs))
        objs = jnp.concatenate([exact_objective(policy, theta0)[None], objs])
        if log_params:
            thetas = jnp.concatenate([theta0[None], thetas])
        return theta_n, objs, thetas

    theta_n, objs, thetas = jax.vmap(one_run)(seeds, etas, offsets, constant)
    return theta_n, objs, sup - objs, thetas


def _check_schedule(schedule, eta, offset):
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if not (np.isfinite(eta) and eta >= 0):
        raise ValueError(f"eta must be a finite number >= 0, got {eta!r}")
    if not (np.isfinite(offset) and offset > -1):
        raise ValueError(f"offset must be a finite number > -1 (so eta_1 is finite), got {offset!r}")


def train(policy, estimator, batch_size: int, group_size: int, n_steps: int, eta: float = 0.1,
          schedule: str = "constant", seeds=(0,), log_every: int = 1, offset: float = 0.0,
          max_objective: float | None = None, params=None, log_params: bool = False
          ) -> TrainResult:
    """Run Algorithm 1 for every seed in ``seeds`` (vmapped) and log the exact gap.

    ``policy``: a SoftmaxBandit, LinearSoftmaxBandit or SequencePolicy (training starts at
    ``params`` or the policy's own parameters). ``estimator``: registry name or Estimator.
    ``schedule``: ``"constant"`` (eta_t = eta) or ``"inverse"`` (eta_t = eta / (t + offset)).
    ``log_every`` must divide ``n_steps``. Returns a :class:`TrainResult`.
    """
    return train_schedules(policy, estimator, batch_size, group_size, n_steps,
                           [(schedule, eta, offset)], seeds, log_every, max_objective, params,
                           log_params)[0]


def train_schedules(policy, estimator, batch_size: int, group_size: int, n_steps: int,
                    schedules, seeds=(0,), log_every: int = 1, max_objective=None, params=None,
                    log_params: bool = False) -> list[TrainResult]:
    """Like :func:`train` for several step-size schedules at once (one compilation).

    ``schedules``: a list of ``(schedule, eta, offset)``; every schedule runs every seed (the same
    keys, so schedules are compared on common random numbers). Returns one TrainResult each.
    """
    if not isinstance(policy, (SoftmaxBandit, LinearSoftmaxBandit, SequencePolicy)):
        raise ValueError(
            "policy must be a SoftmaxBandit, LinearSoftmaxBandit or SequencePolicy, "
            f"got {type(policy).__name__}"
        )
    est = get_estimator(estimator)
    B = V.positive_int("batch_size", batch_size, 1)
    G = V.positive_int("group_size", group_size, max(1, est.min_group_size))
    n = V.positive_int("n_steps", n_steps, 1)
    every = V.positive_int("log_every", log_every, 1)
    if n % every:
        raise ValueError(f"log_every must divide n_steps={n}, got {every}")
    if len(schedules) == 0:
        raise ValueError("schedules must hold at least one (schedule, eta, offset)")
    for sch in schedules:
        if len(sch) != 3:
            raise ValueError(f"schedules entries must be (schedule, eta, offset), got {sch!r}")
        _check_schedule(*sch)
    seeds = np.atleast_1d(np.asarray(seeds))
    if seeds.ndim != 1 or seeds.size == 0 or not np.issubdtype(seeds.dtype, np.integer) or (
            seeds < 0).any():
        raise ValueError(f"seeds must be a non-empty 1-d sequence of integers >= 0, got {seeds!r}")
    theta0 = jnp.asarray(policy.params if params is None else
                         V.finite_array("params", params), dtype=jnp.float64)
    if theta0.shape != jnp.shape(policy.params):
        raise ValueError(f"params must have shape {jnp.shape(policy.params)}, got {theta0.shape}")
    sup = _max_objective(policy) if max_objective is None else float(max_objective)
    S, C = seeds.size, len(schedules)
    etas = np.repeat([float(e) for _, e, _ in schedules], S)
    offs = np.repeat([float(o) for _, _, o in schedules], S)
    const = np.repeat([s == "constant" for s, _, _ in schedules], S)
    theta_n, objs, gaps, thetas = _train(
        policy, est, theta0, jnp.asarray(np.tile(seeds, C), dtype=jnp.uint32), jnp.asarray(etas),
        jnp.asarray(offs), jnp.asarray(const), jnp.float64(sup), batch_size=B, group_size=G,
        n_logs=n // every, log_every=every, log_params=bool(log_params))
    theta_n, objs, gaps = (np.asarray(a) for a in (theta_n, objs, gaps))
    thetas = np.asarray(thetas) if log_params else None
    out = []
    for c, (sch, eta, off) in enumerate(schedules):
        sl = slice(c * S, (c + 1) * S)
        out.append(TrainResult(
            steps=np.arange(0, n + 1, every), objective=objs[sl], gap=gaps[sl],
            theta_final=theta_n[sl], sup_objective=float(sup), seeds=seeds,
            params=thetas[sl] if log_params else None,
            config=dict(estimator=est.name, batch_size=B, group_size=G, n_steps=n,
                        eta=float(eta), schedule=sch, offset=float(off), log_every=every)))
    return out


from .._precision import scope_module as _scope  # noqa: E402

_scope(globals())
