"""The training loop's static configuration and its result (:mod:`grpo_theory.optim.train`).

:class:`TrainConfig` is frozen and hashable (a static argument of ``jax.jit``), its fields
validated when it is made; :class:`TrainResult` is a pytree of one run's or S runs' trajectories
(the exact objective, the suboptimality gap and its running maximum at the logged steps).
Both are on the subpackage's face (``from grpo_theory.optim import TrainConfig``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import jax
import numpy as np
import optax

from .. import _validation as V
from .._precision import float64
from ..core import RolloutRule
from .schedules import check_lr, check_schedule


# --- configuration and result ------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Static settings of one training run (frozen and hashable: a static argument of jit).

    Attributes:
        batch_size: prompts per step B (NumPy/JAX integers accepted; the kept prompts of a
            refilling rule).
        group_size: responses per prompt G (``None`` with a ``rule``, which sizes the groups).
        n_steps: number of steps n.
        schedule: a name in :data:`SCHEDULES` (``eta_t = fn(t, lr, offset)``) or an optax
            schedule ``count -> eta`` (count = t - 1, as optax counts updates).
        lr: the step size ``beta`` of a named schedule.
        offset: ``t_0`` of the ``inverse`` schedule.
        log_every: log J and the gap every ``log_every`` steps (steps 0, k, 2k, ..., n; must
            divide n). Default: only steps 0 and n.
        log_steps: log at these steps instead (sorted unique integers in ``[0, n]``).
        log_params: also log the parameters at the logged steps.
        optimizer: an ``optax.GradientTransformation`` applied to the loss gradient ``-ghat``
            instead of :func:`ascent` with the schedule (``schedule``, ``lr`` and ``offset`` are
            then unused). It is a static part of the compiled loop: reuse one object to share
            the compilation.
        epochs: optimiser steps per sampled batch (>= 1; enumerable problems only). With
            ``epochs > 1`` or ``clip_eps`` the step ascends the clipped surrogate of
            :mod:`grpo_theory.optim.clipped` over the batch's responses (ratios
            ``pi_theta(y|x) / pi_(theta_(t-1))(y|x)``, weights ``w A / (BG)``), ``epochs``
            times; a named or callable schedule gives every epoch of step t the step size
            ``eta_t`` (``cfg.optimizer`` counts epochs).
        clip_eps: ``None`` (no clipping) or ``eps > 0``.
        rule: ``None`` (G responses for each of B prompts, :func:`~grpo_theory.core.sample_groups`)
            or a rollout rule (a :class:`~grpo_theory.core.rollout_rules.RolloutRule`, e.g.
            :func:`grpo_theory.allocation.dynamic_sampling`): each step is ``rule.step`` with
            the problem's :class:`~grpo_theory.core.rollout_rules.ProblemSampler` and the
            estimate the mean over kept prompts of each prompt's estimate on its kept responses
            (the estimator's masked form). Enumerable problems only.
    """

    batch_size: int
    group_size: int | None = None
    n_steps: int
    schedule: Any = "constant"
    lr: float = 0.1
    offset: float = 0.0
    log_every: int | None = None
    log_steps: tuple | None = None
    log_params: bool = False
    optimizer: Any = None
    epochs: int = 1
    clip_eps: float | None = None
    rule: Any = None

    @float64
    def __post_init__(self):
        set_ = partial(object.__setattr__, self)
        set_("batch_size", V.integer("batch_size", self.batch_size, 1))
        if self.rule is None:
            if self.group_size is None:
                raise ValueError("group_size is required (an integer >= 1) unless a rule sizes "
                                 "the groups")
            set_("group_size", V.integer("group_size", self.group_size, 1))
        else:
            if not isinstance(self.rule, RolloutRule):
                raise ValueError("rule must be None or a rollout rule (a "
                                 "grpo_theory.core.RolloutRule, e.g. allocation.fixed(8)), got "
                                 f"{type(self.rule).__name__}")
            if self.group_size is not None:
                raise ValueError(f"group_size must be None with a rule (rule {self.rule.name!r} "
                                 f"sizes the groups), got {self.group_size!r}")
            self.rule.training_rounds()  # a refilling rule without its cap is refused here
        n = V.integer("n_steps", self.n_steps, 1)
        set_("n_steps", n)
        if callable(self.schedule):
            check_lr(self.lr, "lr")
        else:
            check_schedule(self.schedule, self.lr, self.offset, "lr")
        set_("lr", float(self.lr))
        set_("offset", float(self.offset))
        if self.log_steps is not None:
            if self.log_every is not None:
                raise ValueError("give log_every or log_steps, not both")
            try:
                steps = sorted({V.integer("log_steps", s, 0, n) for s in self.log_steps})
            except TypeError:
                raise ValueError(f"log_steps must be a sequence of integers in [0, n_steps={n}]"
                                 f", got {self.log_steps!r}") from None
            if not steps:
                raise ValueError(f"log_steps must hold at least one step in [0, n_steps={n}]")
            set_("log_steps", tuple(steps))
        else:
            every = n if self.log_every is None else V.integer("log_every", self.log_every, 1)
            if n % every:
                raise ValueError(f"log_every must divide n_steps={n}, got {every}")
            set_("log_every", every)
        set_("log_params", bool(self.log_params))
        if self.optimizer is not None and not isinstance(self.optimizer,
                                                         optax.GradientTransformation):
            raise ValueError("optimizer must be an optax.GradientTransformation or None, got "
                             f"{type(self.optimizer).__name__}")
        set_("epochs", V.integer("epochs", self.epochs, 1))
        if self.clip_eps is not None:
            if isinstance(self.clip_eps, (bool, np.bool_)) or not isinstance(
                    self.clip_eps, (int, float, np.integer, np.floating)) or not (
                    np.isfinite(self.clip_eps) and self.clip_eps > 0):
                raise ValueError(f"clip_eps must be None or a finite number > 0, got "
                                 f"{self.clip_eps!r}")
            set_("clip_eps", float(self.clip_eps))

    @property
    def clipped(self) -> bool:
        """Whether the step is the clipped multi-epoch update (``epochs > 1`` or ``clip_eps``)."""
        return self.epochs > 1 or self.clip_eps is not None

    @property
    @float64
    def logged_steps(self) -> tuple:
        """The steps at which J, the gap (and the parameters) are logged."""
        if self.log_steps is not None:
            return self.log_steps
        return tuple(range(0, self.n_steps + 1, self.log_every))

    @float64
    def _static(self) -> TrainConfig:
        """The part that shapes the compiled loop (a named schedule's lr/offset are traced)."""
        if callable(self.schedule) or self.optimizer is not None:
            return self
        return replace(self, schedule="constant", lr=0.0, offset=0.0)


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class TrainResult:
    """Trajectories of one run, or of S runs (a leading seed axis after ``vmap``).

    Attributes:
        steps: logged steps (L,), step 0 = the initial parameters.
        objective: exact ``J(theta_t)`` at the logged steps (..., L).
        gap: ``sup J - J(theta_t)`` (..., L) (the problem's own ``gap`` where it has one).
        max_gap: the largest gap over every step 0..n (...,).
        theta_final: final parameters (..., *param_shape).
        params: parameters at the logged steps (..., L, *param_shape) if ``log_params``.
        records: the problem's ``step_record`` at every step (..., n, ...) or ``None``.
        rollouts: the responses generated up to each logged step (..., L) (B G a step, or what
            the rule spent: every response drawn, kept or not).
        sup_objective: ``sup J`` used for the gap.
        config: the :class:`TrainConfig` (or a dict of the legacy wrappers' settings).
        seeds: the seeds of the runs (legacy wrappers), else ``None``.
    """

    steps: np.ndarray
    objective: Any
    gap: Any
    max_gap: Any
    theta_final: Any
    params: Any = None
    records: Any = None
    rollouts: Any = None
    sup_objective: float = float("nan")
    config: Any = field(default=None)
    seeds: Any = None

    @float64
    def tree_flatten(self):
        children = (self.objective, self.gap, self.max_gap, self.theta_final, self.params,
                    self.records, self.rollouts)
        aux = (tuple(int(s) for s in self.steps), self.sup_objective, self.config,
               None if self.seeds is None else tuple(int(s) for s in self.seeds))
        return children, aux

    @classmethod
    @float64
    def tree_unflatten(cls, aux, children):
        steps, sup, config, seeds = aux
        return cls(np.asarray(steps), *children, sup_objective=sup, config=config,
                   seeds=None if seeds is None else np.asarray(seeds))

    @property
    @float64
    def final_gap(self):
        """Delta_n for each run, shape (...,)."""
        return self.gap[..., -1]

    # names used by the optimisation-theory drivers
    @property
    @float64
    def log_steps(self) -> np.ndarray:
        return np.asarray(self.steps)

    @property
    @float64
    def gaps(self):
        return self.gap

    @property
    @float64
    def theta(self):
        return self.theta_final
