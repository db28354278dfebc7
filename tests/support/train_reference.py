"""Training-loop cases whose numbers are pinned in ``tests/optim/results/train_reference.npz``.

The file was written by the loop before it moved to optax and traced problems (this module run
as a script on commit 23e49b5, then at ``tests/_train_reference.py``); ``test_train_family.py``
(``tests/optim/``) recomputes every case and requires agreement to float64 rounding. Rewrite it
with ``python tests/support/train_reference.py`` only when a change of the numbers is intended.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

PATH = Path(__file__).resolve().parents[1] / "optim" / "results" / "train_reference.npz"


def _flat(prefix, res, out):
    for name in ("objective", "gap", "max_gap", "theta_final", "params"):
        v = getattr(res, name)
        if v is not None:
            out[f"{prefix}/{name}"] = np.asarray(v)


def cases() -> dict:
    """Every pinned array, by ``case/field``."""
    from grpo_theory import problems
    from grpo_theory.companions import credit as C
    from grpo_theory.companions import length_weighting as LW
    from grpo_theory.optim import theory as opt
    from grpo_theory.optim import train as T

    out = {}
    keys = jnp.stack([jax.random.PRNGKey(s) for s in range(3)])
    bandit = problems.default_bandit()
    cfg = T.TrainConfig(batch_size=2, group_size=4, n_steps=12, lr=0.5, log_every=4,
                        log_params=True)
    _flat("tabular_constant", jax.vmap(T.make_train(bandit, "grpo", cfg))(keys), out)
    lin = problems.scaling_family_bandit(0.1, at_optimum=False)
    cfg = T.TrainConfig(batch_size=3, group_size=2, n_steps=10, schedule="inverse", lr=3.0,
                        offset=2.0, log_steps=(0, 1, 5, 10))
    _flat("linear_inverse_optimal", jax.vmap(T.make_train(lin, "optimal", cfg))(keys), out)
    cfg = T.TrainConfig(batch_size=2, group_size=3, n_steps=8,
                        schedule=optax.exponential_decay(0.8, 3, 0.5), log_every=2)
    _flat("sequence_optax_schedule",
          jax.vmap(T.make_train(problems.sequence_policy(), "grpo_std", cfg))(keys), out)
    for i, r in enumerate(T.train_schedules(bandit, "oracle", 2, 4, 12,
                                            [("constant", 0.7, 0.0), ("inverse", 3.0, 4.0)],
                                            seeds=[0, 1], log_every=4)):
        _flat(f"train_schedules{i}", r, out)
    _flat("gaussian_inverse", opt.train(problems.default_gaussian_bandit(), "grpo", 4, 2, 0.1,
                                        "inverse", 16, 3, seed=5, offset=1.0), out)
    for d in (0.5, 0.1):
        r, = T.train_schedules(problems.scaling_family_bandit(d, at_optimum=False), "grpo", 8, 8,
                               20, [("constant", 0.05 / d, 0.0)], seeds=[11, 12], log_every=20,
                               max_objective=float(T.exact_objective(
                                   problems.scaling_family_bandit(d))))
        _flat(f"family_d{d}", r, out)
    pol = C.MLPSequencePolicy(lambda p, t, L: float(L == 1), 2, 2, 2, hidden=3)
    for k, v in C.train_grpo_records(pol, 3, 2, 2, 0.1, [0, 1], weight="W1").items():
        out[f"credit/{k}"] = np.asarray(v)
    for k, v in LW.train_length_weighted(problems.stop_or_run_policy(), 0.5, 4, 2, 4, 1.0,
                                         [0, 1]).items():
        out[f"length_weighted/{k}"] = np.asarray(v)
    return out


if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)
    data = cases()
    np.savez_compressed(PATH, **data)
    print(f"wrote {len(data)} arrays to {PATH}")
