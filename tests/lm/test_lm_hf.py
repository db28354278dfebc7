"""Hugging Face checkpoints (Qwen2 / Llama layout) as the package's policy
(grpo_theory.lm.checkpoints.hf).

A tiny random checkpoint is written in the Hugging Face layout (config.json, two safetensors
shards with model.safetensors.index.json, generation_config.json, a WordLevel tokenizer.json) and
loaded (``support.hf_checkpoint``); the logits are compared with that module's independent
float64 NumPy implementation of the architecture (RMSNorm, rotary embeddings on rotate-half
pairs, grouped-query attention with q/k/v biases, SwiGLU, tied or untied head, left padding by
attention mask and position ids as Hugging Face generates). Prompts are left-padded with
``hf.PROMPT_PAD`` (-1), never with a token id.
"""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("tunix")
pytest.importorskip("safetensors")
tokenizers = pytest.importorskip("tokenizers")

from grpo_theory import lm  # noqa: E402
from grpo_theory.lm import policy as lmpolicy  # noqa: E402
from grpo_theory.lm.checkpoints import hf  # noqa: E402

from support.hf_checkpoint import (EOS, EOS2, PAD, hf_weights, reference_log_prob,  # noqa: E402
                                   reference_logits, word_tokenizer, write_checkpoint)

PP = hf.PROMPT_PAD  # the prompts' left-padding marker (not a token id)
R = 10  # response length of every sampling test (one compilation per function)


# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen2_tiny")
    cfg, w = write_checkpoint(path, "qwen2", tied=False, bias=True, theta=100.0)
    return lm.from_pretrained(path), cfg, w, path


@pytest.fixture(scope="module")
def prompts(qwen):
    pol = qwen[0]
    return pol.encode(["a b c d", "e f", "g", "h i j k l m", "n o p", "q r", "s t u", "v"])


def test_loads_as_lm_policy(qwen):
    pol, cfg, w, path = qwen
    assert isinstance(pol, lmpolicy.LMPolicy) and isinstance(pol, hf.HFPolicy)
    assert isinstance(pol.tokenizer, tokenizers.Tokenizer)
    assert pol.eos_ids == (EOS, EOS2) and pol.pad_id == PAD and pol.vocab_size == 48
    assert pol.dim == sum(a.size for a in w.values())  # every HF tensor, nothing else
    x = pol.encode(["a b c", "d"])
    np.testing.assert_array_equal(x, [[4, 5, 6], [PP, PP, 7]])
    np.testing.assert_array_equal(pol.prompt_lengths(x), [3, 1])
    # the checkpoint's pad and EOS ids inside a text are tokens like any other
    x = pol.encode(["<|endoftext|> a <|im_end|>", "b"])
    np.testing.assert_array_equal(x, [[PAD, 4, EOS], [PP, PP, 5]])
    np.testing.assert_array_equal(pol.prompt_lengths(x), [3, 1])
    assert pol.decode(np.array([[4, 5, EOS, 6]])) == ["a b <|im_end|>"]


def test_logits_equal_numpy_reference_qwen2(qwen, prompts):
    """Untied head, q/k/v biases, GQA (4 query heads on 2 key/value heads), left padding."""
    pol, cfg, w, _ = qwen
    rng = np.random.default_rng(1)
    y = rng.integers(4, 40, size=(prompts.shape[0], 5))
    tok = np.concatenate([prompts, y], 1)
    p = prompts.shape[1]
    got = np.asarray(jax.jit(pol.apply_fn, static_argnums=2)(pol.params, tok, p), np.float64)
    for n in range(tok.shape[0]):
        want = reference_logits(cfg, w, tok[n], p)
        real = slice(int(np.sum(prompts[n] == PP)), None)  # compare real (non-pad) positions
        np.testing.assert_allclose(got[n, real], want[real], rtol=1e-4, atol=1e-4)


def test_llama_layout_tied_no_bias(tmp_path):
    """A Llama checkpoint (no q/k/v biases, tied head, one file, its own rope_theta, and
    head_dim 8 set in config.json: 4 x 8 query features on a width of 16)."""
    cfg, w = write_checkpoint(tmp_path / "llama", "llama", tied=True, bias=False,
                              theta=50.0, seed=3, shards=1, head_dim=8)
    pol = lm.from_pretrained(tmp_path / "llama")
    assert pol.dim == sum(a.size for a in w.values())  # no zero biases among the parameters
    assert not any("bias" in str(p) for p in jax.tree_util.tree_flatten_with_path(
        pol.params)[0])
    x = pol.encode(["a b c", "d e f g h"])
    y = np.random.default_rng(2).integers(4, 40, size=(2, 4))
    tok = np.concatenate([x, y], 1)
    got = np.asarray(jax.jit(pol.apply_fn, static_argnums=2)(pol.params, tok, x.shape[1]),
                     np.float64)
    for n in range(2):
        real = slice(int(np.sum(x[n] == PP)), None)
        np.testing.assert_allclose(got[n, real], reference_logits(cfg, w, tok[n], x.shape[1])
                                   [real], rtol=1e-4, atol=1e-4)
    # the rotary base is read from config.json: a different theta gives different logits
    cfg2 = dict(cfg, rope_theta=1e6)
    assert np.max(np.abs(reference_logits(cfg2, w, tok[1], x.shape[1])[-4:]
                         - got[1, -4:])) > 1e-2


def test_sampler_log_prob_equals_teacher_forced(qwen, prompts):
    """At temperature 2 (a flatter law, so that some responses end early)."""
    pol, cfg, w, _ = qwen
    pol = dataclasses.replace(pol, temperature=2.0)
    y, lp = pol.sample_with_log_probs(jax.random.PRNGKey(0), prompts, R)
    y, lp = np.asarray(y), np.asarray(lp, np.float64)
    tf = np.asarray(pol.log_probs(prompts, y), np.float64)
    np.testing.assert_allclose(lp, tf, rtol=1e-5, atol=1e-5)
    ref = [reference_log_prob(cfg, w, prompts[n], y[n], temperature=2.0) for n in range(len(y))]
    np.testing.assert_allclose(tf, ref, rtol=1e-4, atol=1e-4)
    # some responses end early (either EOS id) and hold PAD after their EOS
    ended = [(n, int(np.argmax(np.isin(y[n], (EOS, EOS2))))) for n in range(len(y))
             if np.isin(y[n, :-1], (EOS, EOS2)).any()]
    assert ended, "no response ended before the last token: choose another seed"
    for n, j in ended:
        assert np.all(y[n, j + 1:] == PAD)
    assert np.array_equal(np.asarray(pol.sample(jax.random.PRNGKey(0), prompts, R)), y)


def test_kv_cache_equals_full_recomputation(qwen, prompts):
    pol = qwen[0]
    y = np.random.default_rng(4).integers(4, 48, size=(prompts.shape[0], R))
    p = prompts.shape[1]
    full = np.asarray(jax.jit(pol.apply_fn, static_argnums=2)(
        pol.params, np.concatenate([prompts, y], 1), p))
    cached = np.asarray(pol.cached_logits(prompts, y))
    np.testing.assert_allclose(cached, full[:, p - 1:-1], rtol=1e-5, atol=1e-5)
    # and the cached sampler draws the tokens of the full-recompute sampler (same key)
    key = jax.random.PRNGKey(7)
    fast = np.asarray(pol.sample(key, prompts, R))
    slow = np.asarray(lmpolicy.generic_sample(pol.apply_fn, pol.params, key,
                                              jnp.asarray(prompts), R, 1.0, pol.eos_ids,
                                              pol.pad_id))
    np.testing.assert_array_equal(fast, slow)


def test_tokens_after_eos_do_not_count(qwen, prompts):
    pol, cfg, w, _ = qwen
    x = prompts
    rng = np.random.default_rng(5)
    y = rng.integers(4, 40, size=(x.shape[0], R))
    y[0, 2], y[1, 5], y[2, 0] = EOS, EOS2, EOS  # rows 3..: no EOS at all
    junk = y.copy()
    for n, j in ((0, 2), (1, 5), (2, 0)):
        junk[n, j + 1:] = rng.integers(4, 48, size=R - 1 - j)
    a, b = np.asarray(pol.log_probs(x, y)), np.asarray(pol.log_probs(x, junk))
    np.testing.assert_array_equal(a[:3], b[:3])
    np.testing.assert_allclose(a[0], np.asarray(pol.log_probs(x, y[:, :3]))[0], rtol=1e-6)
    np.testing.assert_allclose(a, [reference_log_prob(cfg, w, x[n], y[n]) for n in range(len(x))],
                               rtol=1e-4, atol=1e-4)
    # a token before the EOS does count
    c = y.copy()
    c[1, 4] = (c[1, 4] + 1 - 4) % 36 + 4
    assert abs(float(np.asarray(pol.log_probs(x, c))[1]) - float(a[1])) > 1e-4
    # left padding the prompt further changes nothing
    xp = np.concatenate([np.full((x.shape[0], 3), PP), x], 1)
    np.testing.assert_allclose(np.asarray(pol.log_probs(xp, y)), a, rtol=1e-5, atol=1e-5)


def test_per_sample_scores_by_grad(qwen, prompts):
    """The per-sample scores s_n = grad log pi(y_n|x_n) that score_contractions contracts equal
    central differences of the log-probabilities along a random direction v (all rows)."""
    from jax.flatten_util import ravel_pytree
    pol = qwen[0]
    n = prompts.shape[0]
    rng = np.random.default_rng(6)
    y = rng.integers(4, 48, size=(n, R))
    y[0, 3], y[1, 6] = EOS, EOS2  # scores stop at the EOS
    w = rng.standard_normal(n)
    acc, sq = pol.score_contractions(prompts, y, np.vstack([np.eye(n), w]), chunk=4)
    s = acc[:n]  # W = I: the scores themselves, (N, D)
    np.testing.assert_allclose(acc[n], w @ s, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sq, np.sum(s * s, 1), rtol=1e-5)
    flat, unravel = ravel_pytree(pol.params)
    v = rng.standard_normal(flat.shape[0]).astype(np.float32)
    v /= np.linalg.norm(v)
    eps = 1e-2
    lp = lambda th: np.asarray(pol.with_params(unravel(th)).log_probs(prompts, y), np.float64)
    fd = (lp(flat + eps * v) - lp(flat - eps * v)) / (2 * eps)
    np.testing.assert_allclose(fd, s @ v, rtol=2e-2, atol=5e-3)
    assert np.max(np.abs(s @ v)) > 0.05  # a non-trivial direction


def test_bfloat16_option(qwen, prompts):
    pol32, _, _, path = qwen
    pol = lm.from_pretrained(path, dtype="bfloat16")
    assert all(a.dtype == jnp.bfloat16 for a in jax.tree_util.tree_leaves(pol.params))
    y = np.asarray(pol32.sample(jax.random.PRNGKey(1), prompts, R))
    np.testing.assert_allclose(np.asarray(pol.log_probs(prompts, y)),
                               np.asarray(pol32.log_probs(prompts, y)), rtol=0.05, atol=0.3)


def test_errors_name_what_is_missing(qwen, tmp_path):
    _, _, _, good = qwen
    with pytest.raises(ValueError, match="is not a directory.*nothing is downloaded"):
        lm.from_pretrained(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="has no config.json"):
        lm.from_pretrained(tmp_path / "empty")

    def variant(name, drop=(), tied=False, **cfg_changes):
        d = tmp_path / name
        write_checkpoint(d, tied=tied)
        c = json.loads((d / "config.json").read_text())
        c.update(cfg_changes)
        for k in drop:
            del c[k]
        (d / "config.json").write_text(json.dumps(c))
        return d

    with pytest.raises(ValueError, match="model_type 'qwen3'; supported: qwen2, llama"):
        lm.from_pretrained(variant("qwen3", model_type="qwen3"))
    with pytest.raises(ValueError, match="rope_scaling"):
        lm.from_pretrained(variant("yarn", rope_scaling={"type": "yarn", "factor": 4.0}))
    # transformers >= 5 writes the rotary settings under rope_parameters
    d = variant("ropeparams", drop=("rope_theta", "rope_scaling"),
                rope_parameters={"rope_type": "default", "rope_theta": 123.0})
    assert lm.read_config(d)["rope_theta"] == 123.0
    with pytest.raises(ValueError, match="rope_scaling"):
        lm.read_config(variant("ropeyarn", rope_parameters={"rope_type": "yarn",
                                                            "rope_theta": 1e6}))
    with pytest.raises(ValueError, match="use_sliding_window"):
        lm.from_pretrained(variant("swa", use_sliding_window=True))
    with pytest.raises(ValueError, match="lacks num_hidden_layers"):
        lm.from_pretrained(variant("nolayers", drop=("num_hidden_layers",)))
    d = variant("notok")
    (d / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="has no tokenizer.json"):
        lm.from_pretrained(d)
    d = variant("noshard")
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ValueError, match="lacks shard.*model-00002-of-00002.safetensors"):
        lm.from_pretrained(d)
    d = variant("noweights")
    for f in d.glob("model*"):
        f.unlink()
    with pytest.raises(ValueError, match="no model.safetensors"):
        lm.from_pretrained(d)
    # a tied checkpoint (no lm_head.weight) whose config.json says untied
    with pytest.raises(ValueError, match="lacks tensor.*lm_head.weight"):
        lm.from_pretrained(variant("untied", tied=True, tie_word_embeddings=False))
    with pytest.raises(ValueError, match="mlp.*_proj.weight .* has shape .* expected"):
        lm.from_pretrained(variant("wide", intermediate_size=32))
    with pytest.raises(ValueError, match="dtype must be one of"):
        lm.from_pretrained(good, dtype="int8")
    with pytest.raises(ValueError, match="pad_id"):
        lm.from_pretrained(good, pad_id=48)
    with pytest.raises(ValueError, match="eos"):
        lm.from_pretrained(good, eos_ids=[])
    pol = qwen[0]
    with pytest.raises(ValueError, match="eos_ids must be a token id or a non-empty"):
        lmpolicy.LMPolicy(pol.params, pol.apply_fn, eos_ids=[])
    with pytest.raises(ValueError, match="pad_id must be an integer >= 0"):
        lmpolicy.LMPolicy(pol.params, pol.apply_fn, pad_id=-1)
    # the padding marker only on the left, at least one token per row, ids in range
    y = np.full((2, 3), 5)
    with pytest.raises(ValueError, match="padding marker -1 only as left padding.*row"):
        pol.log_probs(np.array([[4, PP, 5], [4, 5, 6]]), y)
    with pytest.raises(ValueError, match="at least one token per row.*\\[1\\]"):
        pol.sample(0, np.array([[4, 5], [PP, PP]]), 3)
    with pytest.raises(ValueError, match="token ids in \\[0, 48\\)"):
        pol.score_contractions(np.array([[PP, 48], [4, 5]]), y, np.ones(2))
    with pytest.raises(ValueError, match="encode to no token"):
        pol.encode(["a", ""])


@pytest.mark.slow
def test_qwen2p5_0p5b_shapes(tmp_path):
    """Qwen2.5-0.5B's shapes (width 896, 14 query heads of 64 on 2 key/value heads, MLP 4864,
    vocabulary 151936, tied head, rope_theta 1e6) with 2 of its 24 layers and random bfloat16
    weights, as the real checkpoint stores them: logits equal the float64 reference and the
    sampler's log-probabilities equal teacher forcing (about 3 min on 2 busy cores)."""
    import ml_dtypes
    from safetensors.numpy import save_file
    cfg = dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=2,
               num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
               max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1e6,
               tie_word_embeddings=True, hidden_act="silu", eos_token_id=151645,
               rope_scaling=None, use_sliding_window=False)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [151645, 151643], "pad_token_id": 151643}))
    word_tokenizer().save(str(tmp_path / "tokenizer.json"))
    w = {k: (v * (0.05 if v.ndim == 2 else 1)).astype(ml_dtypes.bfloat16)
         for k, v in hf_weights(cfg, True, 0).items()}
    save_file(w, str(tmp_path / "model.safetensors"))
    pol = lm.from_pretrained(tmp_path)
    assert pol.eos_ids == (151645, 151643) and pol.pad_id == 151643
    x = np.random.default_rng(0).integers(4, 40, size=(4, 16))
    x[1, :5] = PP  # left padding
    y, lp = pol.sample_with_log_probs(jax.random.PRNGKey(0), x, 16)
    y = np.asarray(y)
    np.testing.assert_allclose(np.asarray(pol.log_probs(x, y)), np.asarray(lp), rtol=1e-5,
                               atol=1e-4)
    tok = np.concatenate([x[1], y[1, :8]])
    ref = reference_logits(cfg, {k: np.asarray(v, np.float32) for k, v in w.items()}, tok, 16)
    got = np.asarray(jax.jit(pol.apply_fn, static_argnums=2)(pol.params, tok[None], 16)[0],
                     np.float64)
    np.testing.assert_allclose(got[5:], ref[5:], rtol=1e-4, atol=1e-4)
