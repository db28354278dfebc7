"""The study's model, tokenizer and task: a random 1-layer Llama (hidden 16, vocab 44) with a
word-level tokenizer, prompts of three letters, and a reward for naming the prompt's first
letter (pass rate about 0.1 at initialisation, learnable by copying)."""

from __future__ import annotations

import numpy as np

SPECIAL = ["<unk>", "<pad>", "<eos>", "<bos>"]
WORDS = ([chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
         + ["user", "assistant", ":", "system"])
CHAT = ("{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant : {% endif %}")


def tiny_llama(seed: int):
    """The random policy of ``seed`` (the same initialisation in every arm of a seed)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(int(seed))
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=len(SPECIAL) + len(WORDS), hidden_size=16, intermediate_size=24,
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, tie_word_embeddings=True, pad_token_id=1, eos_token_id=2,
        bos_token_id=3, initializer_range=0.3, rms_norm_eps=1e-6)).float()


def tiny_tokenizer():
    """A word-level tokenizer over :data:`WORDS` with the chat template :data:`CHAT`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(SPECIAL + WORDS)},
                                     unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIAL)
    t = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                eos_token="<eos>", bos_token="<bos>")
    t.chat_template = CHAT
    return t


def prompts(n: int, seed: int = 0) -> list[str]:
    """``n`` prompts of three random letters (fixed by ``seed``, the same in every run)."""
    rng = np.random.default_rng(seed)
    letters = [chr(97 + i) for i in range(26)]
    return [" ".join(rng.choice(letters, 3)) for _ in range(int(n))]


def first_letter_reward(prompts, completions, **kw):
    """TRL's reward convention: 1 when the completion contains the prompt's first letter as a
    word, else 0."""
    out = []
    for p, c in zip(prompts, completions):
        want = p[-1]["content"].split()[0]
        out.append(float(want in c[0]["content"].split()))
    return out
