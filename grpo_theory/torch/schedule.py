r"""Which completions each optimisation step of a ``trl.GRPOTrainer`` trains on, and on which
steps :class:`~grpo_theory.torch.GroupSizeAdvisor` estimates.

TRL 1.16.0 (``trl/trainer/grpo_trainer.py``, ``_prepare_inputs``; checked in the tests): with
``gradient_accumulation_steps`` = A, ``steps_per_generation`` = S and ``num_iterations`` = I,
micro-step s (the trainer's ``_step``, A per optimisation step) generates a new generation batch
of ``per_device_train_batch_size * S`` rows when ``s % (S I) == 0``, shuffles its rows
(``shuffle_sequence_dict``) and splits them into S chunks of ``per_device_train_batch_size``
rows; micro-step s trains on chunk ``s % S`` of the latest batch. With P = S I:

* P divides A: optimisation step k is fed by A / P whole generation batches, all generated during
  that step at its parameters (each chunk trained I times); the estimate pools them.
* A divides P: one generation batch, made on the first micro-step of step k (k a multiple of
  F = P / A), feeds the F steps k .. k + F - 1; step k + j trains on chunks
  ``(j A + r) % S``, r < A: when S > A a share A / S of the rows, with the prompts' groups split
  among steps by the shuffle. The estimate is from the whole generation batch (the union of the
  rows the first S / A of those steps train on), at the parameters that generated it, those of
  step k; steps k + 1 .. train on it off-policy (TRL's importance ratio).
* otherwise an optimisation step mixes batches generated at different parameters: refused.

Estimate steps: every ``every`` = K steps are due (1-based steps 1, 1 + K, 1 + 2K, ...); a
generation batch is estimated when the steps it feeds include a due step, and the estimate is
logged on the first of them (:func:`estimated_steps`). With F = 1 (TRL's default
``steps_per_generation = gradient_accumulation_steps``, ``num_iterations = 1``) these are exactly
the due steps.
"""

from __future__ import annotations

import torch

from grpo_theory import _validation as V


class Schedule:
    """TRL's generation schedule (module docstring).

    Args:
        gradient_accumulation_steps, steps_per_generation, num_iterations: A, S, I (>= 1).
        every: K, the spacing of the due steps.
    """

    def __init__(self, gradient_accumulation_steps: int, steps_per_generation: int,
                 num_iterations: int, every: int):
        self.A, self.S, self.I, self.every = (
            V.integer("gradient_accumulation_steps", gradient_accumulation_steps, 1),
            V.integer("steps_per_generation", steps_per_generation, 1),
            V.integer("num_iterations", num_iterations, 1), V.integer("every", every, 1))
        P = self.S * self.I
        if P % self.A and self.A % P:
            raise ValueError(f"GroupSizeAdvisor needs steps_per_generation * num_iterations "
                             f"({self.S} * {self.I}) to divide gradient_accumulation_steps "
                             f"({self.A}) or be a multiple of it: otherwise an optimisation step "
                             f"trains on completions generated at different parameters")
        #: optimisation steps one generation batch feeds (F)
        self.steps_fed = max(1, P // self.A)
        #: generation batches pooled into one optimisation step's estimate
        self.batches_per_step = max(1, self.A // P)

    def due(self, step: int) -> bool:
        """Whether the generation batch made on (0-based) optimisation step ``step`` is
        estimated: the steps it feeds, ``step .. step + F - 1``, include a multiple of K."""
        return (-int(step)) % self.every < self.steps_fed


def estimated_steps(every: int, gradient_accumulation_steps: int, steps_per_generation: int,
                    num_iterations: int, max_steps: int) -> list[int]:
    """The 1-based optimisation steps on which the callback logs an estimate, in a run of
    ``max_steps`` steps: the steps ``k + 1`` that make a generation batch (k a multiple of F)
    and feed a due step (:meth:`Schedule.due`)."""
    sc = Schedule(gradient_accumulation_steps, steps_per_generation, num_iterations, every)
    max_steps = V.integer("max_steps", max_steps, 0)
    return [k + 1 for k in range(0, max_steps, sc.steps_fed) if sc.due(k)]


def _pad(t, width, left):
    extra = width - t.shape[1]
    if extra == 0:
        return t
    fill = t.new_zeros(t.shape[0], extra)
    return torch.cat([fill, t] if left else [t, fill], dim=1)


def pool_batches(batches):
    """One batch of the rows of several generation batches (in order): the prompts left-padded
    and the completions right-padded to common widths (id 0 under a 0 mask).

    Args:
        batches: a list of (output of ``_generate_and_score_completions``, rewards (rows,)).

    Returns:
        (dict with ``prompt_ids``, ``prompt_mask``, ``completion_ids``, ``completion_mask``,
        the rewards (total rows,)).
    """
    if not len(batches):
        raise ValueError("batches must hold at least one generation batch, got none")
    if len(batches) == 1:
        return batches[0]
    P = max(out["prompt_ids"].shape[1] for out, _ in batches)
    T = max(out["completion_ids"].shape[1] for out, _ in batches)
    pooled = {k: torch.cat([_pad(out[k], P if k.startswith("prompt") else T,
                                 k.startswith("prompt")) for out, _ in batches])
              for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}
    return pooled, torch.cat([z for _, z in batches])
