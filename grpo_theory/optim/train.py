r"""Algorithm 1 (stochastic policy-gradient ascent with group baselines): one training loop.

Each step ``t = 1..n`` draws B prompts ``x_b ~ f`` and G responses ``y_bg ~ pi_theta(.|x_b)`` with
Bernoulli rewards (:func:`grpo_theory.core.sampling.sample_groups`), forms the estimator's
gradient estimate ``ghat_t = (1/BG) sum_bg w(x_b, y_bg) A_bg s(x_b, y_bg)`` (``w = 1`` unless
the problem weights responses) and ascends

.. math:: \theta_t = \theta_{t-1} + \eta_t \hat g_t, \qquad
          \eta_t = \beta \ (\text{constant}) \quad\text{or}\quad \eta_t = \beta / (t + t_0)\ (\text{inverse}).

**One loop** (purejaxrl style): :func:`make_train` ``(problem, estimator, config) -> train(key)``
with a frozen, hashable :class:`TrainConfig`; the body is a ``lax.scan`` over steps inside one
module-level ``jax.jit``, and ``jax.vmap(train)(keys)`` runs seeds in parallel
(:func:`train_batch` is the vmapped form every wrapper and companion uses). The problem is a
*traced* pytree argument (its arrays are leaves, shapes and integers static), so equal configs
and problems of equal shapes, e.g. every member of a problem family, share one compilation.
The update is an optax ``GradientTransformation`` applied to the loss gradient ``-ghat``:
:func:`ascent` (``optax.sgd``) with the step-size schedule as an optax schedule
(:func:`schedule`), or ``TrainConfig(optimizer=...)``. Step ``t`` uses ``fold_in(key, t)``, so a seed's
run does not depend on which other seeds run with it.

**The variant is one static value**, the config: the estimator, the clipping (``epochs``,
``clip_eps``) and the rollout rule (``TrainConfig(rule=...)``: any
:class:`~grpo_theory.core.rollout_rules.RolloutRule`, e.g. DAPO's dynamic sampling or the
MSE-optimal allocation, draws with the problem's
:class:`~grpo_theory.core.rollout_rules.ProblemSampler` and keeps groups of unequal size; the
estimate is the mean over kept prompts of the estimator's masked advantages). At the logged steps
the *exact* objective
``J(theta) = E_X V(X)`` and the suboptimality gap ``Delta = sup J - J(theta)`` (Lemma 6,
Theorem 8) are recorded, and the running maximum of ``Delta`` over every step.

**The problem contract.** ``problem`` is one of the two contracts of
:mod:`grpo_theory.core.policy` (the one type test, at the entry):

* an :class:`~grpo_theory.core.policy.EnumerablePolicy`: ``params`` (the initial parameters)
  and ``problem(params) -> DiscreteProblem`` (exact arrays, traceable), e.g.
  :class:`~grpo_theory.core.policies.SoftmaxBandit`,
  :class:`~grpo_theory.core.policies.LinearSoftmaxBandit`,
  :class:`~grpo_theory.core.policies.SequencePolicy`,
  :class:`~grpo_theory.companions.mlp_policy.MLPSequencePolicy`; its hooks
  ``response_weights(dp) -> (P, K)`` weights ``w(x, y)`` of the per-response terms (default
  none) and ``step_record(dp, x, y, z, adv) -> pytree`` recorded at every step before the
  update (default none), as a :class:`~grpo_theory.core.policy.PolicyWrapper` adds them;
* a :class:`~grpo_theory.core.policy.GradientProblem`: a JAX pytree of arrays (traced, e.g.
  :class:`~grpo_theory.optim.theory.GaussianBandit`) with ``params``, ``objective(params)``,
  ``sample_gradient(key, params, estimator, batch_size, group_size)``, ``max_objective()``
  and ``objective_and_gap(params, sup)``.

The MSE-optimal prompt baseline (``estimator="optimal"``) is computed from the exact arrays at
the current parameters, ``b*(x) = E[||s||^2 Z | x] / E[||s||^2 | x]`` (Greensmith et al.;
:meth:`DiscreteProblem.optimal_baselines`), never ``V(x)``; with response weights it stays this
registry definition (the weighted estimator's own optimum would weight by ``w^2``).

``sup J``: for a tabular :class:`SoftmaxBandit` every deterministic response map is a limit of
the parametrisation, so ``sup J = E_X max_y mu(X, y)`` (attained only at infinity); the same holds
for a :class:`SequencePolicy` (the next-token table conditions on prompt, position and previous
token). For a :class:`LinearSoftmaxBandit` (shared parameters) the supremum is found numerically
(:func:`max_objective`), exact when the maximiser is interior; ``make_train(...,
sup_objective=)`` overrides it. Other enumerable policies (the MLP) use the best-response
value ``E_X max_y mu`` (an upper bound). Each is the policy's own ``max_objective()``.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .. import _validation as V
from .._precision import float64
from ..core import (EnumerablePolicy, GradientProblem, ProblemSampler, PromptContext,
                    exact_objective, get_estimator, kept_weights, sample_groups)
from .clipped import clipped_surrogate, multi_epoch_update
from .objective import max_objective
from .schedules import SCHEDULE_NAMES, ascent, check_schedule, schedule
from .train_types import TrainConfig, TrainResult


_max_objective = max_objective  # train() has an argument of the same name


# --- the loop ----------------------------------------------------------------------------------


def _optimizer(cfg, lr, offset, sched):
    """The loop's optax transformation: ``cfg.optimizer``, or :func:`ascent` with the schedule."""
    if cfg.optimizer is not None:
        return cfg.optimizer
    if callable(cfg.schedule):
        count_dtype = jnp.arange(1).dtype  # optax counts in int32; the schedule sees int64 (x64)
        fn = lambda count: jnp.asarray(cfg.schedule(count.astype(count_dtype)),  # noqa: E731
                                       dtype=jnp.float64)
    else:
        fn = schedule(sched, lr, offset)
    if cfg.epochs > 1:  # optax counts epochs: every epoch of step t gets eta_t
        return ascent(lambda count: fn(count // cfg.epochs))
    return ascent(fn)


def _enumerable_step(problem, est, cfg, key, theta, state=None):
    """One sampled gradient at theta; returns (ghat, J(theta), record, batch, next state).

    ``state`` is a stateful estimator's carried state (a history baseline's tracker), read by
    the advantage and updated after the step (:meth:`Estimator.next_state`)."""
    dp = problem.problem(theta)
    B, G = cfg.batch_size, cfg.group_size
    x, y, z = sample_groups(key, dp, B, G)
    vals = dp.values()
    w = problem.response_weights(dp)
    bstar = dp.optimal_baselines()[x] if "optimal_baseline" in est.needs else None
    sq = (jnp.sum(dp.scores**2, axis=-1)[x[:, None], y] if "score_sq" in est.needs
          else None)  # per-response weights (e.g. norm_weighted)
    ctx = PromptContext(prompt=x, value=vals[x], optimal_baseline=bstar, score_sq=sq,
                        state=state)
    adv = est.advantage(z, ctx)
    coef = adv if w is None else adv * w[x[:, None], y]
    ghat = jnp.einsum("bg,bgd->d", coef, dp.scores[x[:, None], y]) / (B * G)
    rec = problem.step_record(dp, x, y, z, adv)
    return ghat, dp.objective(), rec, (x, y, coef / (B * G)), est.next_state(state, x, z, ctx)


def _rule_step(problem, est, cfg, key, theta, state):
    """One step under ``cfg.rule``: ``(ghat, J(theta), record, batch, next state, rollouts)``.

    The rule draws with the problem's sampler and keeps ``mask``; the estimate is
    ``sum_bg w_bg s(x_b, y_bg)`` with ``w_bg = m_bg A_bg / (n_b |K|)`` and ``A`` the estimator's
    masked advantage (:mod:`grpo_theory.core.rollout_rules`); ``state`` is the sampler's."""
    dp = problem.problem(theta)
    st = cfg.rule.step(key, ProblemSampler(dp), cfg.batch_size, state)
    x, y, z = st.draw.x, st.draw.y, st.draw.z
    ctx = PromptContext(
        prompt=x, value=dp.values()[x] if "value" in est.needs else None,
        optimal_baseline=dp.optimal_baselines()[x] if "optimal_baseline" in est.needs else None)
    adv = est.masked_advantage(z, st.mask, ctx)
    coef, _ = kept_weights(adv, st.mask)
    w = problem.response_weights(dp)
    if w is not None:
        coef = coef * w[x[:, None], y]
    ghat = jnp.einsum("bg,bgd->d", coef, dp.scores[x[:, None], y])
    rec = problem.step_record(dp, x, y, z, adv * st.mask)
    return ghat, dp.objective(), rec, (x, y, coef), st.state, st.rollouts


def _clipped_step(problem, tx, cfg, theta, opt_state, batch):
    """``cfg.epochs`` optax steps on the clipped surrogate of the sampled responses."""
    x, y, weight = batch
    lp = problem.log_probs
    old = jax.lax.stop_gradient(lp(theta)[x[:, None], y])
    eps = jnp.inf if cfg.clip_eps is None else cfg.clip_eps

    def objective(q):
        return jnp.sum(clipped_surrogate(jnp.exp(lp(q)[x[:, None], y] - old), weight, eps))

    return multi_epoch_update(tx, theta, opt_state, objective, cfg.epochs)


def _run_one(key, theta0, problem, sup, lr, offset, sched, *, est, cfg, enumerable):
    """Algorithm 1 for one key: ``lax.scan`` over steps t = 1..n (see module docstring).

    ``problem`` is a traced pytree (its arrays are leaves), so problems with equal shapes and
    static data share one compilation; ``enumerable`` (static) says which contract it follows.
    """
    n, shape = cfg.n_steps, theta0.shape
    steps = cfg.logged_steps
    slots = np.full(n + 1, -1, dtype=np.int32)
    slots[list(steps)] = np.arange(len(steps))
    slots = jnp.asarray(slots)
    n_log = len(steps)
    tx = _optimizer(cfg, lr, offset, sched)

    def objective_gap(theta):
        if enumerable:
            j = exact_objective(problem, theta)
            return j, sup - j
        return problem.objective_and_gap(theta, sup)

    def log(buf, i, val):
        return jnp.where(slots[i] >= 0, buf.at[jnp.maximum(slots[i], 0)].set(val), buf)

    def step(carry, t):
        theta, opt_state, jbuf, gbuf, pbuf, rbuf, spent, mx, est_state = carry
        k = jax.random.fold_in(key, t)
        if cfg.rule is not None:
            ghat, j, rec, batch, est_state, n_t = _rule_step(problem, est, cfg, k, theta,
                                                             est_state)
            g = sup - j
        elif enumerable:
            ghat, j, rec, batch, est_state = _enumerable_step(problem, est, cfg, k, theta,
                                                              est_state)
            g, n_t = sup - j, cfg.batch_size * cfg.group_size
        else:
            ghat = problem.sample_gradient(k, theta, est, cfg.batch_size, cfg.group_size)
            j, g = objective_gap(theta)
            rec, n_t = None, cfg.batch_size * cfg.group_size
        # J, the gap and the rollouts spent before theta_(t-1), the parameters this step starts
        # from
        jbuf, gbuf, rbuf = log(jbuf, t - 1, j), log(gbuf, t - 1, g), log(rbuf, t - 1, spent)
        spent = spent + n_t
        if cfg.log_params:
            pbuf = log(pbuf, t - 1, theta)
        if enumerable and cfg.clipped:
            theta, opt_state = _clipped_step(problem, tx, cfg, theta, opt_state, batch)
        else:
            updates, opt_state = tx.update(-ghat.reshape(shape), opt_state, theta)  # loss = -J
            theta = optax.apply_updates(theta, updates)
        return (theta, opt_state, jbuf, gbuf, pbuf, rbuf, spent, jnp.maximum(mx, g),
                est_state), rec

    zeros = jnp.zeros(n_log)
    pbuf = jnp.zeros((n_log, *shape)) if cfg.log_params else jnp.zeros(())
    if est.stateful and not enumerable:
        raise ValueError(f"estimator {est.name!r} carries a state across steps: training takes "
                         "it on enumerable policies only (the Gaussian bandit samples gradients)")
    if cfg.rule is not None:  # the carried state is the rule's sampler's
        est_state = ProblemSampler(problem.problem(theta0)).init_state()
    else:
        est_state = est.initial_state(problem.problem(theta0).n_prompts) if est.stateful else None
    init = (theta0, tx.init(theta0), zeros, zeros, pbuf, zeros, jnp.zeros(()), -jnp.inf,
            est_state)
    (theta, _, jbuf, gbuf, pbuf, rbuf, spent, mx, _), recs = jax.lax.scan(
        step, init, jnp.arange(1, n + 1))
    j, g = objective_gap(theta)  # theta_n
    jbuf, gbuf, rbuf = log(jbuf, n, j), log(gbuf, n, g), log(rbuf, n, spent)
    if cfg.log_params:
        pbuf = log(pbuf, n, theta)
    return dict(objective=jbuf, gap=gbuf, max_gap=jnp.maximum(mx, g), theta_final=theta,
                params=pbuf if cfg.log_params else None, records=recs, rollouts=rbuf)


_run = jax.jit(_run_one, static_argnames=("est", "cfg", "enumerable"))


@partial(jax.jit, static_argnames=("est", "cfg", "enumerable"))
def _run_batch(keys, theta0, problem, sup, lr, offset, sched, *, est, cfg, enumerable):
    """``vmap`` of :func:`_run_one` over runs (keys and step-size settings)."""
    return jax.vmap(lambda k, l, o, s: _run_one(k, theta0, problem, sup, l, o, s, est=est,
                                                cfg=cfg, enumerable=enumerable)
                    )(keys, lr, offset, sched)


class _Prepared:
    """Validated pieces of a (problem, estimator, config) triple shared by the entry points."""

    def __init__(self, problem, estimator, config, sup_objective=None):
        if not isinstance(config, TrainConfig):
            raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
        if not isinstance(problem, (EnumerablePolicy, GradientProblem)):
            raise ValueError(
                "problem must be an enumerable policy (an EnumerablePolicy) or a GradientProblem "
                "(params, objective(params) and sample_gradient(key, params, estimator, "
                f"batch_size, group_size)), got {type(problem).__name__}")
        self.problem = problem
        self.enumerable = isinstance(problem, EnumerablePolicy)
        if config.clipped and not self.enumerable:
            raise ValueError("epochs > 1 and clip_eps need an enumerable policy (its "
                             "log-probabilities give the ratios), got "
                             f"{type(problem).__name__}")
        self.est = get_estimator(estimator)
        if config.rule is None:
            V.group_run(self.est, config.group_size, config.batch_size)
        else:
            if not self.enumerable:
                raise ValueError(f"rule {config.rule.name!r} needs an enumerable policy (the "
                                 "rule draws responses), got " + type(problem).__name__)
            if not self.est.rewards_only:
                raise ValueError(
                    f"estimator {self.est.name!r} reads the whole batch, per-response weights or "
                    "a state: under a rollout rule the loop trains estimators whose advantages "
                    "read the kept group's rewards (and prompt constants) only")
            if self.est.masked is None:
                self.est.masked_advantage(None, None)  # raises, naming the missing piece
        self.cfg = config
        self.theta0 = jnp.asarray(problem.params, dtype=jnp.float64)
        if sup_objective is None:
            sup_objective = max_objective(problem)
        sup = float(sup_objective)
        if not np.isfinite(sup):
            raise ValueError(f"sup_objective must be a finite number, got {sup_objective!r}")
        self.sup = sup

    def initial(self, params):
        if params is None:
            return self.theta0
        th = jnp.asarray(V.finite_array("params", params), dtype=jnp.float64)
        if th.shape != self.theta0.shape:
            raise ValueError(f"params must have shape {self.theta0.shape}, got {th.shape}")
        return th

    def step_args(self, schedule=None, lr=None, offset=None):
        cfg = self.cfg
        schedule = cfg.schedule if schedule is None else schedule
        idx = 0 if callable(schedule) else SCHEDULE_NAMES.index(schedule)
        return (cfg.lr if lr is None else float(lr), cfg.offset if offset is None
                else float(offset), idx)


def _as_key(key):
    if isinstance(key, (jax.Array, np.ndarray)) and key.ndim >= 1 or jax.dtypes.issubdtype(
            getattr(key, "dtype", np.int64), jax.dtypes.prng_key):
        return key
    return V.seed_key(key)


@float64
def make_train(problem, estimator, config: TrainConfig, *, sup_objective=None):
    """Build Algorithm 1 for a problem: ``train = make_train(...)``; ``train(key)`` runs it.

    Args:
        problem: an enumerable policy or a generic problem (see the module docstring).
        estimator: a registry name or an :class:`~grpo_theory.core.estimators.Estimator`.
        config: a :class:`TrainConfig`.
        sup_objective: ``sup J`` for the gap (default :func:`max_objective`).
    Returns:
        ``train(key, params=None) -> TrainResult``: ``key`` is a JAX key or an integer seed
        (:func:`grpo_theory._validation.seed_key`), ``params`` overrides the initial parameters.
        ``jax.vmap(train)(keys)`` runs seeds in parallel; equal configs and problems of equal
        shapes share one compilation.

    Examples:
        Ten steps of GRPO on a one-prompt bandit whose first response is the correct one:

        >>> from grpo_theory.core import SoftmaxBandit
        >>> from grpo_theory.optim import TrainConfig, make_train
        >>> bandit = SoftmaxBandit([[0.0, 0.0]], [[1.0, 0.0]])
        >>> config = TrainConfig(batch_size=1, group_size=4, n_steps=10, lr=0.5)
        >>> result = make_train(bandit, "grpo", config)(0)
        >>> result.steps.tolist()
        [0, 10]
        >>> round(float(result.objective[0]), 3), bool(result.objective[-1] > 0.5)
        (0.5, True)
    """
    prep = _Prepared(problem, estimator, config, sup_objective)
    cfg_static = config._static()
    lr, offset, idx = prep.step_args()

    @float64
    def train(key, params=None) -> TrainResult:
        out = _run(_as_key(key), prep.initial(params), prep.problem, prep.sup, lr, offset, idx,
                   est=prep.est, cfg=cfg_static, enumerable=prep.enumerable)
        return TrainResult(steps=np.asarray(config.logged_steps), sup_objective=prep.sup,
                           config=config, **out)

    train.config = config
    return train


@float64
def train_batch(problem, estimator, config: TrainConfig, keys, *, params=None,
                sup_objective=None, schedules=None) -> TrainResult:
    """Algorithm 1 once per key, vmapped in one compiled loop (the companions' entry point).

    Run ``i`` uses ``keys[i]`` and, when ``schedules`` is given, its own named schedule
    ``schedules[i] = (name, lr, offset)`` (traced: mixing schedules does not recompile);
    otherwise the config's.

    Args:
        problem, estimator, config, sup_objective: as in :func:`make_train`.
        keys: (S, ...) JAX keys.
        params: initial parameters (default: the problem's).
        schedules: ``None`` or S triples ``(name, lr, offset)`` of :data:`SCHEDULES`.
    Returns:
        A :class:`TrainResult` with a leading run axis S (``records``: the problem's
        ``step_record`` per run and step, or ``None``).
    """
    prep = _Prepared(problem, estimator, config, sup_objective)
    S = int(keys.shape[0])
    if schedules is None:
        lr, off, idx = prep.step_args()
        lrs, offs, idxs = np.full(S, lr), np.full(S, off), np.full(S, idx)
    else:
        if len(schedules) != S:
            raise ValueError(f"schedules must hold one (name, lr, offset) per key ({S}), got "
                             f"{len(schedules)}")
        for sch in schedules:
            check_schedule(*sch)
        lrs = [float(e) for _, e, _ in schedules]
        offs = [float(o) for _, _, o in schedules]
        idxs = [SCHEDULE_NAMES.index(n) for n, _, _ in schedules]
    out = _run_batch(keys, prep.initial(params), prep.problem, prep.sup,
                     jnp.asarray(lrs, jnp.float64), jnp.asarray(offs, jnp.float64),
                     jnp.asarray(idxs, jnp.int32), est=prep.est, cfg=config._static(),
                     enumerable=prep.enumerable)
    return TrainResult(steps=np.asarray(config.logged_steps), sup_objective=prep.sup,
                       config=config, **out)


def seed_keys(seeds):
    """``(seeds, keys)``: one key per integer seed, each ``seed_key(seed)``."""
    if isinstance(seeds, (str, bytes)):
        raise ValueError(f"seeds must be a non-empty 1-d sequence of integers, got {seeds!r}")
    try:
        arr = np.asarray(seeds)
        if arr.dtype == object or arr.dtype.kind == "f" and arr.ndim == 1:
            arr = np.asarray(list(seeds) if np.ndim(seeds) else [seeds], dtype=object)
    except (TypeError, ValueError):
        arr = np.asarray(list(seeds), dtype=object)
    arr = np.atleast_1d(arr)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"seeds must be a non-empty 1-d sequence of integers, got {seeds!r}")
    if arr.dtype.kind in "iu" and arr.min() >= 0 and arr.max() < 2**32:  # PRNGKey(s), vectorised
        return arr, jax.vmap(jax.random.PRNGKey)(jnp.asarray(arr, dtype=jnp.uint32))
    try:
        keys = jnp.stack([V.seed_key(s) for s in arr])
    except ValueError:
        raise ValueError(f"seeds must be a non-empty 1-d sequence of integers, got {seeds!r}"
                         ) from None
    return arr, keys


# --- the legacy entry points (thin uses of the loop) -------------------------------------------


@float64
def train(policy, estimator, batch_size: int, group_size: int, n_steps: int, eta: float = 0.1,
          schedule: str = "constant", seeds=(0,), log_every: int = 1, offset: float = 0.0,
          max_objective: float | None = None, params=None, log_params: bool = False
          ) -> TrainResult:
    """Run Algorithm 1 for every seed in ``seeds`` (vmapped) and log the exact gap.

    Args:
        policy: an enumerable policy (an :class:`~grpo_theory.core.policy.EnumerablePolicy`:
            SoftmaxBandit, LinearSoftmaxBandit, SequencePolicy, MLPSequencePolicy, ...);
            training starts at ``params`` or the policy's own parameters.
        estimator: registry name or Estimator.
        batch_size, group_size, n_steps: B, G and n.
        eta, schedule, offset: ``eta_t = eta`` (constant) or ``eta / (t + offset)`` (inverse).
        seeds: integers; seed s uses ``seed_key(s)`` (= ``PRNGKey(s)`` for 0 <= s < 2^32).
        log_every: must divide ``n_steps``.
        max_objective: ``sup J`` override; log_params: also log the parameters.
    Returns:
        A :class:`TrainResult` with a leading seed axis.
    """
    return train_schedules(policy, estimator, batch_size, group_size, n_steps,
                           [(schedule, eta, offset)], seeds, log_every, max_objective, params,
                           log_params)[0]


@float64
def train_schedules(policy, estimator, batch_size: int, group_size: int, n_steps: int,
                    schedules, seeds=(0,), log_every: int = 1, max_objective=None, params=None,
                    log_params: bool = False) -> list[TrainResult]:
    """Like :func:`train` for several step-size schedules at once (one compilation).

    Args:
        schedules: a list of ``(schedule, eta, offset)``; every schedule runs every seed (the
            same keys, so schedules are compared on common random numbers).
        (the other arguments as in :func:`train`)
    Returns:
        One :class:`TrainResult` per schedule.
    """
    if not isinstance(policy, EnumerablePolicy):
        raise ValueError(
            "policy must be an enumerable policy (an EnumerablePolicy: SoftmaxBandit, "
            f"LinearSoftmaxBandit, SequencePolicy, ...), got {type(policy).__name__}")
    if len(schedules) == 0:
        raise ValueError("schedules must hold at least one (schedule, eta, offset)")
    for sch in schedules:
        if len(sch) != 3:
            raise ValueError(f"schedules entries must be (schedule, eta, offset), got {sch!r}")
        check_schedule(*sch)
    est = get_estimator(estimator)
    cfg = TrainConfig(batch_size=batch_size, group_size=group_size, n_steps=n_steps,
                      log_every=log_every, log_params=log_params)
    seeds, keys = seed_keys(seeds)
    S, C = seeds.size, len(schedules)
    r = train_batch(policy, est, cfg, jnp.tile(keys, (C, 1)), params=params,
                    sup_objective=max_objective, schedules=[sch for sch in schedules
                                                            for _ in range(S)])
    out = {k: (None if v is None else np.asarray(v)) for k, v in
           dict(objective=r.objective, gap=r.gap, max_gap=r.max_gap,
                theta_final=r.theta_final, params=r.params, records=r.records,
                rollouts=r.rollouts).items()}
    res = []
    for c, (sch, eta, off) in enumerate(schedules):
        sl = slice(c * S, (c + 1) * S)
        res.append(TrainResult(
            steps=np.asarray(cfg.logged_steps), sup_objective=r.sup_objective, seeds=seeds,
            config=dict(estimator=est.name, batch_size=cfg.batch_size,
                        group_size=cfg.group_size, n_steps=cfg.n_steps, eta=float(eta),
                        schedule=sch, offset=float(off), log_every=cfg.log_every),
            **{k: (None if v is None else v[sl]) for k, v in out.items()}))
    return res
