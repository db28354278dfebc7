r"""``GroupSizeScheduler``: a callback that sets TRL's group size from the advisor's estimate.

::

    advisor = GroupSizeAdvisor(trainer, every=10)
    trainer.add_callback(advisor)
    trainer.add_callback(GroupSizeScheduler(trainer, advisor))   # after the advisor
    trainer.train()   # logs scheduler/num_generations; scheduler.changes lists each change

At a fixed budget N = B G of completions per generation batch, the fixed-budget MSE of GRPO's
gradient is (c1 G + c2 + c3 / (G - 1)) / N, minimised at G* = 1 + sqrt(c3 / c1). TRL fixes G at
construction (``num_generations``, its ``RepeatSampler``). This module changes (B, G) between
generation batches, at the same N:

* :class:`ReChunkingSampler` replaces TRL's sampler: it draws each generation batch's B = N / G
  distinct prompts from a running permutation of the dataset (reshuffled when exhausted) and
  repeats each G times, consecutively, as TRL's ``RepeatSampler`` does (each batch
  ``repeat_count`` = ``steps_per_generation * num_iterations`` times). A requested G takes effect at the next batch
  that starts an optimisation step and is not yet drawn, never inside a step: the trainer's
  loader draws ahead (transformers 5.12.1 draws a step's batches before it runs it, accelerate
  1.15.0 one batch more), so a change decided at the end of step k applies from step k + 2, or
  from step k + 1 where that step starts a new epoch (the loader does not draw past an epoch). An "epoch" is ``len(dataset) // B0``
  batches at the initial layout (so ``len`` is fixed).
* the trainer's ``num_generations`` and the advisor's ``group_size`` are set, before each
  generation, to the G of the batch being generated (TRL 1.16.0 groups rewards with
  ``rewards.view(-1, num_generations)`` in ``_generate_and_score_completions``, so its advantages
  and loss follow the new layout).
* :func:`propose_group_size` decides, after each estimate: no change while the current G lies
  inside the estimate's G* interval (the data do not exclude it); otherwise the allowed G
  nearest the recommended one (in log scale) or, with no recommendation (c1 not resolved above
  0, so the interval is [low, inf)), the smallest allowed G >= low; taken if it differs from
  the current G by at least the factor ``min_change`` (hysteresis).

Allowed sizes (:func:`allowed_group_sizes`): divisors G of the generation batch with
G >= ``min_group_size`` (3 by default: the advisor needs 3 completions per prompt to keep
estimating) and B = N / G >= 3 prompts. Single process only: under DDP accelerate shards the
sampler's index batches across processes, which this sampler does not follow (refused).
"""

from __future__ import annotations

from collections import deque

import torch
from torch.utils.data import Sampler
from transformers import TrainerCallback

from grpo_theory import _validation as V
from grpo_theory.advisor import MIN_SAMPLES, allowed_group_sizes, propose_group_size
# the rule and the allowed sizes are pure: they live with the advisor, usable without torch

from . import _trl as TRL


class ReChunkingSampler(Sampler):
    """TRL's ``RepeatSampler`` layout with a group size that can change between generation
    batches (module docstring).

    Args:
        num_samples: the dataset's length.
        rows: completions per generation batch (N = B G, fixed).
        group_size: the initial G (divides ``rows``).
        repeat_count: times each generation batch is yielded (TRL:
            ``steps_per_generation * num_iterations``).
        batches_per_step: generation batches per optimisation step (a requested G waits for a
            batch that starts a step).
        shuffle, seed: as TRL's sampler.

    Attributes:
        group_size: the G of the batch being yielded.
        emitted: the G of each batch yielded and not yet generated (first in, first out).
    """

    def __init__(self, num_samples: int, rows: int, group_size: int, repeat_count: int = 1,
                 batches_per_step: int = 1, shuffle: bool = True, seed: int | None = None):
        self.num_samples = V.positive_int("num_samples", num_samples)
        self.rows = V.positive_int("rows", rows)
        self.repeat_count = V.positive_int("repeat_count", repeat_count)
        self.batches_per_step = V.positive_int("batches_per_step", batches_per_step)
        self.group_size = self._check(group_size)
        if self.rows // self.group_size > self.num_samples:
            raise ValueError(f"the dataset has {num_samples} prompts, fewer than the "
                             f"{self.rows // self.group_size} of one generation batch")
        self.batches = self.num_samples // (self.rows // self.group_size)
        self.shuffle = bool(shuffle)
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(int(seed))
        self.emitted: deque = deque()
        self._requested = None
        self._stream: list[int] = []
        self._count = 0  # generation batches started

    def _check(self, G):
        G = V.integer("group_size", G, 2)
        if self.rows % G:
            raise ValueError(f"group_size {G} does not divide the generation batch of "
                             f"{self.rows} rows")
        return G

    def request(self, group_size: int):
        """Use ``group_size`` from the next generation batch that starts an optimisation step."""
        G = self._check(group_size)
        if self.rows // G > self.num_samples:
            raise ValueError(f"group_size {G} needs {self.rows // G} distinct prompts per "
                             f"generation batch; the dataset has {self.num_samples}")
        self._requested = G

    def _prompts(self, B):
        """B distinct prompts, the next of the running permutation; one already in the batch
        (where a batch straddles two passes) waits for the next batch."""
        out, held, taken = [], [], set()
        while len(out) < B:
            if not self._stream:
                self._stream = (torch.randperm(self.num_samples,
                                               generator=self.generator).tolist()
                                if self.shuffle else list(range(self.num_samples)))
            i = self._stream.pop(0)
            (held if i in taken else out).append(i)
            taken.add(i)
        self._stream = held + self._stream
        return out

    def __iter__(self):
        self._count = 0  # an epoch starts an optimisation step (transformers' Trainer)
        for _ in range(self.batches):
            if self._requested is not None and self._count % self.batches_per_step == 0:
                self.group_size, self._requested = self._requested, None
            G = self.group_size
            chunk = self._prompts(self.rows // G)
            self._count += 1
            self.emitted.append(G)
            for _ in range(self.repeat_count):
                for index in chunk:
                    for _ in range(G):
                        yield index

    def __len__(self) -> int:
        return self.batches * self.rows * self.repeat_count


class GroupSizeScheduler(TrainerCallback):
    """Change TRL's (B, G) at a fixed budget from :class:`GroupSizeAdvisor`'s estimates.

    Args:
        trainer: the ``trl.GRPOTrainer`` (before ``train()``).
        advisor: its :class:`~grpo_theory.torch.GroupSizeAdvisor`, added to the trainer first.
        min_change: hysteresis, the least factor of a change (>= 1; default 1.25).
        min_group_size, max_group_size: bounds of the allowed G (:func:`allowed_group_sizes`).

    Attributes:
        allowed: the allowed group sizes.
        changes: one dict per change (``step``: the optimisation step whose estimate decided it,
            ``from``, ``to``, ``recommended_G``, ``g_star_low``, ``g_star_high``).
        sampler: the :class:`ReChunkingSampler` the trainer uses.
    """

    def __init__(self, trainer, advisor, *, min_change: float = 1.25,
                 min_group_size: int = MIN_SAMPLES, max_group_size: int | None = None):
        self.min_change = V.real_scalar("min_change", min_change, positive=True)
        if self.min_change < 1:
            raise ValueError(f"min_change must be >= 1 (a factor), got {min_change!r}")
        from .callback import GroupSizeAdvisor

        if not isinstance(advisor, GroupSizeAdvisor):
            raise ValueError(f"advisor must be a GroupSizeAdvisor, got {type(advisor).__name__}")
        min_group_size = V.integer("min_group_size", min_group_size, MIN_SAMPLES)
        if max_group_size is not None:
            max_group_size = V.integer("max_group_size", max_group_size, min_group_size)
        if advisor not in trainer.callback_handler.callbacks or advisor.trainer is not trainer:
            raise ValueError("GroupSizeScheduler needs the trainer's GroupSizeAdvisor, added "
                             "first: trainer.add_callback(advisor), then the scheduler")
        if trainer.accelerator.num_processes != 1:
            raise ValueError("GroupSizeScheduler supports single-process training only (under "
                             "DDP accelerate shards the sampler's batches across processes)")
        from torch.utils.data import IterableDataset

        if trainer.train_dataset is None or isinstance(trainer.train_dataset, IterableDataset):
            raise ValueError("GroupSizeScheduler needs a map-style train_dataset (TRL streams "
                             "an IterableDataset without a sampler)")
        args = trainer.args
        rows = int(args.generation_batch_size)
        self.allowed = allowed_group_sizes(rows, min_group_size, max_group_size)
        if trainer.num_generations not in self.allowed:
            raise ValueError(f"num_generations {trainer.num_generations} is not among the "
                             f"allowed group sizes {self.allowed}")
        self.trainer, self.advisor = trainer, advisor
        self.changes: list[dict] = []
        self._seen = 0
        sched = advisor.schedule
        self.sampler = ReChunkingSampler(
            len(trainer.train_dataset), rows, trainer.num_generations,
            repeat_count=sched.S * sched.I, batches_per_step=sched.batches_per_step,
            shuffle=trainer.shuffle_dataset, seed=args.seed)
        TRL.set_train_sampler(trainer, self.sampler)
        gen = TRL.generate_and_score(trainer)

        def generate_and_score(*a, **k):
            if trainer.model.training:  # the G of the batch being generated
                if not self.sampler.emitted:
                    raise ValueError("GroupSizeScheduler: a generation batch did not come from "
                                     "its sampler (was the train dataloader replaced?)")
                G = self.sampler.emitted.popleft()
                trainer.num_generations = advisor.group_size = G
                TRL.train_metrics(trainer)["scheduler/num_generations"] = [float(G)]
            return gen(*a, **k)

        TRL.set_generate_and_score(trainer, generate_and_score)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        """After the advisor's estimate of this step (if any), request the next G."""
        if len(self.advisor.history) == self._seen:
            return
        self._seen = len(self.advisor.history)
        rec = self.advisor.history[-1]
        current = int(self.trainer.num_generations)
        new = propose_group_size(current, rec, self.allowed, self.min_change)
        if new != current:
            self.sampler.request(new)
            self.changes.append({"step": rec["step"], "from": current, "to": new,
                                 **{k: rec[k] for k in ("recommended_G", "g_star_low",
                                                        "g_star_high")}})
