"""The group-size advisor inside a TRL GRPOTrainer run (tiny model, CPU, well under a minute).

    pip install -e ".[torch]"
    python notebooks/trl_callback.py

A randomly initialised Qwen2 causal LM of a few thousand parameters and a word-level tokenizer
are built here (nothing is downloaded); the reward is 1 for a completion with an odd number of
characters. One line adds the advisor to the trainer:

    trainer.add_callback(GroupSizeAdvisor(trainer, every=1))

and the trainer's logs then carry advisor/c1, advisor/c2, advisor/c3, advisor/g_star,
advisor/recommended_G, advisor/zero_variance_share and advisor/mse_ratio_grpo_oracle, estimated
from the completions and rewards of the step (no extra generation). For a real run replace the
model, tokenizer, dataset and reward by your own and use every=10 or more.
"""

import tempfile
import time

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from trl import GRPOConfig, GRPOTrainer

from grpo_theory.torch import GroupSizeAdvisor, estimate_from_torch_model

SPECIAL = ["<unk>", "<pad>", "<eos>", "<bos>"]
WORDS = ([chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
         + ["user", "assistant", ":"])


def tiny_tokenizer():
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(SPECIAL + WORDS)},
                                     unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIAL)
    out = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                  eos_token="<eos>", bos_token="<bos>")
    out.chat_template = ("{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} "
                         "{% endfor %}{% if add_generation_prompt %}assistant : {% endif %}")
    return out


def tiny_model(vocab_size, seed=0):
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=48,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64, pad_token_id=1, eos_token_id=2,
                      bos_token_id=3, initializer_range=0.2, use_sliding_window=False)
    return Qwen2ForCausalLM(cfg)


def odd_length(completions, **kwargs):
    """1 for a completion with an odd number of characters (TRL's reward-function signature)."""
    return [float(len(c[0]["content"]) % 2) for c in completions]


def main():
    tok = tiny_tokenizer()
    model = tiny_model(len(tok))
    print(f"model: {sum(p.numel() for p in model.parameters())} parameters")
    prompts = ["a b", "c d e", "f", "g h", "i j k", "l m", "n", "o p q"]
    train = Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in prompts]})
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(output_dir=out, report_to=[], use_cpu=True, bf16=False,
                          max_completion_length=8, num_generations=4,
                          per_device_train_batch_size=16, max_steps=3, logging_steps=1,
                          save_strategy="no", learning_rate=1e-2, seed=0)
        trainer = GRPOTrainer(model=model, reward_funcs=odd_length, args=args,
                              train_dataset=train, processing_class=tok)
        advisor = GroupSizeAdvisor(trainer, every=1)
        trainer.add_callback(advisor)
        t0 = time.time()
        trainer.train()
        print(f"trained 3 steps in {time.time() - t0:.1f} s; advantage preset "
              f"{advisor.preset!r} (scale_rewards={trainer.scale_rewards!r}), weighting "
              f"{advisor.weighting!r} (loss_type={trainer.loss_type!r})")
    keys = ("c1", "c2", "c3", "g_star", "recommended_G", "zero_variance_share",
            "mse_ratio_grpo_oracle")
    print("step  " + "  ".join(f"{k:>12}" for k in keys))
    for h in advisor.history:
        print(f"{h['step']:>4}  " + "  ".join(f"{h[k]:>12.4g}" for k in keys))

    # the same advisor without a trainer: one call samples and estimates
    est = estimate_from_torch_model(model, tok, prompts[:4], lambda p, c: [len(s) % 2 for s in c],
                                    n_samples=4, max_new_tokens=8, seed=0)
    print(est.summary())
    G = est.recommended_group_size(16)  # None while c1 is not resolved above 0
    print("recommended G at 16 completions per step:",
          G if G is not None else f"none ({est.no_recommendation_reason})")


if __name__ == "__main__":
    main()
