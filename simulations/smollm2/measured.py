r"""Figure 4 on SmolLM2 by measurement: the gradient MSE of vanilla, GRPO and the oracle against G
at a fixed budget, measured from independent groups, next to the advisor's prediction.

Run after the advisor's study (``make smollm2-study``), as ``make smollm2-measured``::

    python -m grpo_theory.studies.smollm2.measured --model FILE --study results-full/smollm2

The population is the study's phase-2 prompts (uniform), the distribution whose constants the
committed prediction (``rollouts.npz``: c1, c2, c3 and their jackknife covariance) estimates. For
each G of the grid, ``rows // G`` independent groups: a prompt drawn uniformly, G + m responses
sampled at the checkpoint's temperature with its chat template (seeds independent of the study's),
the first G scored by the study's reward, the last m only for the oracle's value estimate
``Vhat``. Each group costs two weighted backward passes over its own G rows (``S_1``, the
rewarded responses' summed score, and ``S_0``, the others'; padded to a power of two with
zero-weight rows so that a handful of shapes compile), which give every estimator's squared norm
exactly (:mod:`.measured_stats`); the batch sums of the vanilla vectors (K of them, ``K D``
floats) give ``||grad J||^2``. Equal responses per G: the small groups, whose squared norms are the
most skewed, get the most replicates.

Outputs (``--out``, default the study's folder): ``measured_groups.csv`` (one row per group: its
Gram entries, rewards and value estimate), ``measured_batches.csv`` (the K x K Gram matrix of the
batch means), ``measured_mse.csv`` (estimator, N, G, mse, se, predicted, predicted_se, z,
replicates), ``measured_argmin.csv``, ``measured_rival.csv`` and ``measured_rival_plan.csv``
(GRPO's law against its rival, pooled with the independent runs of ``--pool``:
:mod:`.measured_rival`), ``measured_mse.png``/``.pdf`` and ``MEASURED.md``, all redrawn from the
saved tables by :func:`analyse`. The batch sums are checkpointed (``--work``, outside the
repository) every ``--checkpoint`` seconds so a stopped run resumes; ``--minutes`` stops the
sampling, checkpoints and writes the tables from the groups done (every G in proportion).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import jax
import numpy as np
import pandas as pd

import grpo_theory
from grpo_theory import _validation as V
from grpo_theory.experiments import study_cli as C
from grpo_theory.lm.checkpoints import response_texts

from .measured_report import analyse, population
from .tasks import chat_prompts, text_rewards

__all__ = ["MeasuredConfig", "population", "run_measurement", "main"]


@dataclass(frozen=True)
class MeasuredConfig:
    """The measurement's configuration (every table row carries it).

    Attributes:
        model: the ``.gguf`` file the study used.
        study: the advisor study's folder (``prompts.csv``, ``passrates.csv``,
            ``rollouts.npz``, ``meta.json``).
        group_sizes: the grid of G (each >= 2).
        rows: responses scored per G (``rows // G`` groups of each G).
        n_value: m, the extra responses per group behind the oracle's ``Vhat``.
        n_batches: K, the batches of the ``||grad J||^2`` estimate and the jackknife.
        budgets: the budgets N of the table (G must divide N).
        seed: integer seed (the study used its own; use a different one).
    """

    model: str
    study: str = "results-full/smollm2"
    group_sizes: tuple = (2, 4, 8, 16, 32)
    rows: int = 576
    n_value: int = 4
    n_batches: int = 12
    budgets: tuple = (32, 64)
    seed: int = 1

    def tag(self) -> dict:
        return dict(model=Path(self.model).name, rows=self.rows, n_value=self.n_value,
                    n_batches=self.n_batches, seed=self.seed, version=grpo_theory.__version__)

    def key(self, population=None) -> str:
        """What a checkpoint must match to be resumed: the model by its content (not its file
        name), the study's phase-2 prompts (``population``: a digest of :func:`population`'s
        questions, prefills, answers and response length) and every setting but ``rows`` (group
        j of size G is the same draw in any run, so a run with more rows extends a saved one),
        the study's folder name and ``budgets`` (neither changes a group)."""
        from .study import model_hash

        d = {k: v for k, v in asdict(self).items() if k not in ("study", "budgets", "rows")}
        d["model"] = model_hash(self.model)
        d["population"] = population
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _schedule(cfg: MeasuredConfig):
    """(G, j) of every group, interleaved so that a stopped run has every G in proportion."""
    plan = []
    for G in cfg.group_sizes:
        R = cfg.rows // G
        plan += [((j + 0.5) / R, G, j) for j in range(R)]
    return [(G, j) for _, G, j in sorted(plan)]


def _bucket(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _subset_score(policy, x, y, rows):
    """``sum_{i in rows} grad log pi(y_i | x_i)`` (rows padded by zero weights to a power of 2)."""
    if len(rows) == 0:
        return None
    b = _bucket(len(rows))
    idx = np.concatenate([rows, np.full(b - len(rows), rows[0])])
    w = np.zeros(b)
    w[:len(rows)] = 1.0
    return np.asarray(policy.weighted_score(x[idx], y[idx], w), np.float32)


def _dot(a, b, block: int = 1 << 22) -> float:
    if a is None or b is None:
        return 0.0
    return float(sum(np.dot(a[i:i + block].astype(np.float64), b[i:i + block].astype(np.float64))
                     for i in range(0, a.shape[0], block)))


def _batch_gram(sums, counts, block: int = 1 << 21) -> np.ndarray:
    """The (K, K) Gram matrix of the batch means ``sums[k] / counts[k]``, accumulated in float64
    over column blocks (no copy of the K x D sums)."""
    K, D = sums.shape
    M = np.zeros((K, K))
    for i in range(0, D, block):
        S = np.asarray(sums[:, i:i + block], np.float64)
        M += S @ S.T
    n = np.maximum(np.asarray(counts, np.float64), 1.0)
    return M / np.outer(n, n)


def _save_atomic(path: Path, write):
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def _population_digest(pop: dict) -> str:
    """A digest of what the groups are drawn from: the study's phase-2 prompts and length."""
    d = dict(task=pop["task"], questions=list(pop["questions"]), prefills=list(pop["prefills"]),
             answers=np.asarray(pop["answers"]).tolist(), response_len=pop["response_len"])
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _checkpoint(work: Path, K: int):
    """The saved groups, batch sums and counts of ``work``, refused by name when they do not
    agree (a truncated or damaged file: delete the folder, or give another ``--work``)."""
    counts = C.read_json(work / "state.json", ("counts",))["counts"]
    try:
        counts = np.asarray(counts, np.int64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"--work {work}: state.json's field 'counts' is not a list of "
                         "integers (damaged: delete the folder or give another --work)") from None
    groups = C.read_csv(work / "groups.csv", ("G", "j", "batch", "prompt", "k", "vhat", "s11",
                                              "s10", "s00", "seconds"))
    try:
        sums = np.load(work / "sums.npy", mmap_mode="r")  # copied below if groups remain
    except (OSError, ValueError, EOFError) as e:
        raise ValueError(f"--work {work}: sums.npy is not readable ({e}); delete the folder "
                         "or give another --work") from None
    bad = (counts.shape != (K,) or sums.ndim != 2 or sums.shape[0] != K
           or int(counts.sum()) != len(groups)
           or not np.isfinite(groups[["G", "j"]].to_numpy(np.float64)).all())
    if bad:
        raise ValueError(f"--work {work}: state.json, groups.csv and sums.npy disagree "
                         f"({len(groups)} groups, counts {counts.tolist()}, sums "
                         f"{tuple(sums.shape)} for {K} batches): truncated or damaged; delete "
                         "the folder or give another --work")
    return groups.to_dict("records"), sums, counts


def run_measurement(policy, cfg: MeasuredConfig, out, work, progress: bool = True,
                    checkpoint_s: float = 600.0, reward=None, max_seconds=None,
                    pool=()) -> dict:
    """Sample and score every group of the plan (resuming from ``work``), then :func:`analyse`.

    Args:
        policy: the loaded model (:func:`grpo_theory.lm.from_pretrained` of ``cfg.model``).
        cfg: :class:`MeasuredConfig`.
        out: output folder of the tables, figure and ``MEASURED.md``.
        work: checkpoint folder (the K x D batch sums; outside the repository).
        progress: a bar on stderr.
        checkpoint_s: seconds between checkpoints.
        reward: ``reward(text, answer)`` (default: the study's).
        max_seconds: stop sampling after this many seconds (checkpointed; the tables are
            written from the groups done, every G in proportion; a later run resumes).
        pool: independent runs' output folders for the law-against-rival check (:func:`analyse`).

    Returns:
        dict of the tables (:func:`analyse`).
    """
    for G in cfg.group_sizes:
        V.integer("group_size", G, 2)
    V.integer("rows", cfg.rows, max(cfg.group_sizes))
    V.integer("n_value", cfg.n_value, 1)
    K = V.integer("n_batches", cfg.n_batches, 3)
    pop = population(cfg.study)
    out, work = Path(out), Path(work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    x_all = np.asarray(chat_prompts(policy, pop["questions"], pop["prefills"]))
    n_pop, R_len, m = x_all.shape[0], pop["response_len"], cfg.n_value
    key = cfg.key(_population_digest(pop))
    state = work / "state.json"
    done, sums, counts = [], None, np.zeros(K, np.int64)
    if state.is_file() and C.read_json(state, ("key", "counts"))["key"] == key:
        done, sums, counts = _checkpoint(work, K)
    seen = {(int(r["G"]), int(r["j"])) for r in done}
    wanted = _schedule(cfg)
    if seen - set(wanted):
        raise ValueError(f"--work {work} holds {len(seen - set(wanted))} groups beyond --rows "
                         f"{cfg.rows} (its sums include them): give --rows at least the saved "
                         "run's, or another --work")
    plan = [p for p in wanted if p not in seen]
    if plan and sums is not None:
        sums = np.array(sums)
    kw = {} if reward is None else dict(reward=reward)
    root = jax.random.PRNGKey(cfg.seed)
    from tqdm.auto import tqdm

    bar = tqdm(total=len(seen) + len(plan), initial=len(seen), desc="measured MSE (groups)",
               disable=not progress, file=sys.stderr)
    last = start = time.time()

    def save_sums(path):
        with open(path, "wb") as f:
            np.save(f, sums)

    def checkpoint():  # the state (key, counts) last: it vouches for the other two files
        _save_atomic(work / "sums.npy", save_sums)
        _save_atomic(work / "groups.csv", lambda p: pd.DataFrame(done).to_csv(p, index=False))
        _save_atomic(state, lambda p: p.write_text(json.dumps(dict(key=key,
                                                                    counts=counts.tolist()))))

    new = 0
    for G, j in plan:
        t0 = time.time()
        if max_seconds is not None and t0 - start >= max_seconds:
            break
        new += 1
        kp, ky = jax.random.split(jax.random.fold_in(jax.random.fold_in(root, G), j))
        a = int(jax.random.randint(kp, (), 0, n_pop))
        x = np.repeat(x_all[a:a + 1], G + m, axis=0)
        y = np.asarray(policy.sample(ky, x, R_len))
        r = text_rewards(response_texts(policy, y), np.repeat(pop["answers"][a:a + 1], G + m),
                         **kw)
        rg = r[:G]
        s1 = _subset_score(policy, x, y, np.flatnonzero(rg == 1))
        s0 = _subset_score(policy, x, y, np.flatnonzero(rg == 0))
        if sums is None:
            sums = np.zeros((K, (s1 if s1 is not None else s0).shape[0]), np.float32)
        b = j % K
        if s1 is not None:
            sums[b] += s1 / G
        counts[b] += 1
        done.append(dict(G=G, j=j, batch=b, prompt=a, k=int(rg.sum()), vhat=float(r[G:].mean()),
                         s11=_dot(s1, s1), s10=_dot(s1, s0), s00=_dot(s0, s0),
                         seconds=time.time() - t0))
        bar.update(1)
        if time.time() - last > checkpoint_s:
            checkpoint()
            last = time.time()
    bar.close()
    if new:
        checkpoint()
    tag = cfg.tag()
    groups = pd.DataFrame(done).sort_values(["G", "j"]).assign(**tag)
    groups.to_csv(out / "measured_groups.csv", index=False)
    M = _batch_gram(sums, counts)
    batches = pd.DataFrame(M, columns=[f"gram_{k}" for k in range(K)])
    batches.insert(0, "count", counts)
    batches.insert(0, "batch", np.arange(K))
    batches.assign(**tag).to_csv(out / "measured_batches.csv", index=False)
    meta = dict(config=asdict(cfg), task=pop["task"], version=grpo_theory.__version__,
                seconds_groups=float(groups.seconds.sum()), groups=len(groups),
                responses_scored=int(groups.G.sum()),
                responses_sampled=int(groups.G.sum() + m * len(groups)))
    meta["config"]["model"] = Path(cfg.model).name
    (out / "measured_meta.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    return analyse(out, cfg.study, pool)


def check_config(cfg: MeasuredConfig) -> MeasuredConfig:
    """Refuse, before any sampling, every setting that cannot work (naming its flag)."""
    if not Path(cfg.model).exists():
        raise ValueError(f"--model {cfg.model}: no such file")
    gs = tuple(cfg.group_sizes)
    if not gs or any(int(g) != g or g < 2 for g in gs) or any(b <= a for a, b in zip(gs, gs[1:])):
        raise ValueError(f"--group-sizes must be strictly increasing integers >= 2, got {gs}")
    V.integer("--rows", cfg.rows, max(gs))
    V.integer("--n-value", cfg.n_value, 1)
    V.integer("--n-batches", cfg.n_batches, 3)
    V.integer("--seed", cfg.seed, 0)
    for N in cfg.budgets:
        if not any(N % G == 0 for G in gs):
            raise ValueError(f"--budgets {N}: no group size of --group-sizes {list(gs)} "
                             "divides it")
    return cfg


def main(argv=None) -> int:
    """``python -m grpo_theory.studies.smollm2.measured --model FILE [--study DIR] [...]``
    (every failure one line, exit 2; ``GRPO_THEORY_DEBUG=1`` shows the traceback)."""
    return C.run_main("python -m grpo_theory.studies.smollm2.measured", _main, argv)


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grpo_theory.studies.smollm2.measured",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="the SmolLM2 .gguf file (make smollm2)")
    ap.add_argument("--study", default="results-full/smollm2", help="the advisor study's folder")
    ap.add_argument("--out", default=None, help="output folder (default: --study)")
    ap.add_argument("--work", default=str(Path.home() / ".cache/grpo-theory/smollm2-measured"),
                    help="checkpoint folder (K x D batch sums)")
    ap.add_argument("--group-sizes", type=C.int_list(2), default=MeasuredConfig.group_sizes)
    ap.add_argument("--rows", type=C.positive_int, default=MeasuredConfig.rows)
    ap.add_argument("--n-value", type=C.positive_int, default=MeasuredConfig.n_value)
    ap.add_argument("--n-batches", type=C.positive_int, default=MeasuredConfig.n_batches)
    ap.add_argument("--budgets", type=C.int_list(2), default=MeasuredConfig.budgets)
    ap.add_argument("--seed", type=C.nonnegative_int, default=MeasuredConfig.seed)
    ap.add_argument("--checkpoint", type=C.positive_float, default=600.0,
                    help="seconds between checkpoints")
    ap.add_argument("--minutes", type=C.positive_float, default=None,
                    help="stop sampling after this many minutes (checkpointed; the tables are "
                         "written from the groups done; a later run resumes)")
    ap.add_argument("--pool", action="append", default=[], metavar="DIR",
                    help="an independent run's output folder (its own seed) pooled with this "
                         "one in the law-against-rival check (repeatable)")
    ap.add_argument("--analyse-only", action="store_true",
                    help="redraw the tables, figure and MEASURED.md from the saved tables")
    a = ap.parse_args(argv)
    out = a.out or a.study
    for p in a.pool:
        if not (Path(p) / "measured_meta.json").is_file():
            raise ValueError(f"--pool {p}: measured_meta.json is missing (not a measured run)")
    if a.analyse_only:
        analyse(out, a.study, a.pool)
        print((Path(out) / "MEASURED.md").read_text())
        return 0
    cfg = check_config(MeasuredConfig(
        model=str(Path(a.model).expanduser()), study=a.study, group_sizes=tuple(a.group_sizes),
        rows=a.rows, n_value=a.n_value, n_batches=a.n_batches, budgets=tuple(a.budgets),
        seed=a.seed))
    population(cfg.study)  # the study's files, checked before the model loads
    from grpo_theory.lm import from_pretrained

    policy = from_pretrained(cfg.model)
    run_measurement(policy, cfg, out, a.work, checkpoint_s=a.checkpoint,
                    max_seconds=None if a.minutes is None else 60 * a.minutes, pool=a.pool)
    print((Path(out) / "MEASURED.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
