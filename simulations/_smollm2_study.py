r"""The advisor's study on a real pretrained model: SmolLM2-135M-Instruct on arithmetic (issue 19 D).

Not a registered experiment (``make reproduce`` runs every registered experiment on a fresh
clone, which has no model file): the real file comes from ``make smollm2`` and the study runs as

    make smollm2-study        # = python simulations/_smollm2_study.py --model <gguf> --out results-full/smollm2

Phase 1 (task choice): for each candidate prompt family (:data:`CANDIDATES`: one-digit
additions, subtractions, multiplications, a few-shot two-digit format) ``n_prompts`` questions,
``n_ref`` responses each, sampled at T = 1 with the checkpoint's chat template and scored by
:func:`grpo_theory.lm.task.reward_answer_text`; the family with the most prompts whose pass rate
lies in [0.2, 0.8] is the task (``passrates.csv``, ``passrates_summary.csv``).

Phase 2 (the advisor): on the chosen family's same prompts, ``n_samples`` fresh responses each
and their per-sample scores (:func:`grpo_theory.advisor.estimate.lm_rollout_statistics`, scores
streamed in chunks) give the unbiased U-statistic estimates of c1, c2, c3, G* with jackknife and
Fieller intervals (``constants.csv``); the predicted MSE of the vanilla, GRPO and oracle
estimators against G (:meth:`ScalingEstimate.mse`, intervals :meth:`ScalingEstimate.mse_ci`;
``mse.csv``): estimates from rollouts, not a Monte Carlo against an exact gradient, which a chat
model's free-text answers do not allow; the zero-variance share ``E_X[V^G + (1 - V)^G]`` predicted
from phase 1's independent responses (the unbiased ``C(k,G)/C(n,G)`` per prompt) against the
share observed in phase 2 (disjoint sub-groups of G of each prompt's ``n_samples`` responses;
``zero_variance.csv``); the recommended G per budget N = B G (``budgets.csv``). Every row of every
table carries the configuration, seed and package version; the figure is drawn from the saved
tables and ``REPORT.md`` is written from them. Phase 2's rollouts are saved (``rollouts.npz``),
so a rerun with the same configuration only redraws the tables.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import jax
import numpy as np
import pandas as pd

import grpo_theory
from grpo_theory import _validation as V
from grpo_theory.advisor.advise import c1_warning
from grpo_theory.advisor.estimate import (ScalingEstimate, estimate_from_rollouts,
                                          lm_rollout_statistics, t_quantile)
from grpo_theory.lm.task import reward_answer_text
from grpo_theory.plotting import plt, save_figure

__all__ = ["CANDIDATES", "StudyConfig", "candidate_questions", "sample_pass_rates",
           "choose_task", "zero_variance_table", "mse_table", "budget_table", "run_study",
           "figure", "report", "main"]

#: the pass-rate window the task must spread over
WINDOW = (0.2, 0.8)
#: G values of the MSE table (the MSE scales as 1/B: the table is at B = 1)
MSE_GROUP_SIZES = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
BUDGETS = (16, 64, 256, 1024, 4096)


_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
#: candidate families: name -> (operator, pairs (a, b)); one-digit +, -, x, one-digit + two-digit,
#: two-digit + two-digit
_PAIRS = {
    "add1": ("+", [(a, b) for a in range(1, 10) for b in range(1, 10)]),
    "sub1": ("-", [(a, b) for a in range(1, 10) for b in range(1, a + 1)]),
    "mul1": ("*", [(a, b) for a in range(2, 10) for b in range(2, 10)]),
    "add12": ("+", [(a, b) for a in range(2, 10) for b in range(11, 99, 7)]),
    "add2": ("+", [(a, b) for a in range(11, 99, 6) for b in range(11, 99, 7)]),
}
#: candidate prompt families (:data:`_PAIRS`); every prompt is the user turn "What is a op b?"
#: with the assistant's turn opened by the chat template and prefilled with "a op b =", so the
#: response starts at the answer
CANDIDATES = tuple(_PAIRS)


def _family(name):
    """(user questions, assistant prefills, answers) of a candidate family, in a fixed order."""
    if name not in _PAIRS:
        raise ValueError(f"task must be one of {list(CANDIDATES)}, got {name!r}")
    op, pairs = _PAIRS[name]
    return ([f"What is {a} {op} {b}?" for a, b in pairs], [f"{a} {op} {b} =" for a, b in pairs],
            [_OPS[op](a, b) for a, b in pairs])


def candidate_questions(name: str, n_prompts: int, seed: int):
    """``n_prompts`` distinct questions of family ``name`` drawn without replacement.

    Args:
        name: one of :data:`CANDIDATES`.
        n_prompts: how many (at most the family's size).
        seed: integer seed (the same seed gives the same questions).

    Returns:
        ``(questions list[str], prefills list[str], answers (n,) int)``.
    """
    qs, pre, ans = _family(name)
    n = V.integer("n_prompts", n_prompts, 1, len(qs))
    rows = np.sort(np.random.default_rng(seed).choice(len(qs), n, replace=False))
    return [qs[i] for i in rows], [pre[i] for i in rows], np.asarray(ans)[rows]


def _texts(policy, responses):
    """Response ids (N, R) -> texts cut at the first EOS, special tokens dropped."""
    out = []
    for row in np.asarray(responses).tolist():
        cut = next((j for j, t in enumerate(row) if t in policy.eos_ids), len(row))
        out.append(policy.tokenizer.decode(row[:cut], skip_special_tokens=True))
    return out


def _prompts(policy, questions, prefills):
    """Chat-template prompts (left-padded ids): the user turn, the assistant's turn opened and
    prefilled (plain ``question prefill`` text without a template)."""
    if getattr(policy, "chat_template", None):
        texts = [c + p for c, p in zip(policy.chat(questions), prefills)]
    else:
        texts = [f"{q} {p}" for q, p in zip(questions, prefills)]
    return policy.encode(texts)


def _rewards(texts, answers, reward=reward_answer_text):
    return np.asarray([float(reward(t, int(a))) for t, a in zip(texts, answers)], np.float64)


def sample_pass_rates(policy, questions, prefills, answers, n_samples: int, response_len: int, seed,
                      block: int = 64, progress: bool = True, reward=reward_answer_text):
    """Per-prompt pass rates of ``policy`` sampled at its temperature (no gradients).

    Args:
        policy: an :class:`grpo_theory.lm.hf.HFPolicy` (chat template used when it has one).
        questions: list of n question texts; prefills: the assistant turn's opening texts;
            answers: (n,) integers.
        n_samples: responses per question (>= 1).
        response_len: tokens per response (>= 1).
        seed: integer seed.
        block: rows sampled per call (a fixed shape: one compilation).
        progress: a tqdm bar on stderr.
        reward: ``reward(text, answer) -> 0.0 or 1.0`` (default
            :func:`grpo_theory.lm.task.reward_answer_text`).

    Returns:
        ``(rewards (n, n_samples), texts list of n lists)``.
    """
    n = V.positive_int("n_samples", n_samples)
    R = V.positive_int("response_len", response_len)
    block = V.positive_int("block", block)
    answers = np.asarray(answers)
    if len(questions) != answers.shape[0]:
        raise ValueError(f"questions and answers must have the same length, got "
                         f"{len(questions)} and {answers.shape[0]}")
    x = np.repeat(_prompts(policy, questions, prefills), n, axis=0)
    total = x.shape[0]
    block = min(block, total)
    pad = (-total) % block  # the last block filled up with copies of row 0 (one shape)
    xs = np.concatenate([x, np.repeat(x[:1], pad, axis=0)]) if pad else x
    keys = jax.random.split(jax.random.PRNGKey(int(seed)), xs.shape[0] // block)
    from tqdm.auto import tqdm

    ys = []
    with tqdm(total=total, desc="pass rates: responses", disable=not progress,
              file=sys.stderr) as bar:
        for b, k in enumerate(keys):
            ys.append(np.asarray(policy.sample(k, xs[b * block:(b + 1) * block], R)))
            bar.update(min(block, total - b * block))
    y = np.concatenate(ys)[:total]
    texts = _texts(policy, y)
    z = _rewards(texts, np.repeat(answers, n), reward)
    return z.reshape(-1, n), [texts[i * n:(i + 1) * n] for i in range(len(questions))]


def choose_task(summary: pd.DataFrame) -> str:
    """The family with the largest share of prompts whose pass rate lies in :data:`WINDOW`
    (ties: the mean pass rate closest to 1/2)."""
    s = summary.assign(_d=(summary.mean_pass_rate - 0.5).abs())
    s = s.sort_values(["share_in_window", "_d"], ascending=[False, True])
    return str(s.task.iloc[0])


# --- the tables -------------------------------------------------------------------------------------

def _unbiased_all_equal(k, n, G):
    """Per prompt, the unbiased estimate ``(C(k,G) + C(n-k,G)) / C(n,G)`` of ``V^G + (1-V)^G``."""
    tot = math.comb(n, G)
    return np.asarray([(math.comb(int(kk), G) + math.comb(n - int(kk), G)) / tot
                       for kk in np.asarray(k)])


def _mean_ci(x, alpha=0.05):
    """Mean and t interval over prompts (the spread of per-prompt values)."""
    x = np.asarray(x, np.float64)
    m = x.shape[0]
    se = float(np.std(x, ddof=1) / np.sqrt(m)) if m > 1 else float("nan")
    q = t_quantile(alpha, m) if m > 1 else float("nan")
    mu = float(np.mean(x))
    return mu, se, mu - q * se, mu + q * se


def zero_variance_table(ref_rewards, rewards, group_sizes=None) -> pd.DataFrame:
    r"""Share of zero-variance (all-equal) groups of G: predicted vs observed.

    Predicted: ``mean_x [V(x)^G + (1 - V(x))^G]`` with each prompt's ``V^G`` estimated without
    bias from independent reference responses (``C(k,G)/C(n_ref,G)``, k correct of ``n_ref``),
    and the plug-in ``V-hat^G + (1 - V-hat)^G`` of those pass rates (biased upwards, shown for
    comparison). Observed: each prompt's ``n`` responses split into ``floor(n/G)`` disjoint
    sub-groups of G in sampling order; the share of them that are all-equal. Intervals: t over
    prompts (95%).

    Args:
        ref_rewards: (m, n_ref) binary rewards of the reference (pass-rate) responses.
        rewards: (m, n) binary rewards of the study's responses, the same m prompts.
        group_sizes: G values (default: every G in [2, n] that divides n).

    Returns:
        ``pandas.DataFrame`` one row per G: ``G, groups_per_prompt, predicted, predicted_low,
        predicted_high, predicted_plugin, observed, observed_low, observed_high, z`` (observed
        minus predicted over the standard error of the per-prompt differences).
    """
    zr = V.finite_array("ref_rewards", ref_rewards, ndim=2)
    z = V.finite_array("rewards", rewards, ndim=2)
    for name, a in (("ref_rewards", zr), ("rewards", z)):
        if not np.all((a == 0) | (a == 1)):
            raise ValueError(f"{name} must be binary (0/1)")
    if zr.shape[0] != z.shape[0]:
        raise ValueError(f"ref_rewards and rewards must have the same prompts (rows), got "
                         f"{zr.shape[0]} and {z.shape[0]}")
    m, n = z.shape
    n_ref = zr.shape[1]
    if group_sizes is None:
        group_sizes = [G for G in range(2, n + 1) if n % G == 0]
    k = zr.sum(axis=1)
    v = k / n_ref
    rows = []
    for G in group_sizes:
        G = V.integer("group_sizes", G, 1, min(n, n_ref))
        pred = _unbiased_all_equal(k, n_ref, G)
        nb = n // G
        blocks = z[:, :nb * G].reshape(m, nb, G)
        obs = np.mean(np.all(blocks == blocks[:, :, :1], axis=2), axis=1)
        mp, _, pl, ph = _mean_ci(pred)
        mo, _, ol, oh = _mean_ci(obs)
        _, sd, _, _ = _mean_ci(obs - pred)
        rows.append(dict(G=G, groups_per_prompt=nb, predicted=mp, predicted_low=pl,
                         predicted_high=ph, predicted_plugin=float(np.mean(v**G + (1 - v)**G)),
                         observed=mo, observed_low=ol, observed_high=oh,
                         z=(mo - mp) / sd if sd > 0 else float("nan")))
    return pd.DataFrame(rows)


def mse_table(est: ScalingEstimate, group_sizes=MSE_GROUP_SIZES) -> pd.DataFrame:
    """Predicted per-prompt MSE (B = 1; at B prompts divide by B) of vanilla, GRPO and oracle
    against G, with 95% jackknife intervals (:meth:`ScalingEstimate.mse_ci`)."""
    rows = []
    for est_name in ("vanilla", "grpo", "oracle"):
        for G in group_sizes:
            lo, hi = est.mse_ci(1, G, est_name)
            rows.append(dict(estimator=est_name, G=int(G), B=1, mse=est.mse(1, G, est_name),
                             mse_low=lo, mse_high=hi,
                             budget_mse=G * est.mse(1, G, est_name)))
    return pd.DataFrame(rows)


def budget_table(est: ScalingEstimate, budgets=BUDGETS) -> pd.DataFrame:
    """Recommended G per budget N = B G (:meth:`ScalingEstimate.recommended_group_size`) and the
    integer range the G* interval allows (floor(low) .. ceil(high), clipped to [2, N])."""
    lo, hi = est.g_star_ci
    rows = []
    for N in budgets:
        G = est.recommended_group_size(N)
        g_lo = 2 if not math.isfinite(lo) else min(max(2, math.floor(lo)), N)
        g_hi = N if not math.isfinite(hi) else min(max(2, math.ceil(hi)), N)
        rows.append(dict(N=int(N), G=int(G), B=int(N // G), G_low=g_lo, G_high=g_hi))
    return pd.DataFrame(rows)


# --- the study ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class StudyConfig:
    """The study's configuration (every table row carries it).

    Attributes:
        model: the ``.gguf`` file (or checkpoint folder) read by
            :func:`grpo_theory.lm.from_pretrained`.
        tasks: candidate families measured in phase 1 (:data:`CANDIDATES`).
        task: the family of phase 2 (None: chosen from phase 1 by :func:`choose_task`).
        n_prompts: prompts per family (m; phase 2 uses the same prompts).
        n_ref: responses per prompt in phase 1.
        n_study: prompts of phase 2 (None: all ``n_prompts``; else a random subset of the
            chosen family's phase-1 prompts, drawn without replacement, >= 3).
        n_samples: responses per prompt in phase 2 (n >= 3).
        response_len: tokens per response (both phases).
        chunk: per-sample scores held at once in phase 2.
        seed: integer seed.
    """

    model: str
    tasks: tuple = CANDIDATES
    task: str | None = None
    n_prompts: int = 32
    n_ref: int = 8
    n_study: int | None = None
    n_samples: int = 8
    response_len: int = 10
    chunk: int = 4
    seed: int = 0

    def key(self, *fields) -> str:
        d = {f: getattr(self, f) for f in fields}
        d["model"] = Path(self.model).name
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _tag(cfg: StudyConfig, task: str) -> dict:
    return dict(model=Path(cfg.model).name, task=task, n_prompts=cfg.n_prompts, n_ref=cfg.n_ref,
                n_study=_n_study(cfg), n_samples=cfg.n_samples, response_len=cfg.response_len,
                chunk=cfg.chunk,
                seed=cfg.seed, version=grpo_theory.__version__)


def _n_study(cfg: StudyConfig) -> int:
    return cfg.n_prompts if cfg.n_study is None else cfg.n_study


def _study_rows(cfg: StudyConfig) -> np.ndarray:
    """Indices (sorted) of the phase-1 prompts that phase 2 uses."""
    if cfg.n_study is None:
        return np.arange(cfg.n_prompts)
    m = V.integer("n_study", cfg.n_study, 3, cfg.n_prompts)
    return np.sort(np.random.default_rng(cfg.seed + 1).choice(cfg.n_prompts, m, replace=False))


def _with_tag(df: pd.DataFrame, tag: dict) -> pd.DataFrame:
    return df.assign(**tag)


def _log(msg, progress):
    if progress:
        print(f"smollm2-study: {msg}", file=sys.stderr, flush=True)


def _phase1(policy, cfg: StudyConfig, out: Path, progress: bool, reward):
    """Pass rates of every candidate family (resumes family by family from passrates.csv)."""
    path = out / "passrates.csv"
    old = pd.read_csv(path, dtype={"rewards": str}) if path.is_file() else None
    frames = []
    for t_i, task in enumerate(cfg.tasks):
        if old is not None:
            hit = old[(old.task == task) & (old.n_prompts == cfg.n_prompts)
                      & (old.n_ref == cfg.n_ref) & (old.response_len == cfg.response_len)
                      & (old.seed == cfg.seed) & (old.model == Path(cfg.model).name)]
            if len(hit) == cfg.n_prompts:
                frames.append(hit.assign(**_tag(cfg, task)))
                continue
        qs, pre, ans = candidate_questions(task, cfg.n_prompts, cfg.seed)
        t0 = time.time()
        z, texts = sample_pass_rates(policy, qs, pre, ans, cfg.n_ref, cfg.response_len,
                                     cfg.seed * 1000 + t_i, progress=progress, reward=reward)
        _log(f"pass rates of {task}: mean {z.mean():.3f} ({time.time() - t0:.0f}s)", progress)
        df = pd.DataFrame(dict(prompt=np.arange(len(qs)), question=qs, prefill=pre, answer=ans,
                               correct=z.sum(axis=1).astype(int), pass_rate=z.mean(axis=1),
                               rewards=["".join(str(int(r)) for r in row) for row in z],
                               example=[t[0] for t in texts]))
        frames.append(_with_tag(df, _tag(cfg, task)))
        pd.concat(frames, ignore_index=True).to_csv(path, index=False)  # resume point
    table = pd.concat(frames, ignore_index=True)
    table.to_csv(path, index=False)
    lo, hi = WINDOW
    summary = table.groupby("task", sort=False).agg(
        mean_pass_rate=("pass_rate", "mean"), median_pass_rate=("pass_rate", "median"),
        share_in_window=("pass_rate", lambda v: float(np.mean((v >= lo) & (v <= hi)))),
        share_zero=("pass_rate", lambda v: float(np.mean(v == 0))),
        share_one=("pass_rate", lambda v: float(np.mean(v == 1))),
        q10=("pass_rate", lambda v: float(np.quantile(v, 0.1))),
        q90=("pass_rate", lambda v: float(np.quantile(v, 0.9)))).reset_index()
    return table, summary


def run_study(policy, cfg: StudyConfig, out, progress: bool = True,
              reward=reward_answer_text) -> dict:
    """Both phases and every table, the figure and REPORT.md under ``out`` (module docstring).

    Args:
        policy: the loaded model (:func:`grpo_theory.lm.from_pretrained` of ``cfg.model``).
        cfg: :class:`StudyConfig`.
        out: output folder.
        progress: bars and log lines on stderr.
        reward: ``reward(text, answer) -> 0.0 or 1.0`` (default
            :func:`grpo_theory.lm.task.reward_answer_text`).

    Returns:
        dict of the tables (``passrates``, ``passrates_summary``, ``constants``, ``mse``,
        ``zero_variance``, ``budgets``, ``prompts``, ``responses``) and ``estimate``.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for t in cfg.tasks:
        _family(t)
    if cfg.task is not None and cfg.task not in cfg.tasks:
        raise ValueError(f"task {cfg.task!r} must be one of the measured tasks {list(cfg.tasks)}")
    V.integer("n_samples", cfg.n_samples, 3)
    V.integer("n_prompts", cfg.n_prompts, 3)
    rows = _study_rows(cfg)
    t0 = time.time()
    passrates, summary = _phase1(policy, cfg, out, progress, reward)
    task = cfg.task if cfg.task is not None else choose_task(summary)
    summary = summary.assign(chosen=summary.task == task)
    tag = _tag(cfg, task)
    summary = _with_tag(summary.drop(columns="task"), tag).assign(task=summary.task)
    summary.to_csv(out / "passrates_summary.csv", index=False)
    _log(f"task: {task}; phase 2 on {len(rows)} prompts x {cfg.n_samples} responses", progress)

    qs, pre, ans = candidate_questions(task, cfg.n_prompts, cfg.seed)
    qs, pre, ans = [qs[i] for i in rows], [pre[i] for i in rows], ans[rows]
    ref = passrates[passrates.task == task].sort_values("prompt").iloc[rows]
    ref_z = np.asarray([[int(c) for c in str(s).zfill(cfg.n_ref)] for s in ref.rewards],
                       np.float64)
    roll = out / "rollouts.npz"
    ckey = cfg.key("n_prompts", "n_study", "n_samples", "response_len", "seed") + task
    st = None
    if roll.is_file():
        with np.load(roll) as f:
            if str(f["key"]) == ckey:
                st = {k: f[k] for k in ("rewards", "sq_norms", "mean_sq", "mean_dot",
                                        "responses")}
                _log("phase 2: rollouts loaded from rollouts.npz", progress)
    if st is None:
        from tqdm.auto import tqdm

        x = _prompts(policy, qs, pre)
        bar = tqdm(total=len(qs), desc="advisor: per-prompt gradients", disable=not progress,
                   file=sys.stderr)

        def tok_reward(rows, y):
            return _rewards(_texts(policy, y), ans[np.asarray(rows)], reward)

        t1 = time.time()
        _log("phase 2: sampling and per-sample scores (chunks of "
             f"{cfg.chunk}); then one gradient per prompt", progress)
        st = lm_rollout_statistics(policy, x, tok_reward, cfg.n_samples, cfg.seed + 7,
                                   cfg.response_len, cfg.chunk,
                                   progress=lambda d, t: bar.update(d - bar.n))
        bar.close()
        st["seconds"] = np.asarray(time.time() - t1)
        np.savez(roll, key=ckey, **st)
    est = estimate_from_rollouts(st["rewards"], sq_norms=st["sq_norms"], mean_sq=st["mean_sq"],
                                 mean_dot=st["mean_dot"])
    texts = _texts(policy, np.asarray(st["responses"]).reshape(-1, cfg.response_len))
    n = cfg.n_samples
    responses = _with_tag(pd.DataFrame(dict(
        prompt=np.repeat(rows, n), sample=np.tile(np.arange(n), len(qs)),
        question=np.repeat(qs, n), answer=np.repeat(ans, n), response=texts,
        reward=np.asarray(st["rewards"]).reshape(-1))), tag)
    constants = _with_tag(est.summary().rename_axis("parameter").reset_index(), tag)
    mse = _with_tag(mse_table(est), tag)
    zv = _with_tag(zero_variance_table(ref_z, st["rewards"]), tag)
    budgets = _with_tag(budget_table(est), tag)
    prompts = _with_tag(est.prompt_table().assign(prompt=rows, question=qs,
                                                  answer=ans, ref_pass_rate=ref_z.mean(axis=1)),
                        tag)
    tables = dict(passrates=passrates, passrates_summary=summary, constants=constants, mse=mse,
                  zero_variance=zv, budgets=budgets, prompts=prompts, responses=responses)
    for name, df in tables.items():
        df.to_csv(out / f"{name}.csv", index=False)
    meta = dict(config=asdict(cfg), task=task, version=grpo_theory.__version__,
                dim=int(sum(np.size(p) for p in jax.tree_util.tree_leaves(policy.params))), seconds_total=time.time() - t0,
                seconds_phase2=float(st.get("seconds", np.nan)))
    meta["config"]["model"] = Path(cfg.model).name
    meta["c1_warning"] = c1_warning(est)
    (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    figure(out)
    report(out)
    return dict(tables, estimate=est)


def figure(out) -> list:
    """The study's figure from the saved tables under ``out`` (``smollm2.png``/``.pdf``)."""
    out = Path(out)
    pr = pd.read_csv(out / "passrates.csv")
    summ = pd.read_csv(out / "passrates_summary.csv")
    mse = pd.read_csv(out / "mse.csv")
    zv = pd.read_csv(out / "zero_variance.csv")
    const = pd.read_csv(out / "constants.csv").set_index("parameter")
    task = str(summ.loc[summ.chosen.astype(bool), "task"].iloc[0])
    fig, ax = plt.subplots(1, 4, figsize=(18, 3.8))
    bins = np.linspace(0, 1, 18)
    for t in summ.task:
        v = pr.loc[pr.task == t, "pass_rate"]
        ax[0].hist(v, bins=bins, histtype="step", lw=2.5 if t == task else 1,
                   label=t + (" (chosen)" if t == task else ""))
    ax[0].axvspan(*WINDOW, color="0.9", zorder=0)
    ax[0].set(xlabel="pass rate per prompt (T = 1)", ylabel="prompts",
              title="task choice: pass rates")
    ax[0].legend(fontsize=7)
    for i, e in enumerate(("vanilla", "grpo", "oracle")):
        t = mse[mse.estimator == e]
        ax[1].plot(t.G, t.mse, "o-", color=f"C{i}", ms=3, label=e)
        ax[1].fill_between(t.G, np.maximum(t.mse_low, mse.mse.min() / 4), t.mse_high,
                           color=f"C{i}", alpha=0.15)  # a lower end <= 0 drawn at the floor
    ax[1].set(xscale="log", yscale="log", xlabel="G", ylabel="predicted MSE (B = 1)",
              title="Figure 4 analogue (estimates, 95% CI)")
    ax[1].legend()
    t = mse[mse.estimator == "grpo"]
    ax[2].plot(t.G, t.budget_mse, "o-", color="C1")
    g, lo, hi = (const.loc["g_star", c] for c in ("estimate", "ci_low", "ci_high"))
    if np.isfinite(g):
        ax[2].axvline(g, color="C3", label=f"G* = {g:.1f}")
    ax[2].axvspan(max(lo, 1) if np.isfinite(lo) else 1, hi if np.isfinite(hi) else t.G.max(),
                  color="C3", alpha=0.15, label="95% CI")
    ax[2].set(xscale="log", xlabel="G", ylabel="N x MSE_grpo(N/G, G)",
              title="GRPO at a fixed budget N = BG")
    ax[2].legend()
    ax[3].errorbar(zv.G - 0.08, zv.predicted, yerr=[zv.predicted - zv.predicted_low,
                                                    zv.predicted_high - zv.predicted],
                   fmt="o", label="predicted (phase 1 pass rates)")
    ax[3].errorbar(zv.G + 0.08, zv.observed, yerr=[zv.observed - zv.observed_low,
                                                   zv.observed_high - zv.observed],
                   fmt="s", label="observed (disjoint groups)")
    ax[3].set(xlabel="G", ylabel="share", title="zero-variance groups", ylim=(0, 1))
    ax[3].legend(fontsize=8)
    from matplotlib.ticker import FuncFormatter, NullFormatter

    for a in ax[1:3]:
        a.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        a.xaxis.set_minor_formatter(NullFormatter())
    fig.suptitle(f"SmolLM2-135M-Instruct, task {task}", y=1.02)
    fig.tight_layout()
    return save_figure(fig, out / "smollm2")


def _md(df: pd.DataFrame, cols, fmt="{:.4g}") -> str:
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    body = ""
    for _, r in df.iterrows():
        cells = [fmt.format(r[c]) if isinstance(r[c], (float, np.floating)) else str(r[c])
                 for c in cols]
        body += "| " + " | ".join(cells) + " |\n"
    return head + body


def report(out) -> Path:
    """REPORT.md under ``out`` from the saved tables and meta.json."""
    out = Path(out)
    meta = json.loads((out / "meta.json").read_text())
    summ = pd.read_csv(out / "passrates_summary.csv")
    const = pd.read_csv(out / "constants.csv")
    mse = pd.read_csv(out / "mse.csv")
    zv = pd.read_csv(out / "zero_variance.csv")
    bud = pd.read_csv(out / "budgets.csv")
    c = meta["config"]
    c1 = const.set_index("parameter").loc["c1"]
    piv = mse.pivot(index="G", columns="estimator", values="mse").reset_index()
    lines = [
        "# SmolLM2-135M-Instruct: the advisor on a real model (issue 19 D)", "",
        f"Command: `make smollm2-study` (model file `{c['model']}`, D = {meta['dim']:,} "
        f"parameters; package {meta['version']}; seed {c['seed']}). Total "
        f"{meta['seconds_total'] / 60:.1f} min, of which the advisor's rollouts and gradients "
        f"{meta['seconds_phase2'] / 60:.1f} min (nan: loaded from rollouts.npz).", "",
        f"## Task choice (phase 1: {c['n_prompts']} prompts x {c['n_ref']} responses of "
        f"{c['response_len']} tokens, T = 1, chat template)", "",
        _md(summ, ["task", "mean_pass_rate", "median_pass_rate", "share_in_window",
                   "share_zero", "share_one", "q10", "q90", "chosen"], "{:.3f}"),
        f"Chosen: **{meta['task']}** (largest share of prompts with pass rate in "
        f"[{WINDOW[0]}, {WINDOW[1]}]).", "",
        f"## Constants (phase 2: {c['n_study'] or c['n_prompts']} of those prompts x "
        f"{c['n_samples']} responses, scores in chunks of {c['chunk']})", "",
        _md(const, ["parameter", "estimate", "std_err", "ci_low", "ci_high"]),
        f"c1 {'is' if c1.ci_low > 0 else 'is NOT'} resolved above zero (95% CI "
        f"[{c1.ci_low:.4g}, {c1.ci_high:.4g}]).", "",
        *([meta["c1_warning"], ""] if meta.get("c1_warning") else []),
        "## Predicted MSE against G (B = 1; estimates from rollouts, not a Monte Carlo)", "",
        _md(piv, list(piv.columns)),
        "Intervals per row in `mse.csv` (`mse_low`, `mse_high`).", "",
        "## Zero-variance share: predicted (phase 1) vs observed (phase 2, disjoint groups)", "",
        _md(zv, ["G", "groups_per_prompt", "predicted", "predicted_low", "predicted_high",
                 "predicted_plugin", "observed", "observed_low", "observed_high", "z"], "{:.3f}"),
        "## Recommended G per budget N = B G", "",
        _md(bud, ["N", "G", "B", "G_low", "G_high"]),
        "![figure](smollm2.png)", ""]
    p = out / "REPORT.md"
    p.write_text("\n".join(lines))
    return p


def main(argv=None) -> int:
    """Command line: ``python simulations/_smollm2_study.py --model FILE --out DIR [...]``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="the SmolLM2 .gguf file (make smollm2)")
    ap.add_argument("--out", default="results-full/smollm2")
    ap.add_argument("--tasks", default=",".join(CANDIDATES))
    ap.add_argument("--task", default=None, help="phase 2's family (default: chosen)")
    ap.add_argument("--n-prompts", type=int, default=StudyConfig.n_prompts)
    ap.add_argument("--n-ref", type=int, default=StudyConfig.n_ref)
    ap.add_argument("--n-study", type=int, default=None,
                    help="phase 2's prompts: a random subset of phase 1's (default: all)")
    ap.add_argument("--n-samples", type=int, default=StudyConfig.n_samples)
    ap.add_argument("--response-len", type=int, default=StudyConfig.response_len)
    ap.add_argument("--chunk", type=int, default=StudyConfig.chunk)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--passrates-only", action="store_true",
                    help="phase 1 only: passrates.csv and passrates_summary.csv")
    a = ap.parse_args(argv)
    from grpo_theory.lm import from_pretrained

    cfg = StudyConfig(model=str(Path(a.model).expanduser()), tasks=tuple(a.tasks.split(",")),
                      task=a.task, n_prompts=a.n_prompts, n_ref=a.n_ref, n_study=a.n_study,
                      n_samples=a.n_samples, response_len=a.response_len, chunk=a.chunk,
                      seed=a.seed)
    t0 = time.time()
    policy = from_pretrained(cfg.model)
    _log(f"loaded {cfg.model} ({time.time() - t0:.0f}s)", True)
    if a.passrates_only:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        table, summary = _phase1(policy, cfg, out, True, reward_answer_text)
        summary.to_csv(out / "passrates_summary.csv", index=False)
        print(summary.to_string())
        return 0
    res = run_study(policy, cfg, a.out)
    print((Path(a.out) / "REPORT.md").read_text())
    del res
    return 0


if __name__ == "__main__":
    sys.exit(main())
