"""Synthetic per-step runs of two arms paired by seed, for the A/B studies' analysis tests: a
seed effect shared by the arms, the second arm shifted by ``shift``."""

import numpy as np
import pandas as pd


def paired_runs(arms, shift, columns, seeds=8, steps=8, noise=0.05, seed=0,
                eval_reward=False):
    """Rows ``arm, seed, step, reward`` (+ the constant ``columns``; + a per-run
    ``eval_reward`` drawn like a step's reward) for ``arms = (control, shifted)``."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(seeds):
        base = rng.normal(0.3, 0.1)  # a seed effect shared by the arms (paired)
        for arm, d in zip(arms, (0.0, shift)):
            extra = dict(columns)
            if eval_reward:
                extra["eval_reward"] = base + d + rng.normal(0, noise)
            for t in range(1, steps + 1):
                rows.append(dict(arm=arm, seed=s, step=t, **extra,
                                 reward=base + d + rng.normal(0, noise)))
    return pd.DataFrame(rows)
