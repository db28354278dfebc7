"""Tiny random Llama / Qwen2 causal LMs, rollouts with left padding and early EOS, and the naive
per-sample scores (one unpadded sample at a time, ``torch.autograd.grad``) of the torch route's
tests."""

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

PAD, EOS = 1, 2
VOCAB = 44  # 4 special tokens and 40 words (tests/torch/test_torch_advisor.py's tokenizer)


def tiny_model(kind="llama", tied=True, layers=2, seed=0):
    c = dict(vocab_size=VOCAB, hidden_size=16, intermediate_size=24, num_hidden_layers=layers,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             tie_word_embeddings=tied, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=3,
             initializer_range=0.3, rms_norm_eps=1e-6)
    torch.manual_seed(seed)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**c)).float()
    return Qwen2ForCausalLM(Qwen2Config(use_sliding_window=False, **c)).float()


def rollouts(m=4, n=3, P=5, T=6, seed=1):
    """Left-padded prompts (row 1: two pads, the last row: one), responses with some early EOS."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(4, VOCAB, (m, P), generator=g)
    xm = torch.ones_like(x)
    x[1, :2], xm[1, :2] = PAD, 0
    x[-1, :1], xm[-1, :1] = PAD, 0
    y = torch.randint(4, VOCAB, (m, n, T), generator=g)
    y[0, 1, 2] = EOS
    y[2, 0, 4] = EOS
    y[1, 2, 0] = EOS
    y[0, 1, 3:] = PAD
    z = torch.rand(m, n, generator=g).double().numpy()
    return x, xm, y, z


def naive_scores(model, x, xm, y, temperature=1.0, weights=None):
    """(m, n, D) float64 scores, one unpadded sample at a time."""
    params = [p for p in model.parameters() if p.requires_grad]
    m, n, T = y.shape
    S = np.zeros((m, n, sum(p.numel() for p in params)))
    model.eval()
    for a in range(m):
        xa = x[a][xm[a].bool()][None]
        for i in range(n):
            yi = y[a, i]
            hit = (yi == EOS).nonzero()
            yi = yi[: int(hit[0, 0]) + 1 if len(hit) else T][None]
            lg = model(input_ids=torch.cat([xa, yi], 1)).logits[:, xa.shape[1] - 1:-1].float()
            lp = torch.log_softmax(lg / temperature, -1).gather(-1, yi[..., None]).sum()
            gs = torch.autograd.grad(lp, params)
            S[a, i] = torch.cat([g.reshape(-1) for g in gs]).double().numpy()
            if weights is not None:
                S[a, i] *= weights[a, i]
    return S
