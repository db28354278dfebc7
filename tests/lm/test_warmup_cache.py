"""A cached warm-up is keyed by everything it depends on: the configuration's tag and the
floating-point precision it is trained in (float32 and float64 are two entries)."""

import jax
import jax.numpy as jnp
import pytest

from grpo_theory import _cache
from grpo_theory.lm import warmup
from grpo_theory.lm.warmup import QUICK_WARMUP

TINY = QUICK_WARMUP.__class__(d_model=8, n_layers=1, n_heads=1, base_steps=1, instruct_steps=1,
                              icl_steps=1, batch_size=2, chunk=1)


def test_precision_follows_the_x64_mode():
    """(The test session enables x64 globally; each mode is entered explicitly.)"""
    with jax.enable_x64(False):
        assert _cache.precision() == "float32"
        with jax.enable_x64(True):
            assert _cache.precision() == "float64"
        assert _cache.precision() == "float32"


def test_artefact_key_holds_the_precision():
    tag = QUICK_WARMUP.tag()
    k32, k64 = _cache.artefact_key(tag, "float32"), _cache.artefact_key(tag, "float64")
    assert k32 != k64 and k32.startswith(tag) and k64 == tag + "_float64"
    with jax.enable_x64(False):
        assert _cache.artefact_key(tag) == k32
    with jax.enable_x64(True):
        assert _cache.artefact_key(tag) == k64
    with pytest.raises(ValueError, match="dtype"):
        _cache.artefact_key(tag, "bfloat16")
    with pytest.raises(ValueError, match="tag"):
        _cache.artefact_key("a/b", "float32")


def test_float32_and_float64_warmups_are_different_entries(tmp_path, monkeypatch):
    """Trained in float32, then asked for in float64: a second entry with float64 weights
    (rival: one tag for both, where the float64 caller gets the float32 checkpoint back from
    the folder or from the per-process memo). Initialisation and training are stubbed: the
    key is under test, not the model."""
    monkeypatch.setattr(warmup, "init_params", lambda key, cfg: {"w": jnp.zeros(3)})
    monkeypatch.setattr(warmup, "train_supervised",
                        lambda start, *a, **k: (start, [0.0]))
    with jax.enable_x64(False):
        pols32 = warmup.cached_policies(tmp_path, TINY, log=lambda m: None)[0]
    with jax.enable_x64(True):
        pols64 = warmup.cached_policies(tmp_path, TINY, log=lambda m: None)[0]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [TINY.tag() + "_float32", TINY.tag() + "_float64"]
    for d in names:
        files = {p.name for p in (tmp_path / d).iterdir()}
        assert {"base.npz", "instruct.npz", TINY.icl_file} <= files
    assert pols64 is not pols32
