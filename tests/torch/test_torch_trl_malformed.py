"""Malformed inputs of the TRL layer, refused when the object is made and naming the argument:
an advisor made after the allocator (it would log nothing), a second allocator, a plain
``transformers.Trainer``, a scheduler's minimum group size the advisor cannot use or float
bounds, sizes that are not integers (never truncated), and the schedule helpers' zero, float
and empty inputs."""

import pytest
from support.tiny_trl import tiny_llama, tiny_trainer

from grpo_theory.torch import (FunctionSizes, GroupSizeAdvisor, GroupSizeScheduler,
                               RolloutAllocator, UniformSizes)
from grpo_theory.torch.schedule import Schedule, estimated_steps, pool_batches

TEXTS = ["a b", "c d e", "f", "g h", "i j k", "l", "m n", "o p q", "r", "s t", "u v w", "x"]


@pytest.fixture
def trainer(tmp_path):
    return tiny_trainer(tmp_path, prompts=4, num_generations=3, texts=TEXTS)


def test_an_advisor_made_after_the_allocator_is_refused(trainer):
    """The rival (no check): the advisor is made, then never sees equal groups and logs
    nothing; the refusal names the allocator."""
    RolloutAllocator(trainer, UniformSizes(), budget=12)
    with pytest.raises(ValueError, match="GroupSizeAdvisor cannot run beside the trainer's "
                                         "RolloutAllocator"):
        GroupSizeAdvisor(trainer, every=1)
    with pytest.raises(ValueError, match="already has a RolloutAllocator"):
        RolloutAllocator(trainer, UniformSizes(), budget=12)


def test_the_advisor_alone_is_still_made(trainer):
    assert GroupSizeAdvisor(trainer, every=1).group_size == 3


def test_a_plain_transformers_trainer_is_refused_by_name(tmp_path):
    from transformers import Trainer, TrainingArguments

    plain = Trainer(model=tiny_llama(), args=TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to=[]))
    with pytest.raises(ValueError, match="trainer must be a trl.GRPOTrainer"):
        RolloutAllocator(plain, UniformSizes(), budget=12)
    with pytest.raises(ValueError, match="trainer must be a trl.GRPOTrainer"):
        GroupSizeAdvisor(plain)
    with pytest.raises(ValueError, match="advisor must be a GroupSizeAdvisor, got object"):
        GroupSizeScheduler(plain, object())


@pytest.mark.parametrize("kw, match", [
    (dict(min_group_size=2), "min_group_size must be an integer >= 3"),
    (dict(min_group_size=3.0), "min_group_size must be an integer"),
    (dict(max_group_size=6.5), "max_group_size must be an integer"),
    (dict(max_group_size=2), "max_group_size must be an integer >= 3")])
def test_scheduler_bounds_are_checked_when_it_is_made(trainer, kw, match):
    """min_group_size 2 was accepted and crashed the advisor at the first step that picked
    G = 2 (it needs 3 completions per prompt)."""
    cb = GroupSizeAdvisor(trainer, every=1)
    trainer.add_callback(cb)
    with pytest.raises(ValueError, match=match):
        GroupSizeScheduler(trainer, cb, **kw)


@pytest.mark.parametrize("sizes, ok", [([3, 3, 3, 3], True), ([3.0, 3.0, 3.0, 3.0], True),
                                       ([2.7, 3, 3, 3], False), (["3", 3, 3, 3], False),
                                       ([None, 3, 3, 3], False)])
def test_sizes_are_integers_never_truncated(trainer, sizes, ok):
    """The rival ``int(2.7) = 2`` trains a group of 2 where the rule asked for 2.7."""
    al = RolloutAllocator(trainer, FunctionSizes(lambda *a: sizes), budget=12)
    prompts = [{"prompt": t} for t in TEXTS[:4]]
    if ok:
        assert al._sizes(prompts) == [3, 3, 3, 3]
    else:
        with pytest.raises(ValueError, match="FunctionSizes.sizes must return integers"):
            al._sizes(prompts)


@pytest.mark.parametrize("args, match", [
    ((1, 1, 1, 0), "every must be an integer >= 1"),
    ((0, 1, 1, 1), "gradient_accumulation_steps must be an integer >= 1"),
    ((1.5, 1, 1, 1), "gradient_accumulation_steps must be an integer"),
    ((1, 2.0, 1, 1), "steps_per_generation must be an integer"),
    ((1, 1, 0, 1), "num_iterations must be an integer >= 1")])
def test_schedule_arguments(args, match):
    """every = 0 divided by zero; 1.5 was truncated to 1."""
    with pytest.raises(ValueError, match=match):
        Schedule(*args)


def test_schedule_helpers_refuse_floats_and_empty_lists():
    with pytest.raises(ValueError, match="max_steps must be an integer"):
        estimated_steps(2, 1, 1, 1, 2.5)
    with pytest.raises(ValueError, match="every must be an integer >= 1"):
        estimated_steps(0, 1, 1, 1, 4)
    assert estimated_steps(2, 1, 1, 1, 5) == [1, 3, 5]
    with pytest.raises(ValueError, match="batches must hold at least one generation batch"):
        pool_batches([])
