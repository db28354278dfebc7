r"""The TRL callback across processes: gather the step's rollouts, estimate once on the main one.

Under ``torchrun`` / ``accelerate launch`` with DDP each process generates a slice of TRL's
generation batch and the rewards are gathered (TRL 1.16.0, ``trl/trainer/grpo_trainer.py``):

* ``RepeatSampler`` (``trl/trainer/utils.py``) yields the global generation batch,
  ``generation_batch_size = per_device_train_batch_size * num_processes * steps_per_generation``
  rows, each prompt ``num_generations`` consecutive times; the data loader gives process ``r``
  the ``r``-th contiguous block of ``generation_batch_size / num_processes`` rows. TRL only
  requires ``generation_batch_size % num_generations == 0``, so a group may be split between two
  processes (e.g. ``num_generations=4``, 6 rows per process).
* ``_calculate_rewards`` returns ``gather(rewards_per_func)``: the rewards of all rows, in process
  order; ``_generate_and_score_completions`` keeps its own rows of the advantages by
  ``process_slice = [process_index * n_local, (process_index + 1) * n_local)``, and returns the
  local ``prompt_ids``/``prompt_mask`` (left-padded to the local longest prompt) and
  ``completion_ids``/``completion_mask`` (right-padded to the local longest completion).

So the global batch, in the rewards' order, is the concatenation of the processes' rows in
process order: :func:`gather_rollouts` pads the prompts on the left and the completions on the
right to the longest across processes (mask 0: the log-probabilities do not change) and
all-gathers them, which also reassembles a split group. The estimate then runs once, on the
main process (:func:`on_main`), and its result is broadcast; every process calls the same
collectives in the same order, so none waits forever.

Why the rollouts and not per-prompt statistics: gathering token ids costs
``num_processes * n_local * (P + T)`` integers, nothing next to one forward pass, it keeps split
groups whole, and the estimate is then the single-process one on the same rows, by construction.
The price is that the other processes wait while the main one runs the estimate's passes
over the whole generation batch (about ``num_processes`` times a process's share).

The estimate uses the unwrapped model and ``torch.autograd.grad`` (no ``.grad`` is written, DDP's
reducer hooks are not run), outside the DDP forward. Sharded parameters are not supported:
:func:`check_distributed` refuses FSDP, DeepSpeed and Megatron-LM runs.
"""

from __future__ import annotations

import torch


#: accelerate ``DistributedType`` names whose processes hold shards of the parameters
SHARDED = ("FSDP", "DEEPSPEED", "MEGATRON_LM")


def check_distributed(accelerator, who: str = "GroupSizeAdvisor",
                      why: str = "sharded parameters"):
    """Refuse a run whose parameters are sharded across processes (FSDP, DeepSpeed, Megatron-LM):
    the estimate needs every trainable parameter whole on the main process, and per-prompt
    generation needs forward passes that no other process has to join.

    Args:
        accelerator: the trainer's ``accelerate.Accelerator``.
        who: the refusing object's name, for the message.
        why: the reason, for the message.
    """
    from accelerate.utils import DistributedType

    kind = DistributedType(accelerator.distributed_type)
    if kind.name in SHARDED:
        raise ValueError(f"{who} does not support accelerate's distributed_type {kind.name} "
                         f"({why}); use DDP (torchrun / accelerate launch without FSDP or "
                         f"DeepSpeed) or a single process")


def gather_rollouts(accelerator, prompt_ids, prompt_mask, completion_ids, completion_mask):
    """The rows of every process, concatenated in process order (the order of TRL's gathered
    rewards), padded to common lengths.

    Every process must call it (it runs collectives). Prompts are padded on the left and
    completions on the right, the masks with 0 and the ids with 0.

    Args:
        accelerator: the trainer's ``accelerate.Accelerator``.
        prompt_ids, prompt_mask: (n_local, P_r) left-padded prompts of this process.
        completion_ids, completion_mask: (n_local, T_r) its completions.

    Returns:
        ``(prompt_ids, prompt_mask, completion_ids, completion_mask)`` of
        ``num_processes * n_local`` rows (the inputs themselves in a single process).
    """
    tensors = (prompt_ids, prompt_mask, completion_ids, completion_mask)
    if accelerator.num_processes == 1:
        return tensors
    rows = accelerator.gather(torch.tensor([prompt_ids.shape[0]], device=prompt_ids.device))
    if int(rows.min()) != int(rows.max()):
        raise ValueError(f"GroupSizeAdvisor: the processes generated different numbers of rows "
                         f"({rows.tolist()}); the gathered batch would not match TRL's rewards")
    out = []
    for t, first in zip(tensors, (True, True, False, False)):
        t = accelerator.pad_across_processes(t.contiguous(), dim=1, pad_index=0, pad_first=first)
        out.append(accelerator.gather(t))
    return tuple(out)


def on_main(accelerator, fn):
    """``fn()`` run on the main process only, its result (picklable) returned on every process.

    An exception raised by ``fn`` on the main process is re-raised on every process (after the
    broadcast, so none is left waiting). Every process must call it.

    Args:
        accelerator: the trainer's ``accelerate.Accelerator``.
        fn: a function of no argument.

    Returns:
        ``fn()``'s value.
    """
    if accelerator.num_processes == 1:
        return fn()
    from accelerate.utils import broadcast_object_list

    box = [None]
    if accelerator.is_main_process:
        try:
            box = [(True, fn())]
        except Exception as err:  # noqa: BLE001 - re-raised on every process below
            box = [(False, err)]
    box = broadcast_object_list(box, from_process=0)
    ok, value = box[0]
    if not ok:
        raise value
    return value
