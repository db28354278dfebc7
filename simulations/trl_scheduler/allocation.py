r"""Does per-prompt allocation pay in TRL? At equal completions generated, uniform group sizes
against pass-rate allocations through :class:`~grpo_theory.torch.RolloutAllocator`, in real
``trl.GRPOTrainer`` runs of the study's tiny Llama on CPU (the same task as the scheduler's).

Arms (``ARMS``), each run for every seed with the same initial model and prompts; every step
generates ``budget`` completions for ``prompts_per_step`` prompts (``trl-default``: for
``budget / 8``):

* ``uniform``: G = budget / B for every prompt (TRL's layout, the allocator with
  :class:`~grpo_theory.torch.UniformSizes`, nothing masked);
* ``knapsack``: Knapsack RL's sizes in [2, ``width``] from each prompt's pass rate on its earlier
  visits (:class:`~grpo_theory.torch.PassRateSizes`, prior 0.5 with weight 1);
* ``vip``: VIP's G proportional to sqrt(p (1 - p)) from the same pass rates;
* ``trl-default``: TRL's defaults as users run them, G = 8 (``loss_type="dapo"``, std-scaled
  advantages), no allocator.

The first three train the same estimator (``weighting="prompt"``: each prompt's leave-one-out
estimate, prompts weighted equally; ``loss_type="dr_grpo"``, ``scale_rewards="none"``), so they
differ only in the allocation. Per step: ``reward``, the mean over the step's prompts of each
prompt's mean reward (the allocator's ``prompt_mean_reward``; TRL's logged ``reward`` weighs
prompts by G_i), and the sizes' spread. After training: ``eval_reward``, the trained policy's mean
reward over ``eval_samples`` completions of every prompt of the pool (the trainer's generation
settings; the sampling seed is the seed's, the same in every arm). Cells (arm, seed) are written
atomically and skipped when present (resume).

``python -m grpo_theory.studies.trl_scheduler.allocation --out results-full/trl_allocation``
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

import grpo_theory
from grpo_theory import _validation as V
from grpo_theory.experiments import atomic_write_csv, atomic_write_text, study_cli as C

from . import tiny
from .analysis import figure, page, per_seed, summarise_seeds
from .study import run_cells

ARMS = ("uniform", "knapsack", "vip", "trl-default")
#: paired comparisons (a, b): a - b per seed
PAIRS = (("knapsack", "uniform"), ("vip", "uniform"), ("uniform", "trl-default"),
         ("knapsack", "trl-default"))
METRICS = ("mean_reward", "last_quarter_reward", "eval_reward")


@dataclass(frozen=True)
class AllocationConfig:
    """The study's settings (every row carries them as ``config``)."""
    seeds: int = 32
    steps: int = 60
    budget: int = 96              # completions per step
    prompts_per_step: int = 16    # B (trl-default: budget / 8)
    width: int = 16               # the largest G_i (the layout's num_generations)
    n_prompts: int = 64           # the pool: each prompt is visited about steps B / n_prompts times
    eval_samples: int = 32
    learning_rate: float = 1e-2
    max_completion_length: int = 5

    def __post_init__(self):
        for f in ("seeds", "steps", "budget", "prompts_per_step", "width", "n_prompts",
                  "eval_samples", "max_completion_length"):
            V.integer(f, getattr(self, f), 1)
        V.real_scalar("learning_rate", self.learning_rate, positive=True)
        B = self.prompts_per_step
        if self.budget % B or self.budget % 8 or not 2 * B <= self.budget <= self.width * B:
            raise ValueError(f"budget {self.budget} must be a multiple of 8 and of "
                             f"prompts_per_step ({B}), within [2, width ({self.width})] "
                             f"completions per prompt")
        if max(B, self.budget // 8) > self.n_prompts:
            raise ValueError(f"n_prompts {self.n_prompts} is fewer than one step's prompts")


def _eval_reward(tr, texts, samples, seed):
    """The trained policy's mean reward over ``samples`` completions of each prompt."""
    import torch

    tok, model = tr.processing_class, tr.accelerator.unwrap_model(tr.model)
    msgs = [[{"role": "user", "content": t}] for t in texts for _ in range(samples)]
    rendered = [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
                for m in msgs]
    enc = tok(rendered, return_tensors="pt", padding=True, padding_side="left",
              add_special_tokens=False)
    torch.manual_seed(10_000 + int(seed))
    model.eval()
    with torch.no_grad():
        ids = model.generate(**enc, generation_config=tr.generation_config)
    completions = tok.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    z = tiny.first_letter_reward(msgs, [[{"content": c}] for c in completions])
    return float(np.mean(z))


def run_cell(cfg: AllocationConfig, arm: str, seed: int) -> pd.DataFrame:
    """One training run: the per-step table of ``arm`` at ``seed`` (module docstring)."""
    import transformers
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_theory.torch import PassRateSizes, RolloutAllocator, UniformSizes

    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    transformers.logging.set_verbosity_error()
    texts = tiny.prompts(cfg.n_prompts)
    ds = Dataset.from_dict({"prompt": [[{"role": "user", "content": t}] for t in texts]})
    B = cfg.prompts_per_step
    if arm == "trl-default":
        W, extra = 8, {}
    else:
        W = cfg.budget // B if arm == "uniform" else cfg.width
        extra = dict(loss_type="dr_grpo", scale_rewards="none")
    rows_per_step = (cfg.budget if arm == "trl-default" else B * W)
    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(output_dir=tmp, report_to=[], use_cpu=True, bf16=False,
                          max_completion_length=cfg.max_completion_length, num_generations=W,
                          per_device_train_batch_size=rows_per_step, max_steps=cfg.steps,
                          logging_steps=1, save_strategy="no", learning_rate=cfg.learning_rate,
                          seed=int(seed), temperature=1.0, disable_tqdm=True, **extra)
        tr = GRPOTrainer(model=tiny.tiny_llama(seed), args=args,
                         reward_funcs=tiny.first_letter_reward, train_dataset=ds,
                         processing_class=tiny.tiny_tokenizer())
        for cb in (PrinterCallback, ProgressCallback):
            tr.remove_callback(cb)
        al = None
        if arm != "trl-default":
            rule = UniformSizes() if arm == "uniform" else PassRateSizes(arm)
            al = RolloutAllocator(tr, rule, budget=cfg.budget, weighting="prompt")
            tr.add_callback(al)
        tr.train()
        eval_reward = _eval_reward(tr, texts, cfg.eval_samples, seed)
    logs = [h for h in tr.state.log_history if "reward" in h]
    if len(logs) != cfg.steps or (al is not None and len(al.history) != cfg.steps):
        raise RuntimeError(f"{arm} seed {seed}: {len(logs)} logged steps, expected {cfg.steps}")
    rows = []
    for step, h in enumerate(logs, start=1):
        sizes = al.history[step - 1]["sizes"] if al is not None else [8] * (cfg.budget // 8)
        reward = (al.history[step - 1]["prompt_mean_reward"] if al is not None
                  else float(h["reward"]))
        rows.append(dict(arm=arm, seed=int(seed), step=step, completions=step * cfg.budget,
                         reward=reward, trl_reward=float(h["reward"]), G=float(np.mean(sizes)),
                         G_min=min(sizes), G_max=max(sizes), prompts=len(sizes)))
    df = pd.DataFrame(rows)
    df["eval_reward"] = eval_reward
    df["config"] = json.dumps(asdict(cfg), sort_keys=True)
    df["version"] = grpo_theory.__version__
    return df


def _per_seed(runs: pd.DataFrame) -> pd.DataFrame:
    return per_seed(runs, lambda d: dict(eval_reward=float(d["eval_reward"].iloc[0]),
                                         size_spread=float((d["G_max"] - d["G_min"]).mean())))


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """Tidy summary (the scheduler study's :func:`~.analysis.summarise_seeds`): per arm
    :data:`METRICS` and the sizes' mean spread, paired differences of :data:`PAIRS`."""
    return summarise_seeds(_per_seed(runs), METRICS + ("size_spread",), PAIRS, METRICS,
                           runs["version"].iloc[0])


def report(runs: pd.DataFrame, summary: pd.DataFrame) -> str:
    """REPORT.md: the setting, the per-arm table, the paired differences with verdicts."""
    c = json.loads(runs["config"].iloc[0])
    setting = (f"Real `trl.GRPOTrainer` runs of a tiny random Llama on CPU; {c['budget']} "
               f"completions per step in every arm, {c['steps']} steps, {c['seeds']} seeds "
               f"(paired: the same initial model, prompts and evaluation sampling seed); "
               f"{c['prompts_per_step']} prompts per step from a pool of {c['n_prompts']}, "
               f"sizes in [2, {c['width']}]; eval_reward over {c['eval_samples']} completions of "
               f"each prompt after training.")
    return page("Does per-prompt allocation pay in TRL?", setting, runs, summary,
                "reward and sizes against completions")


def run_study(cfg: AllocationConfig, out, arms=ARMS, progress: bool = True) -> pd.DataFrame:
    """Every (arm, seed) cell (resumed from ``out/cells``), then ``runs.csv``, ``summary.csv``,
    ``REPORT.md`` and ``reward.png`` under ``out``."""
    out = Path(out)
    todo = [(a, s) for s in range(cfg.seeds) for a in arms]
    runs = pd.concat(run_cells(todo, cfg, cfg.steps, out, run_cell, "trl-allocation runs",
                               progress), ignore_index=True)
    runs["G_spread"] = runs["G_max"] - runs["G_min"]
    atomic_write_csv(out / "runs.csv", runs)
    summary = summarise(runs)
    atomic_write_csv(out / "summary.csv", summary)
    figure(runs, out / "reward.png", right="G_spread", right_scale="linear",
           right_label="largest - smallest G_i (mean over seeds)",
           left_label="mean over prompts of the prompt's reward")
    atomic_write_text(out / "REPORT.md", report(runs, summary))
    return runs


def main(argv=None) -> int:
    """``python -m grpo_theory.studies.trl_scheduler.allocation --out DIR [--seeds 32] ...``
    (every failure one line, exit 2; ``GRPO_THEORY_DEBUG=1`` shows the traceback)."""
    return C.run_main("python -m grpo_theory.studies.trl_scheduler.allocation", _main, argv)


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grpo_theory.studies.trl_scheduler.allocation",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="results-full/trl_allocation")
    for f in ("seeds", "steps", "budget", "prompts_per_step", "width", "n_prompts"):
        ap.add_argument("--" + f.replace("_", "-"), type=C.positive_int,
                        default=getattr(AllocationConfig, f))
    a = ap.parse_args(argv)
    cfg = AllocationConfig(seeds=a.seeds, steps=a.steps, budget=a.budget,
                           prompts_per_step=a.prompts_per_step, width=a.width,
                           n_prompts=a.n_prompts)
    run_study(cfg, a.out)
    print((Path(a.out) / "REPORT.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
