r"""The history baselines (EBPO, DBB, KAE) along a drifting policy: exact given the state, over
sampled histories by Monte Carlo.

**The drift model** (the one SPO's path uses): the policy follows the expected path of unbiased
training, :math:`\theta_{t+1} = \theta_t + \eta \nabla J(\theta_t)`; every step B prompts are
drawn iid from f with G binary rewards each at the current policy, and every estimator's state is
updated from them as training updates it (``Estimator.update_state``, the same code the training
loop runs), independently for each of ``n`` histories. At every ``every``-th step the exact mean
and MSE of each estimator's step *given* each history's state (``batch_moments(..., state=)``,
count states) are averaged over the histories and compared with leave-one-out's exact MSE at the
same policy (a bootstrap interval over histories). The rival of the bias check, EBPO's
self-inclusive form along the same histories, is biased at every step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from grpo_theory.core import PromptContext, batch_moments, get_estimator
from grpo_theory.experiments import check, key_seed, markdown_table

__all__ = ["PATH_ESTIMATORS", "PATH_RIVAL", "history_path_rows", "path_lines", "path_checks"]

#: the history baselines followed along the path, then the bias check's rival
PATH_ESTIMATORS = ("ebpo", "dbb", "kae")
PATH_RIVAL = "ebpo_self_inclusive"


def bootstrap_interval(values, rng, n_boot: int = 2000):
    """Percentile 95% interval of the mean of ``values`` (resampling seeds or histories)."""
    v = np.asarray(values, np.float64)
    means = v[rng.integers(0, len(v), (n_boot, len(v)))].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def history_path_rows(bandit, config: dict, key) -> list[dict]:
    """One row per (estimator, checkpoint) along the drifting path (see the module docstring).

    Args:
        bandit: the family member (an enumerable policy at its start parameters).
        config: ``G``, ``steps``, ``eta``, ``histories`` (n), ``every`` (checkpoint spacing) and
            ``problem`` (its label).
        key: the cell's key (the histories' NumPy seed).

    Returns:
        Rows with the policy's J and leave-one-out's exact MSE at the step, the mean over
        histories of the estimator's exact MSE given its state over leave-one-out's (``ratio``,
        with ``ratio_lo``/``ratio_hi``), and the largest relative bias over the histories.
    """
    G, B, T, eta = config["G"], 4, config["steps"], config["eta"]
    n, every = config["histories"], config["every"]
    names = PATH_ESTIMATORS + (PATH_RIVAL,)
    ests = {m: get_estimator(m) for m in names}
    pr0 = bandit.problem()
    P = pr0.n_prompts
    rng = np.random.default_rng(key_seed(key))
    update = {m: jax.jit(jax.vmap(e.update_state, in_axes=(0, 0, 0, None)))
              for m, e in ests.items()}
    states = {m: jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (n,) + jnp.shape(a)),
                                        e.initial_state(P)) for m, e in ests.items()}
    theta = np.asarray(bandit.params, np.float64)
    rows = []
    for t in range(T + 1):
        pol = bandit.with_params(theta)
        pr = pol.problem()
        if t % every == 0:
            loo = batch_moments(pol, "grpo", G, B).mse
            for m in names:
                per = [batch_moments(pol, ests[m], G, B,
                                     state=jax.tree_util.tree_map(lambda a: a[i], states[m]))
                       for i in range(n)]
                ratio = np.array([b.mse for b in per]) / loo
                lo, hi = bootstrap_interval(ratio, rng)
                rows.append(dict(problem=config["problem"], G=G, B=B, eta=eta, step=t,
                                 histories=n, estimator=m, objective=float(pr.objective()),
                                 loo_mse=loo, ratio=float(ratio.mean()), ratio_lo=lo,
                                 ratio_hi=hi,
                                 max_relative_bias=float(max(b.relative_bias for b in per)),
                                 min_relative_bias=float(min(b.relative_bias for b in per))))
        if t == T:
            break
        V, f = np.asarray(pr.values()), np.asarray(pr.prompt_probs)
        x = rng.choice(P, size=(n, B), p=f)
        z = (rng.random((n, B, G)) < V[x][..., None]).astype(np.float64)
        for m in names:
            states[m] = update[m](states[m], jnp.asarray(x), jnp.asarray(z), PromptContext())
        theta = theta + eta * np.asarray(pol.gradient())
    return rows


def path_lines(tp) -> list[str]:
    """The report's table of the ``history_path`` rows (none when the table is missing)."""
    if tp is None or not len(tp):
        return []

    r0 = tp.iloc[0]
    steps = sorted(int(s) for s in tp.step.unique())
    t = pd.DataFrame({"step": steps})
    t["J"] = [float(tp[tp.step == s].objective.iloc[0]) for s in steps]
    for m in PATH_ESTIMATORS + (PATH_RIVAL,):
        d = tp[tp.estimator == m].set_index("step")
        t[f"{m} ÷ leave-one-out [95% CI]"] = [
            f"{d.ratio[s]:.3f} [{d.ratio_lo[s]:.3f}, {d.ratio_hi[s]:.3f}]" for s in steps]
    return [f"**EBPO, DBB and KAE along a drifting policy** (problem `{r0.problem}`, B = "
            f"{int(r0.B)}, G = {int(r0.G)}). Drift model: theta += {r0.eta:g} grad J each step; "
            "each step B prompts drawn with G rewards each update every estimator's state as "
            f"training does, in {int(r0.histories)} independent histories. The exact MSE of each "
            "step given its state, averaged over the histories (95% bootstrap interval), over "
            "leave-one-out's exact MSE at the same policy; the last column is EBPO's "
            "self-inclusive form (the bias check's rival):", "",
            markdown_table(t, {"J": ".3f"}), ""]


def path_checks(tp) -> list:
    """The exact check of the ``history_path`` rows: unbiased given the state at every step and
    history; the rival (EBPO's self-inclusive form) biased at every step."""
    from grpo_theory.experiments import check

    if tp is None or not len(tp):
        return [check("EBPO, DBB and KAE along a drifting policy: unbiased given the state",
                      False, None, kind="exact", detail="no history_path rows")]
    unb = tp[tp.estimator.isin(PATH_ESTIMATORS)].max_relative_bias.max()
    riv = tp[tp.estimator == PATH_RIVAL].min_relative_bias.min()
    n = int(tp.step.nunique())
    return [check(
        "EBPO, DBB and KAE along a drifting policy: unbiased given the state at every step "
        "of every history (1e-12); EBPO's self-inclusive form along the same histories is "
        "biased at every step (> 1e-4)", bool(unb <= 1e-12 and riv > 1e-4), unb, riv,
        kind="exact",
        detail=f"{n} steps x {int(tp.histories.iloc[0])} histories: largest relative bias "
               f"{unb:.1e}; the rival's smallest {riv:.1e}")]
