"""Damaged files and extreme values at the public entry points.

A corpus of damaged checkpoints written here (tiny Hugging Face checkpoints from
``support.hf_checkpoint.write_checkpoint``, then one defect each: config.json, the safetensors
index, the shards, tokenizer.json), and hypothesis strategies over the checkpoint reader, the
advisor and the core API: every input gives a correct result or a ``ValueError`` whose message
comes from the package (it names the file, field or argument), never a raw library error, NaN or
a read outside the checkpoint directory.
"""

import json
import os
import re
import shutil

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_theory import SoftmaxBandit, lm
from grpo_theory.advisor.estimate import estimate_from_rollouts
from grpo_theory.core.estimators import prompt_baseline
from grpo_theory.core.scaling import optimal_group_size
from grpo_theory.lm.checkpoints import files as ck_files
from grpo_theory.lm.checkpoints import hf
from support.hf_checkpoint import write_checkpoint

SHARD1, SHARD2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
CONFIG_KEYS = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "vocab_size", "head_dim",
               "max_position_embeddings", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
               "hidden_act", "eos_token_id", "pad_token_id", "rope_scaling",
               "use_sliding_window", "attention_bias", "mlp_bias", "rope_parameters")


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A valid two-shard checkpoint, its config and weights (copied for every defect)."""
    d = tmp_path_factory.mktemp("good") / "ckpt"
    cfg, w = write_checkpoint(d, shards=2)
    return d, cfg, w


def _copy(good, tmp_path, name="ckpt"):
    d = tmp_path / name
    shutil.copytree(good[0], d)
    return d


def _set_config(d, **changes):
    c = json.loads((d / "config.json").read_text())
    c.update(changes)
    (d / "config.json").write_text(json.dumps(c))
    return d


# --- 1. reading outside the checkpoint --------------------------------------------------------

@pytest.mark.parametrize("shard", ["../outside.safetensors", "ABS", "sub/" + SHARD1, "..", ".",
                                   "a\\b.safetensors", "", 5, None, ["x"]])
def test_index_never_names_a_file_outside(good, tmp_path, shard):
    d = _copy(good, tmp_path)
    # a valid shard outside the checkpoint: the old reader loaded it
    shutil.copy(d / SHARD1, tmp_path / "outside.safetensors")
    (d / "sub").mkdir()
    shutil.copy(d / SHARD1, d / "sub" / SHARD1)
    if shard == "ABS":
        shard = str(tmp_path / "outside.safetensors")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    first = sorted(idx["weight_map"])[0]
    idx["weight_map"][first] = shard
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    with pytest.raises(ValueError, match=r"model.safetensors.index.json of .*weight_map\["):
        lm.from_pretrained(d)


def test_symlinked_shards_as_in_the_hf_cache_load(good, tmp_path):
    """snapshots/<rev>/<file> -> ../../blobs/<hash>: links inside the directory stay allowed."""
    d, _, _ = good
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "rev"
    blobs.mkdir()
    snap.mkdir(parents=True)
    for i, f in enumerate(sorted(os.listdir(d))):
        shutil.copy(d / f, blobs / f"h{i}")
        os.symlink(os.path.relpath(blobs / f"h{i}", snap), snap / f)
    a, b = lm.from_pretrained(snap), lm.from_pretrained(d)
    for x, y in zip(jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(b.params)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("index, match", [
    ([], "must hold a JSON object.*got a JSON array"),
    ({"metadata": {}}, "has no weight_map"),
    ({"weight_map": {}}, "has no weight_map"),
    ({"weight_map": ["a"]}, "has no weight_map"),
])
def test_damaged_index(good, tmp_path, index, match):
    d = _copy(good, tmp_path)
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=match):
        lm.from_pretrained(d)


# --- 2./3./4. config.json ---------------------------------------------------------------------

@pytest.mark.parametrize("text, kind", [("[1, 2]", "array"), ('"qwen2"', "string"),
                                        ("null", "null"), ("7", "number"), ("", None),
                                        ('{"model_type": ', None)])
def test_config_not_an_object(good, tmp_path, text, kind):
    d = _copy(good, tmp_path)
    (d / "config.json").write_text(text)
    match = f"config.json must hold a JSON object.*JSON {kind}" if kind else "not valid JSON"
    with pytest.raises(ValueError, match=match):
        lm.from_pretrained(d)


@pytest.mark.parametrize("field, value, match", [
    ("num_attention_heads", 0, "num_attention_heads must be an integer >= 1, got 0"),
    ("num_attention_heads", -4, "num_attention_heads must be an integer >= 1"),
    ("hidden_size", "big", r"hidden_size must be an integer >= 1, got 'big' \(JSON string\)"),
    ("hidden_size", 16.0, "hidden_size must be an integer"),
    ("hidden_size", True, "hidden_size must be an integer"),
    ("hidden_size", 18, "hidden_size 18 is not a multiple of num_attention_heads 4"),
    ("num_hidden_layers", -1, "num_hidden_layers must be an integer >= 1"),
    ("vocab_size", 0, "vocab_size must be an integer >= 1"),
    ("intermediate_size", [24], "intermediate_size must be an integer"),
    ("num_key_value_heads", 3, "not a multiple of num_key_value_heads 3"),
    ("head_dim", 3, "head dimension 3 .* must be even"),
    ("rms_norm_eps", -1e-6, "rms_norm_eps must be a finite number > 0"),
    ("rms_norm_eps", 0.0, "rms_norm_eps must be a finite number > 0"),
    ("rms_norm_eps", "1e-6", "rms_norm_eps must be a positive number, got '1e-6'"),
    ("rms_norm_eps", float("nan"), "rms_norm_eps must be a finite number > 0"),
    ("rope_theta", float("inf"), "rope_theta must be a finite number > 0"),
    ("rope_theta", 0, "rope_theta must be a finite number > 0"),
    ("tie_word_embeddings", "false", "tie_word_embeddings must be true or false"),
    ("max_position_embeddings", 0, "max_position_embeddings must be an integer >= 1"),
    ("eos_token_id", 99, r"eos_token_id 99 is outside \[0, vocab_size = 48\)"),
    ("eos_token_id", "eos", "eos_token_id must be a token id"),
    ("pad_token_id", -1, "pad_token_id must be an integer >= 0"),
    ("pad_token_id", 48, "pad_token_id 48 is outside"),
    ("rope_parameters", [1], "rope_parameters must be an object"),
])
def test_config_fields_checked(good, tmp_path, field, value, match):
    d = _set_config(_copy(good, tmp_path), **{field: value})
    with pytest.raises(ValueError, match="config.json of .*" + match):
        lm.from_pretrained(d)


@pytest.mark.parametrize("changes", [dict(hidden_size=32),  # the heads still divide it
                                     dict(num_key_value_heads=4), dict(vocab_size=64),
                                     dict(intermediate_size=40), dict(head_dim=8)])
def test_sizes_disagreeing_with_the_tensors(good, tmp_path, changes):
    d = _set_config(_copy(good, tmp_path), **changes)
    with pytest.raises(ValueError, match=r"tensor \S+\.weight in model-0000.-of-00002"
                                         r".safetensors of checkpoint .* has shape \(.*\), "
                                         r"expected \(.*\) from config.json"):
        lm.from_pretrained(d)


# --- safetensors files and tensor values ------------------------------------------------------

def _truncate(p):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _header_only(p):
    raw = p.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    p.write_bytes(raw[: 8 + n])


@pytest.mark.parametrize("damage", [
    _truncate, _header_only, lambda p: p.write_bytes(b""), lambda p: p.write_bytes(b"\x00" * 7),
    lambda p: p.write_bytes(os.urandom(4096)),
    lambda p: p.write_bytes((10**6).to_bytes(8, "little") + b"{}"),
    lambda p: p.write_bytes((2).to_bytes(8, "little") + b"[]"),
], ids=["truncated", "header_only", "empty", "short", "garbage", "header_length", "not_dict"])
def test_damaged_shard(good, tmp_path, damage):
    d = _copy(good, tmp_path)
    damage(d / SHARD2)
    with pytest.raises(ValueError, match=f"{SHARD2} of checkpoint .* is not a readable "
                                         f"safetensors file"):
        lm.from_pretrained(d)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weight_refused_naming_the_tensor(good, tmp_path, bad):
    from safetensors.numpy import load_file, save_file
    d = _copy(good, tmp_path)
    w = load_file(str(d / SHARD1))
    name = sorted(w)[-1]
    w[name] = w[name].copy()
    w[name].flat[3] = bad
    save_file(w, str(d / SHARD1))
    with pytest.raises(ValueError, match=rf"tensor {name} in {SHARD1} of checkpoint .* has 1 "
                                         rf"non-finite entry \(NaN or inf\)"):
        lm.from_pretrained(d)


def test_check_finite_bfloat16_and_integers():
    import ml_dtypes
    ck_files.check_finite("w", np.ones(4, ml_dtypes.bfloat16), "f")
    ck_files.check_finite("i", np.arange(4), "f")
    with pytest.raises(ValueError, match="tensor w in f has 2 non-finite entries"):
        ck_files.check_finite("w", np.array([1, np.nan, np.inf], ml_dtypes.bfloat16), "f")


# --- tokenizer.json ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", ['{"version": "1.0"}', '{"model": {"type": "WordLevel"}}',
                                  "TRUNCATE", "{not json"])
def test_damaged_tokenizer(good, tmp_path, text):
    d = _copy(good, tmp_path)
    f = d / "tokenizer.json"
    f.write_text(f.read_text()[: len(f.read_text()) // 2] if text == "TRUNCATE" else text)
    with pytest.raises(ValueError, match="tokenizer.json is not a tokenizer the tokenizers "
                                         "library can read"):
        lm.from_pretrained(d)


def test_tokenizer_larger_than_the_vocabulary(good, tmp_path):
    d = _set_config(_copy(good, tmp_path), vocab_size=32)  # the tokenizer has 40 tokens
    with pytest.raises(ValueError, match="tokenizer.json of .* has 40 tokens, more than "
                                         "config.json's vocab_size = 32"):
        lm.from_pretrained(d)


@pytest.mark.parametrize("name", ["generation_config.json", "tokenizer_config.json"])
def test_optional_json_files_must_be_objects(good, tmp_path, name):
    d = _copy(good, tmp_path)
    (d / name).write_text("[]")
    with pytest.raises(ValueError, match=f"{name} must hold a JSON object"):
        lm.from_pretrained(d)


def test_good_checkpoint_loads_and_encode_refuses_non_text(good):
    pol = lm.from_pretrained(good[0])
    assert pol.config["n_layers"] == 2 and pol.config["norm_eps"] == 1e-6
    for bad in (123, None, b"abc", [1, 2], [], {"a": 1}):
        with pytest.raises(ValueError, match="texts must be a string or a non-empty sequence"):
            pol.encode(bad)
    assert pol.encode(("a b",)).shape == (1, 2)


# --- hypothesis: config.json fields and index entries -----------------------------------------

JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 70), st.integers(-2**70, 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5),
    st.lists(st.integers(-2, 50), max_size=3), st.dictionaries(st.text(max_size=3),
                                                               st.integers(), max_size=2))


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(CONFIG_KEYS), JSON_VALUES, min_size=1,
                               max_size=3))
def test_read_config_fuzz(good, tmp_path, changes):
    """Any values of any config fields: a consistent architecture or a ValueError that names
    config.json and a field."""
    d = tmp_path / "fuzz"
    d.mkdir(exist_ok=True)
    c = dict(good[1])
    c.update(changes)
    (d / "config.json").write_text(json.dumps(c))
    try:
        a = ck_files.read_config(d)
    except ValueError as e:
        msg = str(e)
        assert msg.startswith(f"config.json of {str(d)!r}"), msg
        assert any(k in msg for k in CONFIG_KEYS + ("head dimension",)), msg
        return
    for k in ("n_layers", "vocab_size", "d_model", "d_ff", "n_heads", "n_kv_heads", "head_dim"):
        assert isinstance(a[k], int) and a[k] >= 1, (k, a[k])
    assert a["n_heads"] % a["n_kv_heads"] == 0 and a["head_dim"] % 2 == 0
    assert np.isfinite(a["rope_theta"]) and a["rope_theta"] > 0
    assert np.isfinite(a["norm_eps"]) and a["norm_eps"] > 0
    assert isinstance(a["tied"], bool) and isinstance(a["qkv_bias"], bool)
    assert all(0 <= e < a["vocab_size"] for e in a["eos_ids"] or ())
    assert a["pad_id"] is None or 0 <= a["pad_id"] < a["vocab_size"]


SHARD_NAMES = st.one_of(
    st.sampled_from(["a.safetensors", "../a.safetensors", "./a.safetensors", "..", "/etc/passwd",
                     "sub/a.safetensors", "sub", "a.safetensors/", "~/a.safetensors"]),
    st.text(alphabet="a./\\~\0", max_size=8), st.integers(), st.none())


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shards=st.lists(SHARD_NAMES, min_size=1, max_size=3))
def test_index_fuzz(tmp_path, shards):
    """Any shard names: paths to files directly inside the directory, or a ValueError naming
    the index (or the absent shard)."""
    d = tmp_path / "ckpt"
    (d / "sub").mkdir(parents=True, exist_ok=True)
    for f in (d / "a.safetensors", d / "sub" / "a.safetensors", tmp_path / "a.safetensors"):
        f.write_bytes(b"x")
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {f"t{i}": s for i, s in enumerate(shards)}}))
    try:
        files = ck_files.shards(str(d))
    except ValueError as e:
        assert "model.safetensors.index.json" in str(e), str(e)
        return
    assert files == [os.path.join(str(d), "a.safetensors")]


# --- hypothesis: the advisor ------------------------------------------------------------------

def _rollouts(seed, m=4, n=5, dim=3):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2, (m, n)).astype(float) + 0.25 * rng.random((m, n)), \
        rng.standard_normal((m, n, dim))


#: the power of two each per-prompt piece scales by for rewards x 2^i, scores x 2^j
PIECE_SCALE = {"value": lambda i, j: i, "sigma2": lambda i, j: 2 * i,
               "score_sq": lambda i, j: 2 * j}


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 3), i=st.integers(-700, 700), j=st.integers(-700, 700))
def test_advisor_scales_exactly_or_refuses(seed, i, j):
    """Rewards x 2^i, scores x 2^j: every constant x 2^(2i + 2j) exactly (the covariance x
    2^(4i + 4j)), or, exactly when one of those is beyond float64, a ValueError that says so
    (never NaN or inf)."""
    z, s = _rollouts(seed)
    base = estimate_from_rollouts(z, s)
    k = 2 * i + 2 * j
    with np.errstate(all="ignore"):
        theta, cov = np.ldexp(base.theta, k), np.ldexp(base.cov, 2 * k)
    representable = (np.all(np.isfinite(theta)) and np.all(np.isfinite(cov))
                     and not np.any((base.theta != 0)
                                    & (np.abs(theta) < np.finfo(np.float64).tiny)))
    try:
        e = estimate_from_rollouts(np.ldexp(z, i), np.ldexp(s, j))
    except ValueError as err:
        assert re.search("(over|under)flows? float64", str(err)), str(err)
        assert "rescale the rewards or the scores" in str(err)
        assert not representable, (i, j, str(err))
        return
    assert representable, (i, j)
    np.testing.assert_array_equal(e.theta, theta)
    np.testing.assert_array_equal(e.cov, cov)
    assert e.g_star == base.g_star
    for name, v in e.pieces.items():  # inf only where the true value is beyond float64
        with np.errstate(all="ignore"):
            want = np.ldexp(base.pieces[name], PIECE_SCALE.get(name, lambda i, j: k)(i, j))
        assert not np.any(np.isnan(v))
        np.testing.assert_array_equal(v[np.isfinite(want) & (np.abs(want) >= 2.0**-1000)],
                                      want[np.isfinite(want) & (np.abs(want) >= 2.0**-1000)])


@pytest.mark.parametrize("scale_z, scale_s", [(1e200, 1.0), (1.0, 1e160), (1e160, 1e-160),
                                              (1e-160, 1e150), (1e150, 1e-100)])
def test_advisor_large_finite_inputs(scale_z, scale_s):
    """The cases of the issue: NaN before; now a finite estimate (same G*) or a clear refusal."""
    z, s = _rollouts(0)
    base = estimate_from_rollouts(z, s)
    try:
        e = estimate_from_rollouts(z * scale_z, s * scale_s)
    except ValueError as err:
        assert scale_z * scale_s > 1e100 and re.search("overflows? float64", str(err))
        return
    assert np.all(np.isfinite(e.theta)) and np.all(np.isfinite(e.cov))
    f = (scale_z * scale_s) ** 2
    np.testing.assert_allclose(e.theta, base.theta * f, rtol=1e-9,
                               atol=1e-12 * np.abs(base.theta).max() * f)
    assert e.g_star == pytest.approx(base.g_star, rel=1e-9)


def test_advisor_inner_product_inputs_checked():
    z, s = _rollouts(1)
    q = np.sum(s * s, axis=2)
    gh = np.einsum("ai,aid->ad", z, s) / z.shape[1]
    gram = gh @ gh.T
    ref = estimate_from_rollouts(z, s)
    np.testing.assert_allclose(estimate_from_rollouts(z, sq_norms=q, mean_gram=gram).theta,
                               ref.theta, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="mean_sq must be non-negative"):
        estimate_from_rollouts(z, sq_norms=q, mean_sq=-np.diag(gram), mean_dot=gram.sum(1))
    bad = gram.copy()
    bad[0, 0] = -1.0
    with pytest.raises(ValueError, match=r"mean_gram must have a non-negative diagonal.*\[0, 0\]"):
        estimate_from_rollouts(z, sq_norms=q, mean_gram=bad)
    bad = gram.copy()
    bad[1, 2] += 1e-3 * np.abs(gram).max()
    with pytest.raises(ValueError, match=r"mean_gram must be symmetric.*mean_gram\[1, 2\]"):
        estimate_from_rollouts(z, sq_norms=q, mean_gram=bad)
    tiny = gram.copy()
    tiny[1, 2] *= 1 + 1e-12  # rounding-level asymmetry is accepted
    estimate_from_rollouts(z, sq_norms=q, mean_gram=tiny)
    with pytest.raises(ValueError, match="alpha must lie strictly between 0 and 1"):
        estimate_from_rollouts(z, s, alpha=1.5)


@settings(max_examples=60, deadline=None)
@given(mean_sq=st.lists(st.floats(-1e300, 1e300), min_size=4, max_size=4),
       mean_dot=st.lists(st.floats(-1e300, 1e300), min_size=4, max_size=4),
       scale=st.sampled_from([1e-300, 1.0, 1e300]))
def test_advisor_streamed_inputs_fuzz(mean_sq, mean_dot, scale):
    """Any finite mean_sq / mean_dot and squared norms: finite constants or a ValueError naming
    the argument or the overflow."""
    z, s = _rollouts(2)
    q = np.sum(s * s, axis=2) * scale
    try:
        e = estimate_from_rollouts(z, sq_norms=q, mean_sq=mean_sq, mean_dot=mean_dot)
    except ValueError as err:
        assert ("mean_sq must be non-negative" in str(err)
                or re.search("(over|under)flows? float64", str(err))), str(err)
        return
    assert np.all(np.isfinite(e.theta)) and np.all(np.isfinite(e.cov))
    assert not any(np.any(np.isnan(v)) for v in e.pieces.values())


# --- hypothesis: the core API -----------------------------------------------------------------

@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), scale=st.sampled_from([0.0, 1.0, 5.0]))
def test_optimal_group_size_with_deterministic_rewards(seed, scale):
    """Constant 0/1 reward means: c1 and c3 are rounding noise; G* is a number, never a math
    domain error."""
    rng = np.random.default_rng(seed)
    means = np.full((3, 4), float(rng.integers(0, 2)))
    opt = optimal_group_size(SoftmaxBandit(scale * rng.standard_normal((3, 4)), means))
    assert opt.exact >= 2 and opt.continuous >= 1 and opt.paper >= 0


@settings(max_examples=40, deadline=None)
@given(logits=st.one_of(
    st.lists(st.lists(st.booleans(), min_size=2, max_size=2), min_size=1, max_size=2),
    st.lists(st.lists(st.integers(-5, 5), min_size=2, max_size=2), min_size=1, max_size=2),
    st.lists(st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=2), min_size=1, max_size=2)))
def test_softmax_bandit_logits(logits):
    means = np.full((len(logits), 2), 0.5)
    if isinstance(logits[0][0], bool):
        with pytest.raises(ValueError, match="logits must be real numbers, got booleans"):
            SoftmaxBandit(logits, means)
        with pytest.raises(ValueError, match="logits must be real numbers, got booleans"):
            SoftmaxBandit(np.asarray(logits), means)
    else:
        b = SoftmaxBandit(logits, means)
        np.testing.assert_allclose(np.asarray(b.params), np.asarray(logits, float))


@settings(max_examples=40, deadline=None)
@given(name=st.one_of(st.text(max_size=6), st.integers(), st.none(), st.floats(),
                      st.lists(st.text(max_size=2), max_size=2)))
def test_prompt_baseline_name(name):
    if isinstance(name, str) and name:
        assert prompt_baseline([0.0, 1.0], name=name).name == name
    else:
        with pytest.raises(ValueError, match="name must be a non-empty string"):
            prompt_baseline([0.0, 1.0], name=name)
