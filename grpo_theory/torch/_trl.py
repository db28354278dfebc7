"""The private members of TRL that the torch layer reads or replaces, all in this one module.

They come from TRL 1.16.0 (``trl/trainer/grpo_trainer.py``, class ``GRPOTrainer``); a TRL
release that renames one breaks here alone, and the callbacks' checks name the missing member:

* ``_generate_and_score_completions(inputs)``: generates a batch of completions, scores them and
  computes the advantages (the dict every callback reads);
* ``_generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, ...)``: the
  completions' ids (and log-probabilities) of given prompts;
* ``_calculate_rewards(inputs, prompts, completions, completion_ids_list)``: the (N, F) rewards
  of the F reward functions, ending with ``gather`` (the module's name for
  ``accelerate.utils.gather``);
* ``_metrics["train"]``: the lists TRL averages over its logging window;
* ``_get_train_sampler(dataset=None)``: the sampler of the train dataloader;
* ``_entropy_bonus_enabled``: whether the loss has an entropy bonus.
"""

from __future__ import annotations

import contextlib

#: the private members named in the trainer checks (a trainer without one is refused)
GENERATE_AND_SCORE = "_generate_and_score_completions"
GENERATE_SINGLE_TURN = "_generate_single_turn"
CALCULATE_REWARDS = "_calculate_rewards"
METRICS = "_metrics"


def generate_and_score(trainer):
    """The trainer's bound ``_generate_and_score_completions``."""
    return trainer._generate_and_score_completions


def generate_single_turn(trainer):
    """The trainer's bound ``_generate_single_turn``."""
    return trainer._generate_single_turn


def calculate_rewards(trainer):
    """The trainer's bound ``_calculate_rewards``."""
    return trainer._calculate_rewards


def set_generate_and_score(trainer, fn) -> None:
    """Replace ``_generate_and_score_completions`` on this trainer instance by ``fn``."""
    trainer._generate_and_score_completions = fn


def set_generate_single_turn(trainer, fn) -> None:
    """Replace ``_generate_single_turn`` on this trainer instance by ``fn``."""
    trainer._generate_single_turn = fn


def set_calculate_rewards(trainer, fn) -> None:
    """Replace ``_calculate_rewards`` on this trainer instance by ``fn``."""
    trainer._calculate_rewards = fn


def set_train_sampler(trainer, sampler) -> None:
    """Make ``sampler`` the sampler of the trainer's train dataloader."""
    trainer._get_train_sampler = lambda dataset=None: sampler


def train_metrics(trainer) -> dict:
    """The trainer's ``_metrics["train"]``: metric name -> list of values (averaged when
    logged)."""
    return trainer._metrics["train"]


def entropy_bonus_enabled(trainer) -> bool:
    """Whether the trainer's loss has an entropy bonus (``_entropy_bonus_enabled``)."""
    return trainer._entropy_bonus_enabled


@contextlib.contextmanager
def ungathered():
    """TRL 1.16.0's ``_calculate_rewards`` ends with ``gather(rewards_per_func)`` (its module's
    name for ``accelerate.utils.gather``). Called on a process's real rows, whose number differs
    between processes, that gather cannot run; inside this context it returns its argument, so
    the caller gathers the process's full block of rows itself."""
    import trl.trainer.grpo_trainer as grpo

    saved = grpo.gather
    grpo.gather = lambda tensor: tensor
    try:
        yield
    finally:
        grpo.gather = saved
