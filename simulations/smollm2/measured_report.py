"""The measured-MSE tables, figure and MEASURED.md, from the saved tables only.

:func:`analyse` reads ``measured_groups.csv``, ``measured_batches.csv`` and
``measured_meta.json`` (written by :func:`.measured.run_measurement`) and the advisor study's
``rollouts.npz`` (the prediction), and writes ``measured_mse.csv``, ``measured_argmin.csv``,
``measured_differences.csv``, ``measured_rival.csv``, ``measured_rival_plan.csv``,
``measured_mse.png``/``.pdf`` and ``MEASURED.md``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from grpo_theory.advisor import estimate_from_rollouts, t_quantile
from grpo_theory.experiments import markdown_table, study_cli as C
from grpo_theory.plotting import plt, save_figure

from .measured_rival import (budget_mse_replicates, pooled_difference, rival_check, rival_plan,
                             run_entries)
from .measured_stats import (ESTIMATORS, bootstrap_argmin, budget_differences,
                             measured_group_variance, measured_mse_table, oracle_hat_extra)
from .tasks import family_items

__all__ = ["population", "prediction", "analyse", "rival_tables"]

_TAG = ["model", "rows", "n_value", "n_batches", "seed", "version"]


def population(study) -> dict:
    """The study's phase-2 prompts: questions, prefills, answers, reference rewards, meta.

    Raises:
        ValueError: a file of the study is missing (naming it and ``make smollm2-study``).
    """
    study = Path(study)
    for f in ("prompts.csv", "passrates.csv", "rollouts.npz", "meta.json"):
        if not (study / f).is_file():
            raise ValueError(f"--study {study}: {f} is missing (run make smollm2-study first)")
    meta = C.read_json(study / "meta.json", ("task", "config"))
    task = meta["task"]
    try:
        n_ref, response_len = int(meta["config"]["n_ref"]), int(meta["config"]["response_len"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{study / 'meta.json'}: the field 'config' lacks integer 'n_ref' and "
                         "'response_len'") from None
    pr = C.read_csv(study / "prompts.csv", ("prompt", "question", "score_sq")
                    ).sort_values("prompt")
    qs, pre, ans = family_items(task)
    by_q = {q: (p, a) for q, p, a in zip(qs, pre, ans)}
    ref = C.read_csv(study / "passrates.csv", ("task", "prompt", "rewards"),
                     dtype={"rewards": str})
    ref = ref[ref.task == task].set_index("prompt")
    unknown = [q for q in pr.question if q not in by_q]
    missing = [p for p in pr.prompt if p not in ref.index]
    if unknown or missing:
        raise ValueError(f"{study / 'prompts.csv'}: " + (
            f"the question {unknown[0]!r} is not of the task {task!r}" if unknown else
            f"the prompt {missing[0]} has no row in passrates.csv") + " (damaged or mixed runs)")
    ref_z = np.asarray([[int(c) for c in str(ref.loc[p, "rewards"]).zfill(n_ref)]
                        for p in pr.prompt], np.float64)
    return dict(task=task, questions=list(pr.question), prefills=[by_q[q][0] for q in pr.question],
                answers=np.asarray([by_q[q][1] for q in pr.question]), ref_rewards=ref_z,
                score_sq=pr.score_sq.to_numpy(np.float64),
                response_len=response_len, meta=meta)


def _estimate(study):
    f = C.load_npz(Path(study) / "rollouts.npz", ("rewards", "sq_norms", "mean_sq", "mean_dot"))
    return estimate_from_rollouts(f["rewards"], sq_norms=f["sq_norms"], mean_sq=f["mean_sq"],
                                  mean_dot=f["mean_dot"])


def prediction(est, N: int, G: int, estimator: str, extra=(0.0, 0.0)):
    """The advisor's MSE at B = N / G groups of G and its standard error (jackknife over the
    study's prompts); ``oracle_hat`` adds ``extra`` (:func:`.measured_stats.oracle_hat_extra`,
    per response) divided by N."""
    B = N / G
    e = "oracle" if estimator == "oracle_hat" else estimator
    val = est.mse(B, G, e)
    lo, hi = est.mse_ci(B, G, e)
    se = (hi - lo) / (2 * t_quantile(0.05, est.n_prompts))
    if estimator == "oracle_hat":
        val += extra[0] / N
        se = float(np.hypot(se, extra[1] / N))
    return float(val), float(se)


def _budget_weights(estimator: str, G: int) -> np.ndarray:
    """``w`` with ``N MSE(N, G) = w . theta`` (theta = c1, c2, c3, c_v, ||grad J||^2; the
    oracle_hat's extra term is the same at every G and cancels in differences)."""
    return {"vanilla": np.array([G, 0, 0, 1, 0.0]), "grpo": np.array([G, 1, 1 / (G - 1), 0, 0]),
            "oracle_hat": np.array([G, 1, 0, 0, 0.0])}[estimator]


def differences(groups, gram, K, est, arg) -> pd.DataFrame:
    """Measured and predicted ``N MSE(G) - N MSE(G_ref)`` against each estimator's predicted
    argmin, and the responses per G at which the measured z would reach 2 if the predicted
    difference is the true one (``rows (2 se / |predicted|)^2``, rows the responses at G)."""
    rows = groups.groupby("G").G.sum()
    out = []
    for e in ESTIMATORS:
        R = int(arg.loc[arg.estimator == e, "predicted_argmin"].iloc[0])
        d = budget_differences(groups, gram, K, e, R)
        th, cov = np.asarray(est.theta), np.asarray(est.cov)
        w = [_budget_weights(e, G) - _budget_weights(e, R) for G in d.G]
        d["predicted"] = [float(x @ th) for x in w]
        d["predicted_se"] = [float(np.sqrt(max(x @ cov @ x, 0.0))) for x in w]
        with np.errstate(divide="ignore", invalid="ignore"):
            need = d.G.map(rows).to_numpy() * (2 * d.se / d.predicted.abs()) ** 2
        d["rows_for_z2"] = np.where(d.G == R, np.nan, np.ceil(need))
        out.append(d)
    return pd.concat(out, ignore_index=True)


def _run(out):
    """A measurement's saved meta, configuration, K, groups and batch Gram matrix."""
    out = Path(out)
    meta = C.read_json(out / "measured_meta.json", ("config",))
    cfg = meta["config"]
    if not isinstance(cfg, dict) or "n_batches" not in cfg or "budgets" not in cfg \
            or "n_value" not in cfg:
        raise ValueError(f"{out / 'measured_meta.json'}: the field 'config' lacks n_batches, "
                         "budgets or n_value")
    K = int(cfg["n_batches"])
    groups = C.read_csv(out / "measured_groups.csv", ("G", "j", "batch", "k", "vhat", "s11",
                                                      "s10", "s00") + tuple(_TAG))
    batches = C.read_csv(out / "measured_batches.csv", [f"gram_{k}" for k in range(K)])
    gram = batches[[f"gram_{k}" for k in range(K)]].to_numpy(np.float64)
    return meta, cfg, K, groups, gram


def _entries(label, groups, gram, K):
    Gs, y, cov = budget_mse_replicates(groups, gram, K, "grpo")
    resp = groups.groupby("G").G.sum()
    return run_entries(label, Gs, y, cov, [int(resp[g]) for g in Gs])


def rival_tables(out, est, pool=(), target: float = 3.0):
    """GRPO's law against its rival on the run of ``out`` and the independent runs of ``pool``
    (:func:`.measured_rival.rival_check`), the pooled G = 2 against the predicted argmin, and
    the plan from ``out``'s run as the pilot (:func:`.measured_rival.rival_plan`, a new run at
    G = 2, 3 with m = 1).

    Returns:
        ``(check, plan, separation)``: two ``DataFrame``s and a dict.
    """
    runs = []
    for i, folder in enumerate([out, *pool]):
        meta, cfg, K, groups, gram = _run(folder)
        runs.append(_entries(f"seed {cfg['seed']}", groups, gram, K))
        if i == 0:
            sec = float(meta.get("seconds_groups", np.nan)) / float(
                meta.get("responses_sampled", np.nan))
    check = rival_check(runs, est.theta, est.cov, target)
    p = runs[0]
    plan = rival_plan(p["G"], np.sqrt(np.diag(p["cov"])), p["responses"], est.theta[2],
                      new_Gs=(2, 3), target=target, seconds_per_sample=sec, n_value=1)
    Gs = sorted(set(sum((r["G"] for r in runs), [])))
    ref = min(Gs, key=lambda G: G * est.mse(1, G, "grpo"))
    sep = pooled_difference(runs, min(Gs), ref, est.theta) if min(Gs) != ref else None
    return check, plan, sep


def analyse(out, study, pool=()) -> dict:
    """Tables, figure and ``MEASURED.md`` under ``out`` (module docstring), the law against its
    rival over ``out``'s run and the independent runs of ``pool`` (their output folders);
    returns the tables."""
    out = Path(out)
    meta, cfg, K, groups, gram = _run(out)
    tag = {c: groups[c].iloc[0] for c in _TAG}
    var = measured_group_variance(groups, gram, K)
    mse = measured_mse_table(var, cfg["budgets"])
    est = _estimate(study)
    pop = population(study)
    extra = oracle_hat_extra(pop["ref_rewards"], pop["score_sq"], int(cfg["n_value"]))
    pred = [prediction(est, r.N, r.G, r.estimator, extra)
            for r in mse.itertuples(index=False)]
    mse["predicted"] = [p[0] for p in pred]
    mse["predicted_se"] = [p[1] for p in pred]
    mse["z"] = (mse.mse - mse.predicted) / np.hypot(mse.se, mse.predicted_se)
    mse = mse.assign(**tag)
    mse.to_csv(out / "measured_mse.csv", index=False)
    arg = bootstrap_argmin(groups, gram, K, seed=int(cfg["seed"]))
    Gs = sorted(int(g) for g in groups.G.unique())
    arg["predicted_argmin"] = [min(Gs, key=lambda G: G * est.mse(1, G, "oracle" if e == "oracle_hat"
                                                                  else e))
                               for e in arg.estimator]
    arg = arg.assign(g_star=est.g_star, g_star_low=est.g_star_ci[0],
                     g_star_high=est.g_star_ci[1], **tag)
    arg.to_csv(out / "measured_argmin.csv", index=False)
    diff = differences(groups, gram, K, est, arg).assign(**tag)
    diff.to_csv(out / "measured_differences.csv", index=False)
    rival, plan, sep = rival_tables(out, est, pool)
    rival.assign(**tag).to_csv(out / "measured_rival.csv", index=False)
    plan.assign(**tag).to_csv(out / "measured_rival_plan.csv", index=False)
    J = var.iloc[0]
    grad = dict(measured=float(J.grad_norm_sq), measured_se=float(J.grad_norm_sq_se),
                predicted=est.grad_norm_sq, predicted_se=float(est.bse[4]))
    _figure(mse, out)
    _report(out, meta, mse, arg, grad, extra, diff, (rival, plan, sep, pool))
    return dict(variance=var, mse=mse, argmin=arg, differences=diff, grad_norm_sq=grad,
                rival=rival, rival_plan=plan, separation=sep)


def _figure(mse, out):
    N = int(mse.N.max())
    d = mse[mse.N == N]
    fig, axes = plt.subplots(1, len(ESTIMATORS), figsize=(4.2 * len(ESTIMATORS), 3.6),
                             sharey=True)
    for ax, e in zip(axes, ESTIMATORS):
        r = d[d.estimator == e].sort_values("G")
        ax.errorbar(r.G, r.mse, yerr=1.96 * r.se, fmt="o", color="C0", capsize=3,
                    label="measured (95%)")
        ax.plot(r.G, r.predicted, "-", color="C1", label="advisor's prediction")
        ax.fill_between(r.G, r.predicted - 1.96 * r.predicted_se,
                        r.predicted + 1.96 * r.predicted_se, color="C1", alpha=0.25)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{e}, N = {N}")
        ax.set_xlabel("G (B = N / G)")
    axes[0].set_ylabel("E||g_hat - grad J||^2")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out / "measured_mse")
    plt.close(fig)


def _fmt(x):
    return f"{x:.4g}"


def _per_g(mse, rows):
    """``"768 per G"``, or the responses at each G of a run stopped before ``--rows``."""
    r = mse.drop_duplicates("G").set_index("G").responses.sort_index()
    if (r == rows).all():
        return f"{rows} per G"
    return ", ".join(f"{n} at G = {g}" for g, n in r.items()) + f"; stopped before --rows {rows}"


def _report(out, meta, mse, arg, grad, extra, diff, rival):
    cfg = meta["config"]
    N = int(mse.N.max())
    d = mse[mse.N == N][["estimator", "G", "B", "replicates", "mse", "se", "predicted",
                         "predicted_se", "z"]]
    a = arg[["estimator", "argmin", "G_low", "G_high", "predicted_argmin"]
            + [c for c in arg.columns if c.startswith("share_")]]
    zmax = float(np.abs(mse[mse.N == N].z).max())
    lines = [
        "# SmolLM2-135M-Instruct: the gradient MSE against G, measured",
        "",
        "Command: `python -m grpo_theory.studies.smollm2.measured --group-sizes "
        f"{','.join(str(g) for g in cfg['group_sizes'])} --rows {cfg['rows']} --n-value "
        f"{cfg['n_value']} --n-batches {cfg['n_batches']} --seed {cfg['seed']}` (model "
        f"`{cfg['model']}`, task {meta['task']}, package {meta['version']}). {meta['groups']} "
        f"independent groups, {meta['responses_scored']} responses scored "
        f"({_per_g(mse, int(cfg['rows']))}), "
        f"{meta['responses_sampled']} sampled (with m = {cfg['n_value']} per group for the "
        f"oracle's value); {meta['seconds_groups'] / 60:.1f} min of sampling and gradients.",
        "",
        "Each group: a prompt drawn uniformly from the study's phase-2 prompts, G responses, "
        "two weighted backward passes (the rewarded and the unrewarded responses' summed "
        "scores), from which every estimator's squared norm is exact. MSE(N, G) = (G / N) "
        "(E||g_1||^2 - ||grad J||^2) for independent groups; ||grad J||^2 by the U-statistic "
        f"of {cfg['n_batches']} batch means; standard errors by delete-one-batch jackknife "
        "(the shared ||grad J||^2 included). The prediction is the advisor's, from the study's "
        "own rollouts (independent of these), with its jackknife standard error; oracle_hat "
        f"adds the term of its estimated value, E_x[V(1-V) E||s||^2] / (m N) "
        f"({_fmt(extra[0])} / (m N), se {_fmt(extra[1])} / (m N)).",
        "",
        f"## MSE at N = {N} (the table holds N = {', '.join(str(n) for n in cfg['budgets'])}; "
        "for independent groups the MSE scales as 1/N at each G)",
        "",
        markdown_table(d),
        "",
        f"Largest |z| (measured against predicted, both errors): {zmax:.2f} over {len(d)} rows.",
        "",
        "## The argmin over G (the same at every N), with its bootstrap over batches",
        "",
        markdown_table(a),
        "",
        f"The advisor's G* = {arg.g_star.iloc[0]:.3g} (Fieller 95% interval "
        f"[{arg.g_star_low.iloc[0]:.3g}, {arg.g_star_high.iloc[0]:.3g}]).",
        "",
        "## Does the measurement separate the G's? N MSE(G) - N MSE(predicted argmin)",
        "",
        "Measured difference with its jackknife se and z, the advisor's predicted difference "
        "(se from its jackknife covariance), and the responses per G at which the measured z "
        "would reach 2 if the predicted difference were the true one.",
        "",
        markdown_table(diff[["estimator", "G", "reference", "difference", "se", "z",
                             "predicted", "predicted_se", "rows_for_z2"]]),
        "",
        f"## ||grad J||^2: measured {_fmt(grad['measured'])} (se {_fmt(grad['measured_se'])}); "
        f"the advisor's {_fmt(grad['predicted'])} (se {_fmt(grad['predicted_se'])})",
        "",
        "![figure](measured_mse.png)",
        "",
    ] + _rival_lines(*rival)
    (out / "MEASURED.md").write_text("\n".join(lines))


def _rival_lines(check, plan, sep, pool):
    c = check[check.run == "combined"].iloc[0]
    cols = ["run", "G", "responses", "measured", "se", "law", "rival", "z_law", "z_rival",
            "expected_z_rival", "z_law_total", "z_rival_total"]
    runs = "this run" + "".join(f" and `{Path(p).name}/`" for p in pool)
    lines = [
        "## The law against its rival: GRPO's N MSE(G) = c1 G + c2 + c3/(G-1) or "
        "c1 G + c2 + c3/G?",
        "",
        f"Measured N MSE(G) (jackknife se) of {runs} (independent seeds; `pooled`: inverse-"
        "variance over runs; `combined`: sum_i w_i y_i with w_i = (law_i - rival_i) / se_i^2 "
        "over every run and G, its se from the runs' jackknife covariances), against the law and "
        "the rival at the advisor's constants. z_rival = (measured - rival) / se, and "
        "expected_z_rival = (law - rival) / se, its mean if the law holds; the `_total` columns "
        "add the constants' own jackknife error to se. The rival counts as excluded at "
        "z_rival >= 3 (measured se).",
        "",
        markdown_table(check[cols]),
        "",
        f"Combined: the rival at z = {c.z_rival:.2f} (expected {c.expected_z_rival:.2f} if the "
        f"law holds; {c.z_rival_total:.2f} with the constants' error), the law at z = "
        f"{c.z_law:.2f}: the rival is {'' if c.rival_excluded else 'not '}excluded at 3 se.",
        "",
    ]
    if sep is not None:
        lines += [
            f"G = {sep['G']} (pooled, {sep['responses']} responses) against the predicted "
            f"argmin G = {sep['reference']}: N MSE difference {_fmt(sep['difference'])} "
            f"(se {_fmt(sep['se'])}, z = {sep['z']:.2f}; predicted {_fmt(sep['predicted'])}).",
            "",
        ]
    lines += [
        "### The plan: responses that put the rival at 3 se if the law holds (this run as the "
        "pilot)",
        "",
        "d = c3 / (G (G - 1)) (law minus rival), v = se^2 responses (at G = 3, if unmeasured, "
        "interpolated in log G), pilot_z = the pilot's expected z, added_per_G = responses to "
        "add at each G of the design, sampled and minutes with m = 1 further response per group "
        "at the pilot's seconds per sampled response (entries independent: the shared "
        "||grad J||^2 ignored).",
        "",
        markdown_table(plan),
        "",
    ]
    return lines
