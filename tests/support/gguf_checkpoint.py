"""Tiny GGUF files and their Hugging Face twins (Llama / Qwen2, byte-level BPE, ChatML).

``config`` is a tiny config.json (width 32, multiples of 32 so that Q8_0 / Q4_1 blocks fit);
``write_folder`` writes a Hugging Face folder (safetensors, a byte-level BPE tokenizer.json as
SmolLM2's or Qwen2's, a ChatML chat template); ``write_gguf`` writes the same checkpoint as a
GGUF v3 file with ``gguf.GGUFWriter`` the way llama.cpp's converter writes it (Llama q/k rows
permuted by the converter's formula, tensor names, metadata keys, tokens / merges / token types).
The weights come from :func:`support.hf_checkpoint.hf_weights`.
"""

import json

import gguf
import numpy as np
import tokenizers

__all__ = ["SPECIAL", "BOS", "EOS", "MERGES", "CHATML", "QWEN2_RE", "G", "GGUF_NAMES",
           "vocabulary", "hf_tokenizer", "config", "write_folder", "converter_permute",
           "gguf_name", "write_gguf"]

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
BOS, EOS = 1, 2  # SmolLM2's ids: pad = eos = <|im_end|>
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("1", "2"), ("Ġ", "a"), ("i", "s")]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt "
          "%}{{ '<|im_start|>assistant\\n' }}{% endif %}")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
            r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
G = gguf.GGMLQuantizationType


def vocabulary():
    """The vocabulary in id order: special tokens, the 256 byte-level characters, merges."""
    alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    return SPECIAL + alphabet + [a + b for a, b in MERGES]


def hf_tokenizer(pre):
    """The Hugging Face side: a BPE tokenizer.json as SmolLM2 (digits one by one, then the
    GPT-2 byte-level split) or Qwen2 (its split regex, then byte-level without regex)."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers as pt
    tok = tokenizers.Tokenizer(models.BPE({t: i for i, t in enumerate(vocabulary())},
                                          list(MERGES)))
    if pre == "smollm":
        tok.pre_tokenizer = pt.Sequence([pt.Digits(individual_digits=True),
                                         pt.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        tok.pre_tokenizer = pt.Sequence([
            pt.Split(tokenizers.Regex(QWEN2_RE), behavior="isolated", invert=False),
            pt.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    return tok


def config(model_type, tied, theta=100.0):
    """A tiny config.json: width 32, 4 query heads of 8 on 2 key/value heads, MLP 64."""
    c = dict(model_type=model_type, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, vocab_size=len(vocabulary()),
             max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=theta,
             tie_word_embeddings=tied, hidden_act="silu", eos_token_id=EOS,
             bos_token_id=BOS, pad_token_id=EOS, rope_scaling=None)
    if model_type == "llama":
        c.update(attention_bias=False, mlp_bias=False)
    return c


def write_folder(path, cfg, w, pre):
    from safetensors.numpy import save_file
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    hf_tokenizer(pre).save(str(path / "tokenizer.json"))
    save_file(w, str(path / "model.safetensors"))
    return path


def converter_permute(w, n_head):
    """llama.cpp convert_hf_to_gguf.py's LlamaModel.permute (q: query heads, k: kv heads)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


GGUF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
              "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
              "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def gguf_name(name):
    top = {"model.embed_tokens.weight": "token_embd.weight",
           "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    if name in top:
        return top[name]
    _, _, i, rest = name.split(".", 3)
    mod, kind = rest.rsplit(".", 1)
    return f"blk.{i}.{GGUF_NAMES[mod]}.{kind}"


def write_gguf(file, cfg, w, pre, qtypes=None, drop=(), meta=None, tensors=None):
    """A GGUF v3 file of the checkpoint, as llama.cpp's converter writes it.

    ``qtypes``: GGUF name -> quantisation type (default F32); ``drop``: metadata keys left out;
    ``meta``: key -> (value, GGUFValueType) written over; ``tensors``: GGUF name -> raw array
    written instead (None: left out)."""
    a = cfg["model_type"]
    wr = gguf.GGUFWriter(str(file), a)
    V = gguf.GGUFValueType
    h, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    kvs = {f"{a}.block_count": (cfg["num_hidden_layers"], V.UINT32),
           f"{a}.context_length": (cfg["max_position_embeddings"], V.UINT32),
           f"{a}.embedding_length": (cfg["hidden_size"], V.UINT32),
           f"{a}.feed_forward_length": (cfg["intermediate_size"], V.UINT32),
           f"{a}.attention.head_count": (h, V.UINT32),
           f"{a}.attention.head_count_kv": (kv, V.UINT32),
           f"{a}.rope.freq_base": (cfg["rope_theta"], V.FLOAT32),
           f"{a}.attention.layer_norm_rms_epsilon": (cfg["rms_norm_eps"], V.FLOAT32),
           f"{a}.vocab_size": (cfg["vocab_size"], V.UINT32),
           f"{a}.rope.dimension_count": (cfg["hidden_size"] // h, V.UINT32),
           "tokenizer.ggml.model": ("gpt2", V.STRING), "tokenizer.ggml.pre": (pre, V.STRING),
           "tokenizer.ggml.tokens": (vocabulary(), V.ARRAY),
           "tokenizer.ggml.token_type": ([3] * len(SPECIAL) + [1] * (len(vocabulary())
                                                                   - len(SPECIAL)), V.ARRAY),
           "tokenizer.ggml.merges": ([f"{x} {y}" for x, y in MERGES], V.ARRAY),
           "tokenizer.ggml.bos_token_id": (BOS, V.UINT32),
           "tokenizer.ggml.eos_token_id": (EOS, V.UINT32),
           "tokenizer.ggml.padding_token_id": (EOS, V.UINT32),
           "tokenizer.ggml.add_bos_token": (False, V.BOOL),
           "tokenizer.chat_template": (CHATML, V.STRING)}
    kvs.update(meta or {})
    for k, (val, t) in kvs.items():
        if k in drop:
            continue
        if t == V.ARRAY:
            wr.add_array(k, val)
        else:
            wr.add_key_value(k, val, t)
    tensors = dict(tensors or {})
    for name in sorted(w):
        g = gguf_name(name)
        if g in tensors:
            if tensors[g] is not None:
                wr.add_tensor(g, tensors.pop(g))
            continue
        arr = w[name]
        if a == "llama" and g.endswith(("attn_q.weight", "attn_k.weight")):
            arr = converter_permute(arr, h if "attn_q" in g else kv)
        q = (qtypes or {}).get(g, G.F32)
        if q == G.F32:
            wr.add_tensor(g, np.ascontiguousarray(arr, np.float32))
        else:
            wr.add_tensor(g, gguf.quants.quantize(arr, q), raw_dtype=q)
    for g, arr in tensors.items():  # extra tensors
        if arr is not None:
            wr.add_tensor(g, arr)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return file
