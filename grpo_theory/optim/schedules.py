r"""Step-size schedules of Algorithm 1 and the plain ascent update, as optax objects.

:data:`SCHEDULES` is the one registry of schedules ``eta_t = fn(t, lr, offset)`` (t = 1..n):
``constant`` (``eta_t = beta``) and ``inverse`` (``eta_t = beta / (t + t_0)``, the decreasing
steps of Lemma 6 and Theorem 8). :func:`schedule` turns a name into an optax schedule and
:func:`ascent` is the update the training loop applies to the loss gradient.
"""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np
import optax

from .. import _validation as V
from .._precision import float64


def _constant(t, lr, offset):
    return lr + 0.0 * t


def _inverse(t, lr, offset):
    return lr / (t + offset)


SCHEDULES: dict[str, Callable] = {"constant": _constant, "inverse": _inverse}
"""The one registry of step-size schedules ``eta_t = fn(t, lr, offset)`` (t = 1..n)."""
SCHEDULE_NAMES = tuple(SCHEDULES)


def schedule(name, lr, offset=0.0):
    """A named schedule of :data:`SCHEDULES` as an optax schedule (traceable).

    optax counts updates from 0, so ``count -> eta_(count + 1)``: ``constant`` gives
    ``eta_t = lr``, ``inverse`` gives ``eta_t = lr / (t + offset)``.

    Args:
        name: a name in :data:`SCHEDULES`, or an int32 index into it (may be traced: the
            schedules of a batch of runs are then chosen per run by ``lax.switch``).
        lr, offset: ``beta`` and ``t_0`` (floats or traced scalars).
    Returns:
        ``count -> eta`` (an ``optax.Schedule``).
    """
    if isinstance(name, str):
        fn = SCHEDULES[name]
        return lambda count: fn(count + 1, lr, offset)
    fns = [SCHEDULES[n] for n in SCHEDULE_NAMES]
    return lambda count: jax.lax.switch(name, fns, count + 1, lr, offset)


def ascent(step_size) -> optax.GradientTransformation:
    r"""Plain ascent ``theta_t = theta_(t-1) + eta_t ghat_t`` as an optax transformation.

    The loop hands optax the *loss* gradient ``-ghat`` (optax minimises), so this is
    ``optax.sgd(step_size)``: the update ``-eta_t (-ghat_t) = eta_t ghat_t``, bit for bit.

    Args:
        step_size: a float or an optax schedule ``count -> eta`` (e.g. :func:`schedule`).
    Returns:
        An ``optax.GradientTransformation``.
    """
    return optax.sgd(step_size)


@float64
def step_sizes(eta: float, n_steps: int, schedule: str = "constant", offset: float = 0.0):
    """eta_t for t = 1..n under a named schedule of :data:`SCHEDULES`.

    Returns:
        A NumPy array (n_steps,).
    """
    check_schedule(schedule, eta, offset)
    n = V.positive_int("n_steps", n_steps, 1)
    t = np.arange(1, n + 1, dtype=np.float64)
    return np.asarray(SCHEDULES[schedule](t, float(eta), float(offset)), dtype=np.float64)


def check_schedule(schedule, eta, offset, lr_name="eta"):
    if not (isinstance(schedule, str) and schedule in SCHEDULES):
        raise ValueError(f"schedule must be one of {SCHEDULE_NAMES} or an optax schedule "
                         f"(a callable), got {schedule!r}")
    check_lr(eta, lr_name)
    if not (isinstance(offset, (int, float, np.integer, np.floating)) and np.isfinite(offset)
            and offset > -1):
        raise ValueError(f"offset must be a finite number > -1 (so eta_1 is finite), "
                         f"got {offset!r}")


def check_lr(lr, name):
    if isinstance(lr, (bool, np.bool_)) or not isinstance(
            lr, (int, float, np.integer, np.floating)) or not (np.isfinite(lr) and lr >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {lr!r}")
