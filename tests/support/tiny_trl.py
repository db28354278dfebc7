"""Tiny TRL runs for the torch callback's tests: a random 1-layer Llama (hidden 16, vocab 44), a
WordLevel tokenizer, a ``trl.GRPOTrainer`` on six short prompts, and naive per-sample scores (one
unpadded row at a time, ``torch.autograd.grad``) of exactly the trainable parameters."""

import numpy as np
import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

PAD, EOS = 1, 2
SPECIAL = ["<unk>", "<pad>", "<eos>", "<bos>"]
WORDS = ([chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
         + ["user", "assistant", ":", "system"])
VOCAB = len(SPECIAL) + len(WORDS)  # 44
CHAT = ("{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant : {% endif %}")
TEXTS = ["a b", "c d e", "f", "g h", "i j k", "l"]


def tiny_llama(seed=0, tied=True):
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=tied, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=3,
        initializer_range=0.3, rms_norm_eps=1e-6)).float()


def tiny_tokenizer():
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(SPECIAL + WORDS)},
                                     unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIAL)
    t = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                eos_token="<eos>", bos_token="<bos>")
    t.chat_template = CHAT
    return t


def odd_length_reward(completions, **kw):
    """1 for a completion with an odd number of characters."""
    return [float(len(c[0]["content"]) % 2) for c in completions]


def tiny_trainer(tmp_path, *, model=None, prompts=3, num_generations=3, max_steps=2,
                 texts=TEXTS, **config):
    """A GRPOTrainer of ``prompts * num_generations`` rows per micro-batch on the prompts
    ``texts``; ``config`` goes to GRPOConfig (gradient_accumulation_steps, steps_per_generation,
    num_iterations, ...); ``peft_config`` to the trainer."""
    peft_config = config.pop("peft_config", None)
    ds = Dataset.from_dict({"prompt": [[{"role": "user", "content": t}] for t in texts]})
    kw = dict(output_dir=str(tmp_path), report_to=[], use_cpu=True, bf16=False,
              max_completion_length=5, num_generations=num_generations,
              per_device_train_batch_size=num_generations * prompts, max_steps=max_steps,
              logging_steps=1, save_strategy="no", learning_rate=1e-2, seed=0, temperature=1.0)
    kw.update(config)
    return GRPOTrainer(model=model if model is not None else tiny_llama(), args=GRPOConfig(**kw),
                       reward_funcs=odd_length_reward, train_dataset=ds,
                       processing_class=tiny_tokenizer(), peft_config=peft_config)


def rows(x, xm, y, ym):
    """The rows as a sorted list of (prompt tokens, completion tokens) tuples (masks applied)."""
    return sorted((tuple(x[i][xm[i].bool()].tolist()), tuple(y[i][ym[i].bool()].tolist()))
                  for i in range(x.shape[0]))


def naive_scores(model, x, xm, y, ym, temperature=1.0):
    """(N, D) float64 per-sample scores of the trainable parameters, one unpadded row at a time
    (masks select the tokens)."""
    params = [p for p in model.parameters() if p.requires_grad]
    was = model.training
    model.eval()
    out = []
    for i in range(x.shape[0]):
        xa, yi = x[i][xm[i].bool()][None], y[i][ym[i].bool()][None]
        lg = model(input_ids=torch.cat([xa, yi], 1)).logits[:, xa.shape[1] - 1:-1].float()
        lp = torch.log_softmax(lg / temperature, -1).gather(-1, yi[..., None]).sum()
        gs = torch.autograd.grad(lp, params, allow_unused=True)
        out.append(torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1)
                              for g, p in zip(gs, params)]).double().numpy())
    model.train(was)
    return np.stack(out)


def allocator_weights(z, sizes, lengths, weighting, loss_type, scale, Lmax, B):
    """The per-row weights w of RolloutAllocator's stated estimator (the loss's gradient is
    -sum_r w_r S_r) from the real rows' rewards ``z`` and ``lengths`` in the batch's order, the
    ``sizes`` of its ``B`` prompts and TRL's ``max_completion_length`` ``Lmax``."""
    N, out = sum(sizes), []
    zs = np.split(np.asarray(z, float), np.cumsum(sizes)[:-1])
    Ls = np.split(np.asarray(lengths, float), np.cumsum(sizes)[:-1])
    T = float(np.sum(lengths))
    for zi, Li in zip(zs, Ls):
        G = zi.size
        if weighting == "prompt":
            loo = zi - (zi.sum() - zi) / (G - 1)
            out.append(loo / (B * G) / (Li if loss_type == "grpo" else Lmax))
            continue
        A = zi - zi.mean()
        if scale == "group":
            A = A / (zi.std(ddof=1) + 1e-4)
        out.append(A / {"grpo": N * Li, "dr_grpo": N * Lmax, "dapo": T, "bnpo": T}[loss_type])
    return np.concatenate(out)
