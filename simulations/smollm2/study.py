r"""The advisor's study on a real pretrained model: SmolLM2-135M-Instruct on arithmetic.

Not a registered experiment (``make reproduce`` runs every registered experiment on a fresh
clone, which has no model file): the real file comes from ``make smollm2`` and the study runs as

    make smollm2-study   # = python -m grpo_theory.studies.smollm2 --model <gguf> --out <dir>

Phase 1 (task choice): for each candidate prompt family (:data:`CANDIDATES`: one-digit
additions, subtractions, multiplications, one- and two-digit additions, and the one-digit
families with the instruction "Answer with the number only.") ``n_prompts`` questions (or all
the family has), ``n_ref`` responses each, sampled at T = 1 with the checkpoint's chat template
and scored by :func:`grpo_theory.lm.task.reward_answer_text`; the family with the most prompts
whose pass rate lies in [0.2, 0.8] is the task (``passrates.csv``, ``passrates_summary.csv``).

Phase 2 (the advisor): on the chosen family's same prompts, ``n_samples`` fresh responses each
and their per-sample scores (:func:`grpo_theory.lm.budget.statistics.lm_rollout_statistics`, scores
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
so a rerun with the same configuration only redraws the tables (prompt families and pass
rates: ``tasks``; tables, figure and report:
``analysis``). Phase 2's mean pass rate is compared with phase 1's on the same prompts
(a paired t interval in ``meta.json`` and the report): both sample the same policy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import jax
import numpy as np
import pandas as pd

import grpo_theory
from grpo_theory import _validation as V
from grpo_theory.advisor import c1_warning, estimate_from_rollouts
from grpo_theory.lm import lm_rollout_statistics, reward_answer_text
from grpo_theory.experiments import study_cli as C
from grpo_theory.lm.checkpoints import response_texts

from .analysis import (WINDOW, budget_table, figure, mse_table, prompt_mean_ci, report,
                       zero_variance_table)
from .tasks import (CANDIDATES, candidate_questions, chat_prompts, choose_task, family_items,
                    family_size, sample_pass_rates, text_rewards)

__all__ = ["CANDIDATES", "StudyConfig", "candidate_questions", "sample_pass_rates",
           "choose_task", "zero_variance_table", "mse_table", "budget_table", "run_study",
           "figure", "report", "main"]

@dataclass(frozen=True)
class StudyConfig:
    """The study's configuration (every table row carries it).

    Attributes:
        model: the ``.gguf`` file (or checkpoint folder) read by
            :func:`grpo_theory.lm.from_pretrained`.
        tasks: candidate families measured in phase 1 (:data:`CANDIDATES`).
        task: the family of phase 2 (None: chosen from phase 1 by :func:`choose_task`).
        n_prompts: prompts per family (m; a family with fewer questions, e.g. ``sub1`` with
            45, uses all of them; phase 2 uses the same prompts).
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
        """The resume key of ``fields``: the model by its content (:func:`model_hash`), not
        its file name."""
        d = {f: getattr(self, f) for f in fields}
        d["model"] = model_hash(self.model)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]


def model_hash(model) -> str:
    """The model file's (or folder's) content hash (cached by path, size and modification
    time): two models with the same file name resume nothing of each other."""
    p = Path(model)
    st = p.stat() if p.exists() else None
    return _hash(str(p.resolve()), st and st.st_size, st and st.st_mtime_ns)


@lru_cache(maxsize=8)
def _hash(path, size, mtime):
    return C.content_hash(path, "--model")


def _tag(cfg: StudyConfig, task: str) -> dict:
    return dict(model=Path(cfg.model).name, model_sha256=model_hash(cfg.model), task=task, n_prompts=_n_task(cfg, task), n_ref=cfg.n_ref,
                n_study=_n_study(cfg, task), n_samples=cfg.n_samples, response_len=cfg.response_len,
                chunk=cfg.chunk,
                seed=cfg.seed, version=grpo_theory.__version__)


def _n_task(cfg: StudyConfig, task: str) -> int:
    """Phase 1's prompts of family ``task``: ``n_prompts`` or all the family has."""
    return min(cfg.n_prompts, family_size(task))


def _n_study(cfg: StudyConfig, task: str) -> int:
    return _n_task(cfg, task) if cfg.n_study is None else cfg.n_study


def _study_rows(cfg: StudyConfig, task: str) -> np.ndarray:
    """Indices (sorted) of the phase-1 prompts of ``task`` that phase 2 uses."""
    m_all = _n_task(cfg, task)
    if cfg.n_study is None:
        return np.arange(m_all)
    m = V.integer("n_study", cfg.n_study, 3, m_all)
    return np.sort(np.random.default_rng(cfg.seed + 1).choice(m_all, m, replace=False))


def _with_tag(df: pd.DataFrame, tag: dict) -> pd.DataFrame:
    return df.assign(**tag)


def _log(msg, progress):
    if progress:
        print(f"smollm2-study: {msg}", file=sys.stderr, flush=True)


def _phase1(policy, cfg: StudyConfig, out: Path, progress: bool, reward):
    """Pass rates of every candidate family (resumes family by family from passrates.csv)."""
    path = out / "passrates.csv"
    old = C.reuse_or_recompute(path, lambda p: C.read_csv(
        p, ("task", "n_prompts", "n_ref", "response_len", "seed", "model_sha256", "prompt",
            "rewards"), dtype={"rewards": str}), "phase 1's table")
    frames = []
    for t_i, task in enumerate(cfg.tasks):
        if old is not None:
            hit = old[(old.task == task) & (old.n_prompts == _n_task(cfg, task))
                      & (old.n_ref == cfg.n_ref) & (old.response_len == cfg.response_len)
                      & (old.seed == cfg.seed) & (old.model_sha256 == model_hash(cfg.model))]
            if (len(hit) == _n_task(cfg, task)
                    and sorted(hit.prompt) == list(range(_n_task(cfg, task)))
                    and hit.rewards.str.len().le(cfg.n_ref).all()):
                frames.append(hit.assign(**_tag(cfg, task)))
                continue
        qs, pre, ans = candidate_questions(task, _n_task(cfg, task), cfg.seed)
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
        prompts=("pass_rate", "size"),
        n_in_window=("pass_rate", lambda v: int(np.sum((v >= lo) & (v <= hi)))),
        mean_pass_rate=("pass_rate", "mean"), median_pass_rate=("pass_rate", "median"),
        share_in_window=("pass_rate", lambda v: float(np.mean((v >= lo) & (v <= hi)))),
        share_zero=("pass_rate", lambda v: float(np.mean(v == 0))),
        share_one=("pass_rate", lambda v: float(np.mean(v == 1))),
        q10=("pass_rate", lambda v: float(np.quantile(v, 0.1))),
        q90=("pass_rate", lambda v: float(np.quantile(v, 0.9)))).reset_index()
    return table, summary


def _saved_rollouts(path, ckey, m, cfg):
    """Phase 2's saved statistics when ``path`` holds this configuration's complete arrays;
    else a ``ValueError`` saying why (another key, a truncated or damaged array)."""
    names = ("rewards", "sq_norms", "mean_sq", "mean_dot", "responses")
    f = C.load_npz(path, ("key",) + names)
    if str(f["key"]) != ckey:
        raise ValueError("another configuration or model (its key differs)")
    n = cfg.n_samples
    want = dict(rewards=(m, n), sq_norms=(m, n), responses=(m * n, cfg.response_len))
    for k, shape in want.items():
        if f[k].reshape(-1).size != int(np.prod(shape)):
            raise ValueError(f"the array {k!r} has {f[k].size} values, expected "
                             f"{int(np.prod(shape))} (truncated)")
    if not all(np.isfinite(np.asarray(f[k], np.float64)).all() for k in names[:4]):
        raise ValueError("non-finite saved statistics (damaged)")
    return {k: f[k] for k in names}


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
    check_config(cfg)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    passrates, summary = _phase1(policy, cfg, out, progress, reward)
    task = cfg.task if cfg.task is not None else choose_task(summary)
    summary = summary.assign(chosen=summary.task == task)
    tag = _tag(cfg, task)
    summary = _with_tag(summary.drop(columns="task"), tag).assign(task=summary.task)
    summary.to_csv(out / "passrates_summary.csv", index=False)

    rows = _study_rows(cfg, task)
    _log(f"task: {task}; phase 2 on {len(rows)} prompts x {cfg.n_samples} responses", progress)
    qs, pre, ans = candidate_questions(task, _n_task(cfg, task), cfg.seed)
    qs, pre, ans = [qs[i] for i in rows], [pre[i] for i in rows], ans[rows]
    ref = passrates[passrates.task == task].sort_values("prompt").iloc[rows]
    ref_z = np.asarray([[int(c) for c in str(s).zfill(cfg.n_ref)] for s in ref.rewards],
                       np.float64)
    roll = out / "rollouts.npz"
    ckey = cfg.key("n_prompts", "n_study", "n_samples", "response_len", "seed") + task
    st = C.reuse_or_recompute(roll, lambda p: _saved_rollouts(p, ckey, len(qs), cfg),
                              "phase 2's rollouts")
    if st is not None:
        _log("phase 2: rollouts loaded from rollouts.npz", progress)
    if st is None:
        from tqdm.auto import tqdm

        x = chat_prompts(policy, qs, pre)
        bar = tqdm(total=len(qs), desc="advisor: pass 2 (prompts)", disable=not progress,
                   file=sys.stderr)

        def tok_reward(rows, y):
            return text_rewards(response_texts(policy, y), ans[np.asarray(rows)], reward)

        t1 = time.time()
        _log("phase 2: sampling, then per-sample and per-prompt ghost norms (chunks of "
             f"{cfg.chunk}), then the per-prompt dot products", progress)
        st = lm_rollout_statistics(policy, x, tok_reward, cfg.n_samples, cfg.seed + 7,
                                   cfg.response_len, cfg.chunk,
                                   progress=lambda d, t: bar.update(d - bar.n)).as_dict()
        bar.close()
        st["seconds"] = np.asarray(time.time() - t1)
        np.savez(roll, key=ckey, **st)
    est = estimate_from_rollouts(st["rewards"], sq_norms=st["sq_norms"], mean_sq=st["mean_sq"],
                                 mean_dot=st["mean_dot"])
    texts = response_texts(policy, np.asarray(st["responses"]).reshape(-1, cfg.response_len))
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
                dim=int(sum(np.size(p) for p in jax.tree_util.tree_leaves(policy.params))),
                seconds_total=time.time() - t0,
                seconds_phase2=float(st.get("seconds", np.nan)))
    meta["config"]["model"] = Path(cfg.model).name
    meta["model_sha256"] = model_hash(cfg.model)
    meta["c1_warning"] = c1_warning(est)
    # phase 2 redraws the same prompts' responses: its pass rates must agree with phase 1's
    diff = prompt_mean_ci(np.asarray(st["rewards"]).mean(axis=1) - ref_z.mean(axis=1))
    meta["pass_rate"] = dict(phase1=float(ref_z.mean()), phase2=float(np.mean(st["rewards"])),
                             diff=diff[0], diff_low=diff[2], diff_high=diff[3],
                             z=diff[0] / diff[1] if diff[1] > 0 else float("nan"))
    (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    figure(out)
    report(out)
    return dict(tables, estimate=est)


def check_config(cfg: StudyConfig) -> StudyConfig:
    """Refuse, before any sampling, every setting that cannot work (naming its flag)."""
    if not Path(cfg.model).exists():
        raise ValueError(f"--model {cfg.model}: no such file")
    for t in cfg.tasks:
        family_items(t)
    if cfg.task is not None and cfg.task not in cfg.tasks:
        raise ValueError(f"--task {cfg.task!r} must be one of --tasks {list(cfg.tasks)}")
    V.integer("--n-samples", cfg.n_samples, 3)
    V.integer("--n-prompts", cfg.n_prompts, 3)
    for flag, v in (("--n-ref", cfg.n_ref), ("--response-len", cfg.response_len),
                    ("--chunk", cfg.chunk)):
        V.integer(flag, v, 1)
    V.integer("--seed", cfg.seed, 0)
    if cfg.n_study is not None:
        for t in ((cfg.task,) if cfg.task is not None else cfg.tasks):
            if not 3 <= cfg.n_study <= _n_task(cfg, t):
                raise ValueError(f"--n-study must lie in [3, {_n_task(cfg, t)}] (the prompts "
                                 f"phase 1 measures of {t!r}), got {cfg.n_study}")
    return cfg


def main(argv=None) -> int:
    """Command line: ``python -m grpo_theory.studies.smollm2 --model FILE --out DIR [...]``
    (every failure one line, exit 2; ``GRPO_THEORY_DEBUG=1`` shows the traceback)."""
    return C.run_main("python -m grpo_theory.studies.smollm2", _main, argv)


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grpo_theory.studies.smollm2",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="the SmolLM2 .gguf file (make smollm2)")
    ap.add_argument("--out", default="results-full/smollm2")
    ap.add_argument("--tasks", type=C.name_list(CANDIDATES), default=CANDIDATES)
    ap.add_argument("--task", default=None, choices=CANDIDATES,
                    help="phase 2's family (default: chosen)")
    ap.add_argument("--n-prompts", type=C.positive_int, default=StudyConfig.n_prompts)
    ap.add_argument("--n-ref", type=C.positive_int, default=StudyConfig.n_ref)
    ap.add_argument("--n-study", type=C.positive_int, default=None,
                    help="phase 2's prompts: a random subset of phase 1's (default: all)")
    ap.add_argument("--n-samples", type=C.positive_int, default=StudyConfig.n_samples)
    ap.add_argument("--response-len", type=C.positive_int, default=StudyConfig.response_len)
    ap.add_argument("--chunk", type=C.positive_int, default=StudyConfig.chunk)
    ap.add_argument("--seed", type=C.nonnegative_int, default=0)
    ap.add_argument("--passrates-only", action="store_true",
                    help="phase 1 only: passrates.csv and passrates_summary.csv")
    a = ap.parse_args(argv)
    from grpo_theory.lm import from_pretrained

    cfg = check_config(StudyConfig(
        model=str(Path(a.model).expanduser()), tasks=tuple(a.tasks), task=a.task,
        n_prompts=a.n_prompts, n_ref=a.n_ref, n_study=a.n_study, n_samples=a.n_samples,
        response_len=a.response_len, chunk=a.chunk, seed=a.seed))
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
