"""Hugging Face loading refuses, in one line naming the file and the field or tensor: a layer
count beyond the shards' tensors (checked in the safetensors headers before the model is
built), weights that are finite in the file but overflow in the requested dtype, and chat
templates that are not UTF-8 or do not compile. Each malformed checkpoint is written here from
``support.hf_checkpoint`` / ``support.gguf_checkpoint``.
"""

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("tunix")
pytest.importorskip("safetensors")
pytest.importorskip("jinja2")
gguf = pytest.importorskip("gguf")

from grpo_theory import lm  # noqa: E402
from grpo_theory.lm.checkpoints import load  # noqa: E402

from support.gguf_checkpoint import config as gguf_config, write_gguf  # noqa: E402
from support.hf_checkpoint import hf_weights, write_checkpoint  # noqa: E402

SHARD1 = "model-00001-of-00002.safetensors"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("readers") / "good"
    write_checkpoint(d, model_type="qwen2", shards=2)
    return d


def _copy(good, tmp_path, **config_changes):
    d = tmp_path / "ckpt"
    shutil.copytree(good, d)
    if config_changes:
        c = json.loads((d / "config.json").read_text())
        c.update(config_changes)
        (d / "config.json").write_text(json.dumps(c))
    return d


def _refused(fn, match):
    with pytest.raises(ValueError, match=match) as e:
        fn()
    assert "\n" not in str(e.value), str(e.value)
    return str(e.value)


def _no_model(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the model was built before the headers were checked")
    monkeypatch.setattr(load, "tunix_model", boom)


@pytest.mark.parametrize("layers", [3, 10**9])
def test_layer_count_checked_against_the_shard_headers(good, tmp_path, monkeypatch, layers):
    d = _copy(good, tmp_path, num_hidden_layers=layers)
    _no_model(monkeypatch)
    _refused(lambda: lm.from_pretrained(d),
             rf"checkpoint '.*ckpt' lacks tensor\(s\) model.layers.2.self_attn.q_proj.weight, "
             rf".* num_hidden_layers = {layers}, .*read from the safetensors headers")


def test_gguf_block_count_beyond_the_tensors(tmp_path, monkeypatch):
    cfg = gguf_config("llama", True)
    w = hf_weights(dict(cfg), False, seed=1)
    f = write_gguf(tmp_path / "deep.gguf", cfg, w, "smollm",
                   meta={"llama.block_count": (10**9, gguf.GGUFValueType.UINT32)})
    _no_model(monkeypatch)
    _refused(lambda: lm.from_pretrained(f),
             r"GGUF file '.*deep.gguf' lacks tensor\(s\) blk.2.attn_q.weight, .* of a llama "
             r"model with 1000000000 blocks")


def test_header_shapes_checked_before_the_model_is_built(good, tmp_path, monkeypatch):
    d = _copy(good, tmp_path, intermediate_size=32)
    _no_model(monkeypatch)
    _refused(lambda: lm.from_pretrained(d),
             r"tensor model.layers.0.mlp.\w+_proj.weight in model-0000.-of-00002.safetensors "
             r"of checkpoint .* has shape \(.*\), expected \(.*\) from config.json")


def _set_entry(d, value):
    from safetensors.numpy import load_file, save_file
    w = load_file(str(d / SHARD1))
    name = sorted(w)[0]
    w[name] = w[name].copy()
    w[name].flat[5] = value
    save_file(w, str(d / SHARD1))
    return name


@pytest.mark.parametrize("dtype, value", [("bfloat16", np.finfo(np.float32).max),
                                          ("float16", 1e5)])
def test_finite_after_the_cast_to_a_lower_precision(good, tmp_path, dtype, value):
    d = _copy(good, tmp_path)
    name = _set_entry(d, value)
    _refused(lambda: lm.from_pretrained(d, dtype=dtype),
             rf"tensor {name} of checkpoint .* is finite in the file but 1 of its \d+ entries "
             rf"overflow to inf in dtype='{dtype}' \(the dtype option")
    pol = lm.from_pretrained(d)  # float32 holds it
    assert pol.dim > 0


def test_finite_after_the_cast_gguf(tmp_path):
    cfg = gguf_config("llama", True)
    w = hf_weights(dict(cfg), False, seed=1)
    norm = w["model.layers.0.input_layernorm.weight"].copy()
    norm[0] = 1e5
    f = write_gguf(tmp_path / "m.gguf", cfg, w, "smollm",
                   tensors={"blk.0.attn_norm.weight": norm})
    _refused(lambda: lm.from_pretrained(f, dtype="float16"),
             r"tensor model.layers.0.input_layernorm.weight of checkpoint '.*m.gguf' is finite "
             r"in the file but 1 of its 32 entries overflow to inf in dtype='float16'")


def test_chat_templates_checked_at_load(good, tmp_path):
    d = _copy(good, tmp_path)
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{% for m in %}"}))
    _refused(lambda: lm.from_pretrained(d),
             r"tokenizer_config.json of '.*ckpt': chat_template is not a valid Jinja chat "
             r"template \(TemplateSyntaxError at line 1: ")
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": [{"name": "default", "template": "{{ x"}]}))
    _refused(lambda: lm.from_pretrained(d),
             r"chat_template\[name = 'default'\] is not a valid Jinja chat template")
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": 5}))
    _refused(lambda: lm.from_pretrained(d),
             r"chat_template must be a string \(or a list of named templates\), got a JSON "
             r"number")
    (d / "tokenizer_config.json").write_bytes(b'{"chat_template": "\xff\xfe"}')
    _refused(lambda: lm.from_pretrained(d),
             r"tokenizer_config.json cannot be read as UTF-8 text")
    (d / "tokenizer_config.json").unlink()
    (d / "chat_template.jinja").write_bytes(b"\xff\xfe{{ messages }}")
    _refused(lambda: lm.from_pretrained(d),
             r"chat_template.jinja: the chat template cannot be read as UTF-8 text "
             r"\(UnicodeDecodeError")
    (d / "chat_template.jinja").write_text("{% if %}")
    _refused(lambda: lm.from_pretrained(d),
             r"chat_template.jinja: the chat template is not a valid Jinja chat template")
    # compiles, fails when rendered: one line naming the checkpoint
    (d / "chat_template.jinja").write_text("{{ messages[0].content.upper().nope() }}")
    pol = lm.from_pretrained(d)
    _refused(lambda: pol.chat(["hi"]),
             r"the chat template of '.*ckpt' failed to render \(UndefinedError: ")
    (d / "chat_template.jinja").write_text("{{ raise_exception('no system role') }}")
    pol = lm.from_pretrained(d)
    _refused(lambda: pol.chat(["hi"]), r"^chat template: no system role$")
    (d / "chat_template.jinja").write_text("{{ messages[0]['content'] }}!")
    assert lm.from_pretrained(d).chat(["hi"]) == ["hi!"]


def test_gguf_chat_template_checked_at_load(tmp_path):
    cfg = gguf_config("llama", True)
    w = hf_weights(dict(cfg), False, seed=1)
    f = write_gguf(tmp_path / "t.gguf", cfg, w, "smollm",
                   meta={"tokenizer.chat_template": ("{% for %}", gguf.GGUFValueType.STRING)})
    _refused(lambda: lm.from_pretrained(f),
             r"GGUF file '.*t.gguf': metadata 'tokenizer.chat_template' is not a valid Jinja "
             r"chat template \(TemplateSyntaxError")
    marker = "@@chat-template-bytes@@"
    g = write_gguf(tmp_path / "u.gguf", cfg, w, "smollm",
                   meta={"tokenizer.chat_template": (marker, gguf.GGUFValueType.STRING)})
    raw = g.read_bytes()
    g.write_bytes(raw.replace(marker.encode(), b"\xff\xfe" * (len(marker) // 2) + b"!"))
    _refused(lambda: lm.from_pretrained(g),
             r"GGUF file '.*u.gguf': metadata 'tokenizer.chat_template' is unreadable "
             r"\(.*utf-8")
