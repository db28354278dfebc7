r"""The clipped multi-epoch update, written once for the bandit and language-model loops.

PPO/GRPO implementations reuse a sampled batch for ``E`` full-batch optimiser steps on the
clipped surrogate (per token or per response ``n``, ratio ``r_n = pi_theta / pi_old``, weight
``w_n`` carrying the advantage and the normalisation)

.. math:: L(\theta) = \sum_n \min\big(r_n w_n,\ \mathrm{clip}(r_n, 1-\epsilon, 1+\epsilon)\,
          w_n\big), \qquad \nabla L\big|_{\theta = \theta_{old}} = \sum_n w_n \nabla\log\pi_n,

so one epoch without clipping is Algorithm 1's step. Users: the bandit loop
(:func:`grpo_theory.optim.train.make_train` with ``TrainConfig(epochs=, clip_eps=)``), the LM
loop (:func:`grpo_theory.lm.training.loop.clipped_objective`, :func:`grpo_theory.lm.training.grpo.train_grpo`) and
the packed DPPO loop (:mod:`grpo_theory.lm.training.dppo`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def clipped_surrogate(ratio, weight, clip_eps):
    r"""The per-element clipped surrogate ``min(r w, clip(r, 1 - eps, 1 + eps) w)`` (to sum).

    Args:
        ratio: ``r = exp(log pi - log pi_old)`` (any shape).
        weight: ``w``, broadcast against ``ratio``.
        clip_eps: ``eps`` (``jnp.inf``: no clipping).
    Returns:
        The elementwise surrogate (the shape of ``ratio * weight``).
    """
    return jnp.minimum(ratio * weight, jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * weight)


def multi_epoch_update(opt: optax.GradientTransformation, params, opt_state, objective,
                       epochs: int):
    r"""``epochs`` full-batch optax steps that *ascend* ``objective`` (``lax.scan``).

    Each epoch: ``u, s = opt.update(-grad objective(p), s, p)``, ``p = p + u`` (optax minimises
    the loss ``-objective``).

    Args:
        opt: an ``optax.GradientTransformation``.
        params, opt_state: the starting parameters (a pytree) and optimiser state.
        objective: ``params -> scalar`` (e.g. a sum of :func:`clipped_surrogate` against
            ratios to the parameters the batch was sampled with).
        epochs: a static integer >= 1.
    Returns:
        ``(params, opt_state)`` after the epochs.
    """
    def epoch(carry, _):
        p, s = carry
        u, s = opt.update(jax.grad(lambda q: -objective(q))(p), s, p)
        return (optax.apply_updates(p, u), s), None

    (params, opt_state), _ = jax.lax.scan(epoch, (params, opt_state), None, length=epochs)
    return params, opt_state
