"""A 2-step ``trl.GRPOTrainer`` run on CPU, one torchrun process each (gloo), for the multi-process
tests of the callback (``tests/torch/test_torch_distributed.py``).

``torchrun --standalone --nproc_per_node 2 tests/support/ddp_grpo.py OUT SCENARIO...`` runs, for
each scenario, a fresh tiny Llama (hidden 16, 1 layer, seed 0) for 2 steps and writes
``OUT/<scenario>_rank<r>.pt``: the process's final parameters, its ``log_history`` and, with the
callback, ``advisor.history`` and the process's own rollouts and rewards of each generation
batch of step 1 (the estimated step) with the parameters that generated them. Scenarios:

* ``whole``: num_generations 3, 9 rows (3 whole groups) per process, with the callback;
* ``plain``: the same without the callback (its parameters must equal ``whole``'s);
* ``split``: num_generations 4, 6 rows per process, so the second of the 3 groups is split
  between the two processes, with the callback;
* ``accum``: num_generations 4, 6 rows per process, ``gradient_accumulation_steps=2`` and
  ``steps_per_generation=1``: step 1 trains on two generation batches (each with a split group),
  pooled by the callback, with the callback;
* ``error``: no training; :func:`grpo_theory.torch.distributed.on_main` with a function that
  raises on the main process: every process must raise it (none left waiting).
"""

from __future__ import annotations

import os
import sys

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

from grpo_theory.torch import GroupSizeAdvisor

SPECIAL = ["<unk>", "<pad>", "<eos>", "<bos>"]
WORDS = ([chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
         + ["user", "assistant", ":", "system"])
VOCAB = len(SPECIAL) + len(WORDS)
PAD, EOS = 1, 2
CHAT = ("{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant : {% endif %}")
TEXTS = ["a b", "c d e", "f", "g h", "i j k", "l", "m n", "o", "p q r", "s", "t u", "v w x"]
#: scenario -> (num_generations, rows per process, callback, gradient_accumulation_steps)
SCENARIOS = {"whole": (3, 9, True, 1), "plain": (3, 9, False, 1), "split": (4, 6, True, 1),
             "accum": (4, 6, True, 2)}
MAX_COMPLETION = 5


def model():
    """The tiny Llama (seed 0)."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True, pad_token_id=PAD, eos_token_id=EOS,
                      bos_token_id=3, initializer_range=0.3, rms_norm_eps=1e-6)
    return LlamaForCausalLM(cfg).float()


def tokenizer():
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(SPECIAL + WORDS)},
                                     unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIAL)
    t = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                eos_token="<eos>", bos_token="<bos>")
    t.chat_template = CHAT
    return t


def reward(completions, **kw):  # 1 for an odd number of characters
    return [float(len(c[0]["content"]) % 2) for c in completions]


def raise_on_main(out_dir):
    from accelerate import Accelerator

    from grpo_theory.torch.distributed import on_main

    acc = Accelerator(cpu=True)
    try:
        on_main(acc, lambda: 1 / 0)
        got = "returned"
    except ZeroDivisionError as err:
        got = f"raised {err}"
    torch.save({"got": got, "value": on_main(acc, lambda: acc.process_index + 41)},
               os.path.join(out_dir, f"error_rank{acc.process_index}.pt"))


def run(out_dir, scenario):
    if scenario == "error":
        return raise_on_main(out_dir)
    G, rows, with_callback, accumulate = SCENARIOS[scenario]
    ds = Dataset.from_dict({"prompt": [[{"role": "user", "content": t}] for t in TEXTS]})
    args = GRPOConfig(output_dir=os.path.join(out_dir, scenario), report_to=[], use_cpu=True,
                      bf16=False, max_completion_length=MAX_COMPLETION, num_generations=G,
                      per_device_train_batch_size=rows, max_steps=2, logging_steps=1,
                      save_strategy="no", learning_rate=1e-2, seed=0, temperature=1.0,
                      gradient_accumulation_steps=accumulate, steps_per_generation=1)
    tr = GRPOTrainer(model=model(), reward_funcs=reward, args=args, train_dataset=ds,
                     processing_class=tokenizer())
    rank, record = tr.accelerator.process_index, {"batches": []}
    if with_callback:
        gen = tr._generate_and_score_completions

        def spy(*a, **k):  # this process's rollouts of step 1 and the parameters behind them
            out = gen(*a, **k)
            if tr.state.global_step == 0:
                n = out["completion_ids"].shape[0]
                record["state"] = {k: v.clone() for k, v in tr.model.state_dict().items()}
                record["batches"].append(dict(
                    rewards=advisor._rewards[rank * n:(rank + 1) * n].clone(),
                    **{k: out[k].clone() for k in ("prompt_ids", "prompt_mask",
                                                   "completion_ids", "completion_mask")}))
            return out

        tr._generate_and_score_completions = spy
        advisor = GroupSizeAdvisor(tr, every=10)
        tr.add_callback(advisor)
        record["budget"] = advisor.budget
    tr.train()
    if with_callback:
        record["history"] = advisor.history
    record.update(final={k: v.clone() for k, v in tr.model.state_dict().items()},
                  log_history=tr.state.log_history, num_processes=tr.accelerator.num_processes,
                  distributed_type=str(tr.accelerator.distributed_type))
    torch.save(record, os.path.join(out_dir, f"{scenario}_rank{rank}.pt"))


if __name__ == "__main__":
    for name in sys.argv[2:]:
        run(sys.argv[1], name)
