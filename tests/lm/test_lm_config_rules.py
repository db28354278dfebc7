"""One set of architecture rules for config.json and GGUF metadata (lm.families.spec.check_sizes).

Every bad value of the table is written twice, into a tiny config.json and into the same
checkpoint's GGUF metadata (``support.gguf_checkpoint``), and must be refused from both with the
same message naming the field (for GGUF also the metadata key); the unchanged files load.
"""

import json
import math
import re

import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from grpo_theory.lm.checkpoints import gguf as lmgguf  # noqa: E402
from grpo_theory.lm.checkpoints import files  # noqa: E402
from grpo_theory.lm.families import spec  # noqa: E402

from support.gguf_checkpoint import config, write_gguf  # noqa: E402
from support.hf_checkpoint import hf_weights  # noqa: E402

U, I, F = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.INT32, gguf.GGUFValueType.FLOAT32
POS = "must be a finite number > 0"
INT = "must be an integer >= 1"

# config.json field, GGUF key (after "llama."), value, GGUF type, message
TABLE = [
    ("rope_theta", "rope.freq_base", 0.0, F, POS),
    ("rope_theta", "rope.freq_base", -1e4, F, POS),
    ("rope_theta", "rope.freq_base", math.inf, F, POS),
    ("rope_theta", "rope.freq_base", math.nan, F, POS),
    ("rms_norm_eps", "attention.layer_norm_rms_epsilon", 0.0, F, POS),
    ("rms_norm_eps", "attention.layer_norm_rms_epsilon", -1e-5, F, POS),
    ("rms_norm_eps", "attention.layer_norm_rms_epsilon", math.nan, F, POS),
    ("rms_norm_eps", "attention.layer_norm_rms_epsilon", math.inf, F, POS),
    ("hidden_size", "embedding_length", 0, U, INT + ", got 0"),
    ("hidden_size", "embedding_length", 18, U,
     r"hidden_size.* 18 is not a multiple of num_attention_heads.* 4"),
    ("hidden_size", "embedding_length", 12, U,
     r"head dimension 3 \(hidden_size.* / num_attention_heads.*\) must be even"),
    ("num_attention_heads", "attention.head_count", 0, U, INT),
    ("num_attention_heads", "attention.head_count", -4, I, INT + ", got -4"),
    ("num_key_value_heads", "attention.head_count_kv", 0, U, INT),
    ("num_key_value_heads", "attention.head_count_kv", 3, U,
     r"num_attention_heads.* 4 is not a multiple of num_key_value_heads.* 3"),
    ("num_hidden_layers", "block_count", 0, U, INT),
    ("num_hidden_layers", "block_count", -2, I, INT + ", got -2"),
    ("intermediate_size", "feed_forward_length", 0, U, INT),
    ("vocab_size", "vocab_size", 0, U, INT),
    ("head_dim", "attention.key_length", 3, U, r"head dimension 3 .* must be even"),
    ("head_dim", "attention.key_length", 0, U, INT),
    ("max_position_embeddings", "context_length", 0, U, INT),
]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    cfg = config("llama", True)
    return cfg, hf_weights(dict(cfg), False, seed=3), tmp_path_factory.mktemp("rules")


def _core(msg):
    """The message after the file's name, without GGUF key names and the value shown."""
    return re.sub(r" \(metadata '[^']*'\)", "", msg.split(": ", 1)[1]).split(", got")[0]


def _message(fn):
    with pytest.raises(ValueError) as e:
        fn()
    return str(e.value)


@pytest.mark.parametrize("field, key, value, vtype, match", TABLE,
                         ids=[f"{r[0]}={r[2]}" for r in TABLE])
def test_bad_value_refused_from_both_formats(base, field, key, value, vtype, match, request):
    cfg, w, path = base
    d = path / request.node.name.replace("[", "_").replace("]", "").replace("=", "_")
    d.mkdir()
    (d / "config.json").write_text(json.dumps(dict(cfg, **{field: value})))
    f = write_gguf(d / "model.gguf", cfg, w, "smollm", meta={f"llama.{key}": (value, vtype)})
    hf_msg = _message(lambda: files.read_config(d))
    gguf_msg = _message(lambda: lmgguf.read_gguf_config(f))
    assert re.search(rf"config.json of .*: .*{match}", hf_msg), hf_msg
    assert re.search(rf"GGUF file '.*model.gguf': .*{match}", gguf_msg), gguf_msg
    assert field in hf_msg and field in gguf_msg
    assert f"metadata 'llama.{key}'" in gguf_msg, gguf_msg
    # the same rule: the messages agree once the GGUF key (and float32 rounding) is taken out
    assert _core(hf_msg) == _core(gguf_msg)


def test_good_values_pass_both_formats(base):
    cfg, w, path = base
    (path / "config.json").write_text(json.dumps(cfg))
    f = write_gguf(path / "good.gguf", cfg, w, "smollm")
    a, b = files.read_config(path), lmgguf.read_gguf_config(f)
    for k in ("n_layers", "vocab_size", "d_model", "d_ff", "n_heads", "n_kv_heads", "head_dim",
              "rope_theta", "norm_eps", "max_length"):
        assert a[k] == pytest.approx(b[k]), k


def test_check_sizes_names_the_key():
    raw = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
               num_attention_heads=4, vocab_size=10, rope_theta=-1.0)
    with pytest.raises(ValueError, match=r"src: rope_theta \(metadata 'x.freq'\) must be a "
                                         r"finite number > 0, got -1.0"):
        spec.check_sizes(raw, "src", {"rope_theta": "x.freq"})
    with pytest.raises(ValueError, match=r"src lacks vocab_size \(metadata 'x.v'\)"):
        spec.check_sizes(dict(raw, vocab_size=None), "src", {"vocab_size": "x.v"})
    assert spec.check_sizes(dict(raw, rope_theta=1e4), "src")["head_dim"] == 8
