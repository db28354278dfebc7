"""Tiny Hugging Face checkpoints (Qwen2 / Llama layout) and an independent float64 reference.

``write_checkpoint`` writes a random checkpoint in the Hugging Face layout (config.json, one or two
safetensors shards with model.safetensors.index.json, generation_config.json, a WordLevel
tokenizer.json over the words ``a``..``z``, ``0``..``9``). ``reference_logits`` is a float64 NumPy
implementation of the architecture (RMSNorm, rotary embeddings on rotate-half pairs, grouped-query
attention with q/k/v biases, SwiGLU, tied or untied head, left padding by attention mask and
position ids as Hugging Face generates) that the loaded policy is compared with.
"""

import json

import numpy as np
import tokenizers

from grpo_theory.lm.checkpoints import hf

__all__ = ["PAD", "EOS", "EOS2", "PP", "WORDS", "SPECIAL", "SIZES", "hf_config", "hf_weights",
           "word_tokenizer", "write_checkpoint", "reference_logits", "reference_log_prob"]

PAD, EOS, EOS2 = 1, 2, 3  # <|endoftext|>, <|im_end|>, <|eot|>
PP = hf.PROMPT_PAD  # the prompts' left-padding marker (not a token id)
WORDS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
SPECIAL = ["<unk>", "<|endoftext|>", "<|im_end|>", "<|eot|>"]
SIZES = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=48, max_position_embeddings=64)


def hf_config(model_type, tied, theta):
    c = dict(SIZES, model_type=model_type, rms_norm_eps=1e-6, rope_theta=theta,
             tie_word_embeddings=tied, hidden_act="silu", eos_token_id=EOS, rope_scaling=None)
    if model_type == "qwen2":
        c.update(architectures=["Qwen2ForCausalLM"], use_sliding_window=False)
    else:
        c.update(architectures=["LlamaForCausalLM"], attention_bias=False, mlp_bias=False)
    return c


def hf_weights(cfg, bias, seed):
    """Random HF-named float32 tensors (torch layout: Linear weights are (out, in))."""
    rng = np.random.default_rng(seed)
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    h, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or d // h
    r = lambda *s, sc=0.4: (sc * rng.standard_normal(s)).astype(np.float32)
    w = {"model.embed_tokens.weight": r(v, d, sc=1.0),
         "model.norm.weight": (1 + r(d, sc=0.1))}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = r(v, d, sc=0.5)
    for i in range(cfg["num_hidden_layers"]):
        a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        w[a + "q_proj.weight"], w[a + "k_proj.weight"] = r(h * hd, d), r(kv * hd, d)
        w[a + "v_proj.weight"], w[a + "o_proj.weight"] = r(kv * hd, d), r(d, h * hd)
        if bias:
            w[a + "q_proj.bias"], w[a + "k_proj.bias"] = r(h * hd), r(kv * hd)
            w[a + "v_proj.bias"] = r(kv * hd)
        w[m + "gate_proj.weight"], w[m + "up_proj.weight"] = r(f, d), r(f, d)
        w[m + "down_proj.weight"] = r(d, f)
        w[f"model.layers.{i}.input_layernorm.weight"] = 1 + r(d, sc=0.1)
        w[f"model.layers.{i}.post_attention_layernorm.weight"] = 1 + r(d, sc=0.1)
    return w


def word_tokenizer():
    from tokenizers import models, pre_tokenizers
    vocab = {t: i for i, t in enumerate(SPECIAL + WORDS)}
    tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIAL)
    return tok


def write_checkpoint(path, model_type="qwen2", tied=False, bias=True, theta=100.0, seed=0,
                     shards=2, head_dim=None):
    """A tiny checkpoint in the Hugging Face layout; returns (config, weights)."""
    from safetensors.numpy import save_file
    path.mkdir(parents=True, exist_ok=True)
    cfg = hf_config(model_type, tied, theta)
    if head_dim is not None:
        cfg["head_dim"] = head_dim
    w = hf_weights(cfg, bias, seed)
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [EOS, EOS2], "pad_token_id": PAD}))
    word_tokenizer().save(str(path / "tokenizer.json"))
    names = sorted(w)
    if shards == 1:
        save_file(w, str(path / "model.safetensors"))
    else:
        files = [f"model-{k + 1:05d}-of-{shards:05d}.safetensors" for k in range(shards)]
        wm = {n: files[j % shards] for j, n in enumerate(names)}
        for fn in files:
            save_file({n: w[n] for n in names if wm[n] == fn}, str(path / fn))
        (path / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": 0}, "weight_map": wm}))
    return cfg, w


# ----------------------------------------------------------------------------------------------
# independent float64 NumPy implementation of the architecture
def _rms(x, g, eps):
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * g


def _rope(x, pos, theta):
    """Rotary embedding on rotate-half pairs (i, i + hd/2); x (T, heads, hd), pos (T,)."""
    hd = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = pos[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
    return x * cos + rot * sin


def reference_logits(cfg, w, tokens, prompt_len, pad=PP):
    """Logits (T, V) of one sequence left-padded with ``pad`` (entries equal to ``pad`` in the
    first ``prompt_len`` are padding; every other entry is a token), float64 NumPy."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    t = len(tokens)
    d, h, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps = cfg.get("head_dim") or d // h, cfg["rms_norm_eps"]
    idx = np.arange(t)
    valid = (np.asarray(tokens) != pad) | (idx >= prompt_len)
    pos = np.maximum(np.cumsum(valid) - 1, 0).astype(np.float64)
    allowed = (idx[None, :] <= idx[:, None]) & (valid[None, :] | np.eye(t, dtype=bool))
    x = w["model.embed_tokens.weight"][np.where(valid, np.asarray(tokens), 0)]
    for i in range(cfg["num_hidden_layers"]):
        a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        hh = _rms(x, w[f"model.layers.{i}.input_layernorm.weight"], eps)
        proj = lambda n: hh @ w[a + n + ".weight"].T + w.get(a + n + ".bias", 0.0)
        q = _rope(proj("q_proj").reshape(t, h, hd), pos, cfg["rope_theta"])
        k = _rope(proj("k_proj").reshape(t, kv, hd), pos, cfg["rope_theta"])
        v = proj("v_proj").reshape(t, kv, hd)
        out = np.zeros((t, h, hd))
        for j in range(h):
            g = j // (h // kv)  # grouped-query attention: query head j reads key/value head g
            s = q[:, j] @ k[:, g].T / np.sqrt(hd)
            s = np.where(allowed, s, -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            out[:, j] = (p / p.sum(-1, keepdims=True)) @ v[:, g]
        x = x + out.reshape(t, h * hd) @ w[a + "o_proj.weight"].T
        hh = _rms(x, w[f"model.layers.{i}.post_attention_layernorm.weight"], eps)
        gate = hh @ w[m + "gate_proj.weight"].T
        x = x + ((gate / (1 + np.exp(-gate))) * (hh @ w[m + "up_proj.weight"].T)) \
            @ w[m + "down_proj.weight"].T
    x = _rms(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def reference_log_prob(cfg, w, prompt, response, eos=(EOS, EOS2), temperature=1.0):
    """log pi(y|x) in float64 up to and including the first EOS."""
    tok = np.concatenate([prompt, response])
    p = len(prompt)
    lg = reference_logits(cfg, w, tok, p)[p - 1:-1] / temperature
    lg = lg - lg.max(-1, keepdims=True)
    lp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    total = 0.0
    for t, y in enumerate(response):
        total += lp[t, y]
        if y in eos:
            break
    return total
