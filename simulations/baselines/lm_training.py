r"""The baselines on the small transformer: training at equal rollouts (the ``lm_training`` table).

The starting policy is the package's instruct transformer (the quick warm-up of the LM studies,
:func:`grpo_theory.lm.study_policies`); every estimator trains it with Algorithm 1
(:func:`grpo_theory.lm.train_grpo`: B = N/G prompts of G responses a step from the same pool,
Adam at one learning rate, the same steps) and the same seeds, so that run ``s`` of every
estimator starts from the same key. What each estimator reads besides the rewards comes from the
training loop: JSPO the batch's other prompts, the weighted baselines each response's exact
squared score norm (per-sample gradients of the transformer), SPO its tracker over the pool's
prompts, carried across steps.

The outcome is the exact held-out accuracy after the last step (teacher forcing: ``mean_x
pi(y*|x)`` over the evaluation questions, no sampling noise), with a 95% bootstrap interval over
seeds and the difference to leave-one-out's paired by seed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from grpo_theory.experiments import Cell, key_seed, markdown_table
from grpo_theory.lm import QUICK_WARMUP, eval_set, study_policies, train_grpo, train_pool

from .history_path import bootstrap_interval

#: the estimators trained on the transformer: leave-one-out, JSPO (cross-prompt), the weighted
#: baseline self-inclusive and leave-one-out, and a history baseline (SPO's raw step)
LM_ESTIMATORS = ("grpo", "jspo", "norm_weighted", "norm_weighted_loo", "spo_raw")

SCHEMA = dict(G="int", B="int", N="int", steps="int", lr="float", n_seeds="int",
              estimator="str", start="float", final="float", final_lo="float",
              final_hi="float", diff_loo="float", diff_lo="float", diff_hi="float",
              gain="float", gain_lo="float", gain_hi="float")


def lm_training_cells(sizes, budget: int, steps: int, seeds: int, lr: float, n_eval: int,
                      n_pool: int) -> list[Cell]:
    """One cell per G (every estimator at that G, at budget ``N = budget`` a step)."""
    return [Cell(f"lm_train_G{G}", dict(lm_train=True, warmup=QUICK_WARMUP, G=int(G),
                                        N=int(budget), steps=int(steps), seeds=int(seeds),
                                        lr=float(lr), n_eval=int(n_eval), n_pool=int(n_pool),
                                        estimators=list(LM_ESTIMATORS)), kind="lm_training")
            for G in sizes]


def lm_training_rows(config: dict, key) -> list[dict]:
    """Every estimator of ``config`` trained from the instruct transformer with the same seeds.

    Args:
        config: ``G``, ``N`` (responses a step), ``steps``, ``seeds`` (runs per estimator),
            ``lr`` (Adam), ``n_eval`` (held-out questions), ``n_pool`` (training questions),
            ``warmup`` (the starting policy's warm-up) and ``estimators`` (``grpo`` first).
        key: the cell's key (the bootstrap's stream).

    Returns:
        One row per estimator (:data:`SCHEMA`).
    """
    wcfg = config["warmup"]
    start = study_policies(wcfg)["instruct"][0]
    ev = eval_set(wcfg.task).subset(np.arange(config["n_eval"]))
    pool = train_pool(wcfg.task, n=config["n_pool"])
    G, N, T, n, lr = config["G"], config["N"], config["steps"], config["seeds"], config["lr"]
    finals, acc0 = {}, None
    for name in config["estimators"]:
        out = []
        for seed in range(n):
            rows = train_grpo(start, pool, ev, N, G, T, (T,), lr, seed, estimator=name)
            acc0 = rows[0]["accuracy"]
            out.append(rows[-1]["accuracy"])
        finals[name] = np.asarray(out, np.float64)
    rng = np.random.default_rng(key_seed(key))
    loo = finals["grpo"]
    rows = []
    for name, f in finals.items():
        lo, hi = bootstrap_interval(f, rng)
        dlo, dhi = bootstrap_interval(f - loo, rng)
        glo, ghi = bootstrap_interval(f - acc0, rng)
        rows.append(dict(G=G, B=N // G, N=N, steps=T, lr=lr, n_seeds=n, estimator=name,
                         start=float(acc0), final=float(f.mean()), final_lo=lo, final_hi=hi,
                         diff_loo=float(np.mean(f - loo)), diff_lo=dlo, diff_hi=dhi,
                         gain=float(np.mean(f - acc0)), gain_lo=glo, gain_hi=ghi))
    return rows


def lm_training_lines(df) -> list[str]:
    """The report's paragraph and table on the transformer's training (none without rows)."""
    if df is None or not len(df):
        return []
    lines = []
    for G, d in df.groupby("G"):
        r0 = d.iloc[0]
        lines += [f"**Training the small transformer at equal rollouts** (the instruct policy, "
                  f"B = {int(r0.B)} prompts of G = {G}, {int(r0.steps)} Adam steps at "
                  f"learning rate {r0.lr:g}, {int(r0.n_seeds)} seeds, the same seeds for "
                  f"every estimator; exact held-out accuracy from {r0.start:.4f}; 95% bootstrap "
                  "intervals over seeds, the differences paired by seed):", "",
                  markdown_table(pd.DataFrame({
                      "estimator": d.estimator,
                      "gain [95% CI]": [f"{r.gain:+.4f} [{r.gain_lo:+.4f}, {r.gain_hi:+.4f}]"
                                        for r in d.itertuples()],
                      "− leave-one-out's [95% CI]": [
                          f"{r.diff_loo:+.4f} [{r.diff_lo:+.4f}, {r.diff_hi:+.4f}]"
                          for r in d.itertuples()]})), ""]
    other = df[df.estimator != "grpo"]
    below = sorted(set(other[other.diff_hi < 0].estimator))
    above = sorted(set(other[other.diff_lo > 0].estimator))
    tie = sorted(set(other.estimator) - set(below) - set(above))
    lines += ["On the transformer, below leave-one-out at some G (interval below 0): "
              f"{', '.join(f'`{n}`' for n in below) or 'none'}; above it at some G: "
              f"{', '.join(f'`{n}`' for n in above) or 'none'}; not told apart at any G: "
              f"{', '.join(f'`{n}`' for n in tie) or 'none'}. A measurement, not a check.", ""]
    return lines
