"""One ``trl.GRPOTrainer`` step with :class:`~grpo_theory.torch.RolloutAllocator` on CPU, one
torchrun process each (gloo, DDP), for ``tests/torch/test_torch_trl_allocator_ddp.py``.

``torchrun --standalone --nproc_per_node 2 tests/support/ddp_allocator.py OUT SCENARIO...`` runs,
for each scenario, the tiny Llama of ``support.tiny_trl`` (TRL seed 2: every scenario's groups have
mixed rewards) for one step at learning rate
0 and writes ``OUT/<scenario>_rank<r>.pt``: the process's step inputs (its rows, advantages,
``num_items_in_batch``), the allocator's gathered rewards and history, the rows the process
generated and scored, the parameters, and the process's own gradient of TRL's loss over the
step's micro-batches (DDP trains their mean over processes). Scenarios (``SCENARIOS``): the
layout (num_generations W, rows per process), the sizes, the weighting, the loss.

* ``split``: W = 4, 6 rows per process: the second of the 3 prompts is split between the
  processes (2 real rows on process 0, 1 on process 1, 1 masked); ``"trl"`` with ``dapo``;
* ``prompt``: the same layout, other sizes, ``"prompt"`` with ``dr_grpo``;
* ``idle``: W = 8, 4 rows per process, one prompt of size 3: process 1 holds only masked rows
  (it generates and scores nothing); ``"trl"`` with ``grpo``.
"""

from __future__ import annotations

import os
import sys

import torch
from support.tiny_trl import tiny_trainer

from grpo_theory.torch import FunctionSizes, RolloutAllocator

TEXTS = ["a b", "c d e", "f", "g h", "i j k", "l", "m n", "o p q"]
#: scenario -> (num_generations, rows per process, sizes, weighting, loss_type, scale_rewards)
SCENARIOS = {"split": (4, 6, [3, 4, 2], "trl", "dapo", "group"),
             "prompt": (4, 6, [2, 4, 3], "prompt", "dr_grpo", "none"),
             "idle": (8, 4, [3], "trl", "grpo", "group")}


def run(out_dir, scenario):
    W, rows, sizes, weighting, loss_type, scale = SCENARIOS[scenario]
    scored = []

    def reward(completions, **kw):  # the parity of the first character; counts its rows
        scored.append(len(completions))
        return [float(ord((c[0]["content"] or "\0")[0]) % 2) for c in completions]

    tr = tiny_trainer(os.path.join(out_dir, scenario), prompts=1, num_generations=W,
                      texts=TEXTS, per_device_train_batch_size=rows, max_steps=1,
                      learning_rate=0.0, loss_type=loss_type, scale_rewards=scale,
                      steps_per_generation=1, seed=2)
    tr.reward_funcs, tr.reward_func_names = [reward], ["reward"]
    generated, single = [], tr._generate_single_turn

    def spy(prompt_ids, *a, **k):
        generated.append(len(prompt_ids))
        return single(prompt_ids, *a, **k)

    tr._generate_single_turn = spy
    al = RolloutAllocator(tr, FunctionSizes(lambda *a: sizes), budget=sum(sizes),
                          weighting=weighting)
    tr.add_callback(al)
    outs, gen = [], tr._generate_and_score_completions

    def record(*a, **k):
        out = gen(*a, **k)
        outs.append({k: (v.clone() if torch.is_tensor(v) else v) for k, v in out.items()})
        return out

    tr._generate_and_score_completions = record
    tr.train()
    model = tr.model  # the unwrapped model: its gradient is this process's own (no DDP sync)
    model.train()
    model.zero_grad()
    for chunk in tr._buffered_inputs:
        tr.compute_loss(model, chunk).backward()
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.requires_grad])
    rank = tr.accelerator.process_index
    torch.save(dict(out=outs[0], rewards=al._rewards.clone(), history=al.history,
                    generated=generated, scored=scored, grad=grad.double(),
                    state={k: v.clone() for k, v in model.state_dict().items()},
                    log_history=tr.state.log_history, num_processes=tr.accelerator.num_processes,
                    distributed_type=str(tr.accelerator.distributed_type),
                    max_completion_length=tr.max_completion_length),
               os.path.join(out_dir, f"{scenario}_rank{rank}.pt"))


if __name__ == "__main__":
    for name in sys.argv[2:]:
        run(sys.argv[1], name)
