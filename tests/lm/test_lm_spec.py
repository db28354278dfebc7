"""One spec per model family (grpo_theory.lm.families.spec, grpo_theory.lm.families).

For every registered family, tiny checkpoints are written by the tests' own writers (safetensors
in the Hugging Face layout, and GGUF as llama.cpp's converter writes it, with their own tensor
name tables): the spec's Hugging Face names and shapes are exactly the safetensors file's, its
GGUF names and shapes exactly the GGUF file's, its tunix paths exactly the loaded parameter
dict's, and what the GGUF reader returns under the spec's names is the checkpoint's weights
(llama.cpp's q/k row permutation undone by the family). A family registered without a writer
here fails the coverage check.
"""

import gguf
import jax
import numpy as np
import pytest
from safetensors import safe_open

from grpo_theory import lm
from grpo_theory.lm import families
from grpo_theory.lm.checkpoints import files
from grpo_theory.lm.budget import memory
from grpo_theory.lm.families import spec
from grpo_theory.lm.checkpoints import gguf as lmgguf
from support.gguf_checkpoint import config as gguf_config, write_folder, write_gguf
from support.hf_checkpoint import hf_weights, write_checkpoint

# family -> the (tied, q/k/v bias) variants the tests write
VARIANTS = {"qwen2": [(False, True), (True, True)],
            "llama": [(False, False), (True, False), (False, True)]}


def test_every_registered_family_has_a_test_writer():
    assert set(families.FAMILIES) == set(VARIANTS)
    for name, s in families.FAMILIES.items():
        assert isinstance(s, spec.ModelSpec) and s.name == name
        assert families.family(name) is s
        for t in s.model_types:
            assert families.family(t) is s
        for a in s.gguf_architectures:
            assert families.family_of_gguf(a) is s
    assert families.family_of_gguf("mamba") is None
    with pytest.raises(ValueError, match="model_type must be one of qwen2, llama, got 'gpt2'"):
        families.family("gpt2")
    with pytest.raises(ValueError, match="'llama' already registered"):
        families.register(families.FAMILIES["llama"])
    with pytest.raises(ValueError, match="spec must be a ModelSpec"):
        families.register("llama")


def _cases():
    return [(name, tied, bias) for name, vs in VARIANTS.items() for tied, bias in vs]


@pytest.mark.parametrize("name,tied,bias", _cases())
def test_safetensors_names_shapes_and_tunix_paths(name, tied, bias, tmp_path):
    cfg, w = write_checkpoint(tmp_path, name, tied=tied, bias=bias, shards=1)
    if name == "llama" and bias:  # a Llama with attention_bias: the flag says so
        import json
        cfg["attention_bias"] = True
        (tmp_path / "config.json").write_text(json.dumps(cfg))
    arch = files.read_config(tmp_path)
    s = families.family(arch["model_type"])
    assert s.name == name and set(arch) == set(s.config_fields)
    specs = s.tensors(arch)
    with safe_open(str(tmp_path / "model.safetensors"), framework="numpy") as f:
        stored = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    assert stored == {k: t.shape for k, t in specs.items()}
    assert all(t.hf == k for k, t in specs.items())
    pol = lm.from_pretrained(tmp_path)
    leaves = {tuple(getattr(p, "key", getattr(p, "idx", None)) for p in path): tuple(v.shape)
              for path, v in jax.tree_util.tree_flatten_with_path(pol.params)[0]}
    want = {t.path: (t.to_tunix(np.zeros(t.shape)) if t.to_tunix else np.zeros(t.shape)).shape
            for t in specs.values()}
    assert leaves == want
    assert pol.dim == sum(int(np.prod(t.shape)) for t in specs.values())
    # the activation bytes of the memory model are the family's
    assert memory.ghost_row_bytes(arch, 12, 5, 4) == s.activation_bytes(arch, 12, 5, 4) > 0


@pytest.mark.parametrize("name,tied", [("qwen2", False), ("qwen2", True), ("llama", False),
                                       ("llama", True)])
def test_gguf_names_shapes_and_values(name, tied, tmp_path):
    cfg = gguf_config(name, tied)
    w = hf_weights(cfg, name == "qwen2", seed=2)
    file = write_gguf(tmp_path / "m.gguf", cfg, w, "smollm")
    arch = lmgguf.read_gguf_config(file)
    s = families.family_of_gguf(name)
    specs = s.tensors(arch)
    reader = gguf.GGUFReader(str(file))
    stored = {t.name: tuple(int(x) for x in reversed(t.shape.tolist())) for t in reader.tensors}
    assert stored == {t.gguf: t.shape for t in specs.values()}
    for g in stored:
        assert s.gguf_to_hf(g) == lmgguf.hf_tensor_name(g, name) == next(
            t.hf for t in specs.values() if t.gguf == g)
    got = lmgguf.read_gguf(file)["tensors"]
    assert set(got) == set(specs)
    for k in specs:
        np.testing.assert_array_equal(got[k], w[k])
    # the same weights as a folder: the same architecture from both readers
    folder = files.read_config(write_folder(tmp_path / "hf", cfg, w, "smollm"))
    keys = set(s.arch_key_fields) - {"norm_eps"} | {"vocab_size", "d_ff"}
    assert {k: arch[k] for k in keys} == {k: folder[k] for k in keys}
    assert arch["norm_eps"] == pytest.approx(folder["norm_eps"], rel=1e-6)  # float32 in GGUF
