"""llama.cpp GGUF files as policies (grpo_theory.lm.checkpoints.gguf through lm.from_pretrained).

Tiny random Llama and Qwen2 checkpoints (``support.hf_checkpoint``'s weights, widths multiple of
32 so that Q8_0 / Q4_1 blocks fit) are written twice by ``support.gguf_checkpoint``: as a Hugging
Face folder (safetensors, a byte-level BPE tokenizer.json, a ChatML chat template) and as a GGUF
file with ``gguf.GGUFWriter``, the way llama.cpp's converter writes it (Llama q/k rows permuted
by the converter's formula, written out there; tensor names, metadata keys, tokens / merges /
token types). Both routes must give the same parameters, tokens and logits, equal to
``support.hf_checkpoint``'s float64 NumPy reference. Prompts that contain the pad/EOS id
(``<|im_end|>``, as every ChatML prompt does) must give the log-probs of the reference in which
every prompt token is attended to. Malformed files must raise ValueErrors naming the file and the
field or tensor.
"""

import json
import warnings

import jax
import numpy as np
import pytest

pytest.importorskip("tunix")
gguf = pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")

from grpo_theory import lm  # noqa: E402
from grpo_theory.lm.checkpoints import gguf as lmgguf  # noqa: E402
from grpo_theory.lm.checkpoints import hf  # noqa: E402
from grpo_theory.lm.budget.memory import acc_dtype  # noqa: E402
from grpo_theory.lm.families.qwen2 import permute_qk, unpermute_qk  # noqa: E402

from support.gguf_checkpoint import (CHATML, EOS, G, config, converter_permute,  # noqa: E402
                                     gguf_name, write_folder, write_gguf)
from support.hf_checkpoint import hf_weights, reference_logits  # noqa: E402

TEXTS = ["the 12 cats is 345 a the", "What is 7 + 5?", "  spaces\tand\nlines 1234",
         "<|im_start|>user\nhi<|im_end|>", "é ü ß 漢字"]


def roundtrip(w, qtypes):
    """The weights as the GGUF file stores them after quantisation (HF names)."""
    out = {}
    for k, a in w.items():
        q = qtypes.get(gguf_name(k), G.F32)
        out[k] = a if q == G.F32 else gguf.quants.dequantize(gguf.quants.quantize(a, q), q)
    return out


def quant_types(cfg):
    """As the real SmolLM2 Q4_1 file: embedding Q8_0, 2-D block weights Q4_1, norms F32."""
    q = {"token_embd.weight": G.Q8_0, "output.weight": G.Q8_0}
    for i in range(cfg["num_hidden_layers"]):
        for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
            q[f"blk.{i}.{n}.weight"] = G.Q4_1
    return q


def _leaves(params):
    return {jax.tree_util.keystr(p): np.asarray(v)
            for p, v in jax.tree_util.tree_flatten_with_path(params)[0]}


# ----------------------------------------------------------------------------------------------
def test_qk_permutation_round_trip():
    rng = np.random.default_rng(0)
    for n_head, hd, d in ((4, 8, 32), (3, 64, 16), (9, 64, 8)):
        w = rng.standard_normal((n_head * hd, d)).astype(np.float32)
        p = converter_permute(w, n_head)
        assert not np.array_equal(p, w)
        np.testing.assert_array_equal(permute_qk(w, n_head), p)
        np.testing.assert_array_equal(unpermute_qk(p, n_head), w)
        b = rng.standard_normal(n_head * hd)  # 1-D (a bias) as well
        np.testing.assert_array_equal(unpermute_qk(converter_permute(b, n_head), n_head), b)
    # within a head, rows (i, i + hd/2) of the HF layout become neighbours (2i, 2i + 1)
    w = np.arange(8.0)[:, None]
    np.testing.assert_array_equal(converter_permute(w, 1)[:, 0], [0, 4, 1, 5, 2, 6, 3, 7])


CASES = {"llama-tied-f32": ("llama", True, False, "smollm", False),
         "qwen2-bias-f32": ("qwen2", False, True, "qwen2", False),
         "llama-untied-q8q4": ("llama", False, False, "smollm", True)}


@pytest.mark.parametrize("case", list(CASES))
def test_gguf_route_equals_folder_route(case, tmp_path):
    """Same architecture, special ids, chat template, tokens, parameters (exactly the
    checkpoint's: D = the file's element count) and logits (= the float64 NumPy reference)."""
    mt, tied, bias, pre, quant = CASES[case]
    cfg = config(mt, tied, theta=50.0 if mt == "llama" else 1e4)
    w = hf_weights(dict(cfg, tie_word_embeddings=tied), bias, seed=1)
    qt = quant_types(cfg) if quant else {}
    f = write_gguf(tmp_path / "m.gguf", cfg, w, pre, qtypes=qt)
    stored = roundtrip(w, qt)  # what the file holds, dequantised
    folder = write_folder(tmp_path / "hf", cfg, stored, pre)
    pg, pf = lm.from_pretrained(f), lm.from_pretrained(folder)

    n_file = sum(t.n_elements for t in gguf.GGUFReader(str(f)).tensors)
    assert pg.dim == pf.dim == n_file == sum(a.size for a in w.values())
    assert pg.config["qkv_bias"] == bias and pg.config["tied"] == tied
    for k in ("model_type", "n_layers", "vocab_size", "d_model", "d_ff", "n_heads",
              "n_kv_heads", "head_dim", "rope_theta", "tied", "qkv_bias", "max_length"):
        assert pg.config[k] == pytest.approx(pf.config[k]), k
    assert pg.eos_ids == pf.eos_ids == (EOS,) and pg.pad_id == pf.pad_id == EOS
    assert pg.chat_template == pf.chat_template == CHATML
    a, b = _leaves(pg.params), _leaves(pf.params)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    if quant:  # quantised, yet close to the float32 weights
        err = max(np.max(np.abs(stored[k] - w[k])) / np.max(np.abs(w[k])) for k in w)
        assert 0 < err < 0.2

    for t in TEXTS:
        assert pg.tokenizer.encode(t).ids == pf.tokenizer.encode(t).ids, t
        assert pg.tokenizer.decode(pg.tokenizer.encode(t).ids, skip_special_tokens=False) == t
    assert pg.tokenizer.encode("<|im_end|>").ids == [EOS]
    assert pg.tokenizer.encode("the the").tokens == ["t", "he", "Ġthe"]  # merges applied
    x = pg.encode(pg.chat(["the 12 cats", "is 7 + 5 the"]))
    np.testing.assert_array_equal(x, pf.encode(pf.chat(["the 12 cats", "is 7 + 5 the"])))
    y = np.random.default_rng(2).integers(3, cfg["vocab_size"], size=(2, 4))
    tok = np.concatenate([x, y], 1)
    p = x.shape[1]
    lg = np.asarray(jax.jit(pg.apply_fn, static_argnums=2)(pg.params, tok, p), np.float64)
    lf = np.asarray(jax.jit(pf.apply_fn, static_argnums=2)(pf.params, tok, p), np.float64)
    for n in range(2):
        real = slice(int(np.sum(x[n] == hf.PROMPT_PAD)), None)
        np.testing.assert_allclose(lg[n, real], lf[n, real], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(lg[n, real], reference_logits(cfg, stored, tok[n], p)[real],
                                   rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    """A tiny SmolLM2-like GGUF file (Llama, tied, pad = eos = <|im_end|>)."""
    path = tmp_path_factory.mktemp("smol")
    cfg = config("llama", True, theta=1e5)
    w = hf_weights(dict(cfg), False, seed=4)
    return lm.from_pretrained(write_gguf(path / "smol.gguf", cfg, w, "smollm")), cfg, w


def reference_log_prob(cfg, w, prompt, response, masked=()):
    """float64 log pi(y|x) of an unpadded prompt (every prompt token attended to unless its
    position is in ``masked``: the old, wrong treatment of pad-valued tokens), up to the first
    EOS."""
    tok = np.concatenate([prompt, response])
    p = len(prompt)
    tok[np.asarray(masked, int)] = -7  # reference_logits: entries equal to pad are padding
    lg = reference_logits(cfg, w, tok, p, pad=-7)[p - 1:-1]
    lp = lg - lg.max(-1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
    total = 0.0
    for t, yt in enumerate(response):
        total += lp[t, yt]
        if yt == EOS:
            break
    return total


def test_prompts_containing_pad_and_eos_ids(smol):
    """ChatML prompts hold <|im_end|> (= pad = eos id 2) inside them: every such token is
    attended to, so the log-probs equal the float64 reference over the unpadded prompts and
    the single-prompt computations; treating those tokens as padding (the old behaviour) would
    be visibly different."""
    pol, cfg, w = smol
    assert pol.pad_id == EOS and pol.eos_ids == (EOS,)
    x = pol.encode(pol.chat(["the 12", "is 7 + 5 the cat"], system="a"))
    lens = pol.prompt_lengths(x)
    assert lens[0] < lens[1] and np.all(np.sum(x == EOS, 1) == 2)  # two <|im_end|> each
    y = np.random.default_rng(3).integers(3, cfg["vocab_size"], size=(2, 6))
    y[1, 4] = EOS
    lp = np.asarray(pol.log_probs(x, y), np.float64)
    ref = [reference_log_prob(cfg, w, x[n, x.shape[1] - lens[n]:], y[n]) for n in range(2)]
    np.testing.assert_allclose(lp, ref, rtol=1e-4, atol=1e-4)
    alone = np.asarray(pol.log_probs(x[:1, x.shape[1] - lens[0]:], y[:1]), np.float64)
    np.testing.assert_allclose(alone, lp[:1], rtol=1e-5, atol=1e-5)
    old = [reference_log_prob(cfg, w, x[n, x.shape[1] - lens[n]:], y[n],
                              masked=np.flatnonzero(x[n, x.shape[1] - lens[n]:] == EOS))
           for n in range(2)]
    assert np.min(np.abs(np.asarray(old) - ref)) > 1e-3
    # the sampler's own log-probs and the per-sample scores see the same prompt
    ys, lps = pol.sample_with_log_probs(0, x, 6)
    np.testing.assert_allclose(np.asarray(lps), np.asarray(pol.log_probs(x, ys)), rtol=1e-5,
                               atol=1e-5)
    acc, sq = pol.score_contractions(x, y, np.eye(2), chunk=2)
    assert acc.shape == (2, pol.dim) and acc.dtype == np.float64
    np.testing.assert_allclose(sq, np.sum(acc * acc, 1), rtol=1e-5)


def test_score_accumulators_without_x64(smol):
    """With JAX's 64-bit mode off the accumulation is float32 and nothing warns about a
    truncated float64 request; the results come back as float64 NumPy arrays."""
    pol = smol[0]
    x = pol.encode(["the 12", "is"])
    y = np.full((2, 3), 5)
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("error")
        assert acc_dtype() == np.float32
        acc, sq = pol.score_contractions(x, y, np.ones((1, 2)), chunk=2)
    assert acc.dtype == sq.dtype == np.float64 and np.all(np.isfinite(acc))
    assert acc_dtype() == np.float64  # the test process runs with x64 on


# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def good(tmp_path_factory):
    cfg = config("llama", True)
    return cfg, hf_weights(dict(cfg), False, seed=5), tmp_path_factory.mktemp("bad")


def _bad(good, name, **kw):
    cfg, w, path = good
    return write_gguf(path / f"{name}.gguf", cfg, w, "smollm", **kw)


def test_malformed_files_raise_value_errors_naming_file_and_field(good):
    cfg, w, path = good
    V = gguf.GGUFValueType
    read = lmgguf.read_gguf

    def refused(f, *what):
        with pytest.raises(ValueError) as e:
            read(f)
        msg = str(e.value)
        assert str(f) in msg, msg
        for s in what:
            assert s in msg, msg

    (path / "junk.gguf").write_bytes(b"not a gguf file at all" * 10)
    refused(path / "junk.gguf", "header")
    ok = _bad(good, "ok").read_bytes()
    (path / "trunc.gguf").write_bytes(ok[:200])
    refused(path / "trunc.gguf")
    with pytest.raises(ValueError, match="absent.gguf.*does not exist"):
        read(path / "absent.gguf")
    refused(_bad(good, "nolayers", drop=("llama.block_count",)), "'llama.block_count'")
    refused(_bad(good, "noeps", drop=("llama.attention.layer_norm_rms_epsilon",)),
            "llama.attention.layer_norm_rms_epsilon")
    refused(_bad(good, "strtype", meta={"llama.embedding_length": ("32", V.STRING)}),
            "llama.embedding_length", "must be int")
    refused(_bad(good, "notoks", drop=("tokenizer.ggml.tokens",)), "tokenizer.ggml.tokens")
    refused(_bad(good, "nomerges", drop=("tokenizer.ggml.merges",)), "tokenizer.ggml.merges")
    refused(_bad(good, "spm", meta={"tokenizer.ggml.model": ("llama", V.STRING)}),
            "tokenizer.ggml.model", "'gpt2'")
    refused(_bad(good, "pre", meta={"tokenizer.ggml.pre": ("exotic", V.STRING)}),
            "tokenizer.ggml.pre", "exotic")
    refused(_bad(good, "vocab", meta={"llama.vocab_size": (7, V.UINT32)}), "llama.vocab_size")
    refused(_bad(good, "eos", meta={"tokenizer.ggml.eos_token_id": (10 ** 6, V.UINT32)}),
            "tokenizer.ggml.eos_token_id")
    refused(_bad(good, "yarn", meta={"llama.rope.scaling.type": ("yarn", V.STRING)}),
            "llama.rope.scaling.type")
    refused(_bad(good, "gqa", meta={"llama.attention.head_count_kv": (3, V.UINT32)}),
            "head_count_kv")
    wr = gguf.GGUFWriter(str(path / "arch.gguf"), "gpt2")
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    refused(path / "arch.gguf", "general.architecture", "'gpt2'")
    # tensors: unsupported type, wrong shape, non-finite, missing, unknown
    emb = w["model.embed_tokens.weight"]
    refused(_bad(good, "f64", tensors={"token_embd.weight": emb.astype(np.float64)}),
            "'token_embd.weight'", "F64")
    refused(_bad(good, "shape", tensors={"blk.1.ffn_up.weight": np.zeros((64, 16), np.float32)}),
            "'blk.1.ffn_up.weight'", "shape (64, 16)", "expected (64, 32)")
    nan = w["model.layers.0.input_layernorm.weight"].copy()
    nan[3] = np.nan
    refused(_bad(good, "nan", tensors={"blk.0.attn_norm.weight": nan}),
            "'blk.0.attn_norm.weight'", "non-finite")
    refused(_bad(good, "missing", tensors={"blk.1.ffn_down.weight": None}),
            "lacks tensor(s) blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight")
    refused(_bad(good, "extra", tensors={"rope_freqs.weight": np.ones(4, np.float32)}),
            "'rope_freqs.weight'")
    # a q bias alone: the k/v biases a biased model needs are missing
    refused(_bad(good, "bias", tensors={"blk.0.attn_q.bias": np.ones(32, np.float32)}),
            "lacks tensor(s) blk.0.attn_k.bias")
    # from_pretrained passes them on
    with pytest.raises(ValueError, match="nan.gguf.*blk.0.attn_norm.weight"):
        lm.from_pretrained(path / "nan.gguf")


def test_cli_advisor_and_drivers_accept_a_gguf_file(good, tmp_path):
    """``--model X.gguf`` (lm-mse & co.), ``advise --model X.gguf`` and the drivers'
    ``model_path`` take a .gguf file; a file with another suffix is still refused."""
    from grpo_theory.lm.checkpoints.load import load_policy
    from grpo_theory.experiments import cli
    from grpo_theory.studies import lm_mse
    f = _bad(good, "cli")
    s = cli._model_setting(cli._experiments(), "lm-mse", "quick", str(f))
    assert s.model == str(f.resolve())
    assert lm_mse.model_path(f) == str(f.resolve())
    pol = load_policy(str(f))
    assert isinstance(pol, hf.HFPolicy) and pol.path == str(f)
    other = tmp_path / "weights.bin"
    other.write_bytes(f.read_bytes())
    with pytest.raises(ValueError, match="neither a directory nor a .gguf file"):
        cli._model_setting(cli._experiments(), "lm-mse", "quick", str(other))
    with pytest.raises(ValueError, match="neither a directory nor a .gguf file"):
        lm_mse.model_path(other)
    with pytest.raises(ValueError, match="gguf"):
        load_policy(str(other))
    with pytest.raises(ValueError, match="junk.gguf.*header"):
        lm_mse.model_path(_junk(tmp_path))


def _junk(path):
    f = path / "junk.gguf"
    f.write_bytes(b"GGUF" + b"\xff" * 40)
    return f
