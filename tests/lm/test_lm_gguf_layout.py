"""GGUF files whose header declares more than the file holds, or whose tensor offsets are wrong.

Each file is a few hundred bytes written here (by hand with ``struct``, or a valid file of
``support.gguf_checkpoint`` with one field patched); the reader must refuse it with a one-line
ValueError naming the file and the field or tensor before allocating anything the size of the
declared count.
"""

import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from grpo_theory.lm.checkpoints import gguf as lmgguf  # noqa: E402
from grpo_theory.lm.checkpoints.gguf_layout import check_layout  # noqa: E402

from support.gguf_checkpoint import config, write_gguf  # noqa: E402
from support.hf_checkpoint import hf_weights  # noqa: E402

STRING, ARRAY, UINT32 = 8, 9, 4


def _s(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def _header(n_tensors, n_kv, body=b"", pad=4096):
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + body + b"\0" * pad


def _kv(key, vtype, payload):
    return _s(key.encode()) + struct.pack("<I", vtype) + payload


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    cfg = config("llama", True)
    path = tmp_path_factory.mktemp("layout")
    return write_gguf(path / "ok.gguf", cfg, hf_weights(dict(cfg), False, seed=5), "smollm")


def _write(tmp_path, raw, name="model.gguf"):
    f = tmp_path / name
    f.write_bytes(raw)
    return f


@pytest.mark.parametrize("raw, match", [
    (_header(0, 1, _kv("tokenizer.ggml.tokens", ARRAY, struct.pack("<IQ", STRING, 10**12))),
     r"metadata key 'tokenizer.ggml.tokens' declares 1000000000000 strings but \d+ bytes "
     r"remain"),
    (_header(0, 1, _kv("tokenizer.ggml.token_type", ARRAY, struct.pack("<IQ", 5, 10**9))),
     r"metadata key 'tokenizer.ggml.token_type' declares 1000000000 values but \d+ bytes"),
    (_header(0, 1, _kv("general.name", STRING, struct.pack("<Q", 10**15))),
     r"metadata key 'general.name' declares a string of 1000000000000000 bytes but \d+ bytes "
     r"remain"),
    (_header(0, 1, struct.pack("<Q", 2**40)),
     r"metadata key #0 declares a string of 1099511627776 bytes"),
    (_header(10**12, 0),
     r"the header's tensor_count declares 1000000000000 tensors but \d+ bytes remain"),
    (_header(0, 10**12),
     r"the header's kv_count declares 1000000000000 metadata keys but \d+ bytes"),
    (_header(1, 0, _s(b"t") + struct.pack("<I", 2**31)),
     r"tensor 't' declares 2147483648 dimensions"),
    (_header(0, 1, _kv("general.alignment", UINT32, struct.pack("<I", 24))),
     r"metadata 'general.alignment' must be a UINT32 power of two, got 24"),
    (_header(0, 1, _s(b"kkkkkkkk") + b"\x04\x00", pad=0),
     r"metadata key 'kkkkkkkk' needs 4 more bytes but 2 bytes remain \(the file is truncated\)"),
], ids=["string_array", "int_array", "string", "key", "tensor_count", "kv_count", "n_dims",
        "alignment", "truncated_type"])
def test_declared_counts_beyond_the_file_refused(tmp_path, raw, match):
    f = _write(tmp_path, raw)
    with pytest.raises(ValueError, match=rf"GGUF file '.*model.gguf': {match}"):
        lmgguf.read_gguf(f)
    with pytest.raises(ValueError, match=match):
        lmgguf.read_gguf_config(f)


@pytest.mark.parametrize("cut", [30, 200, 1000, 3000, 6000])
def test_truncated_header_refused(valid, tmp_path, cut):
    f = _write(tmp_path, valid.read_bytes()[:cut])
    with pytest.raises(ValueError, match=r"GGUF file '.*model.gguf': .*(needs \d+ more bytes|"
                                         r"declares .*) but (\d+ bytes remain|the data "
                                         r"section holds \d+ bytes)"):
        lmgguf.read_gguf(f)


def _info_offsets(f):
    """Tensor name -> byte position of its data-offset field in the tensor info."""
    r = gguf.GGUFReader(str(f))
    out = {}
    for t in r.tensors:
        fld = t.field
        out[t.name] = fld.offset + sum(p.nbytes for p in fld.parts[:-1])
    return out, {t.name: t.data_offset - r.data_offset for t in r.tensors}


def _patched(valid, tmp_path, changes, name="model.gguf"):
    raw = bytearray(valid.read_bytes())
    where, _ = _info_offsets(valid)
    for t, off in changes.items():
        raw[where[t]:where[t] + 8] = struct.pack("<Q", off)
    return _write(tmp_path, bytes(raw), name)


def test_tensor_offsets_checked(valid, tmp_path):
    _, offs = _info_offsets(valid)
    a, b = sorted(offs, key=offs.get)[:2]
    size = valid.stat().st_size
    with pytest.raises(ValueError, match=rf"model.gguf': tensor '{a}' has data offset "
                                         rf"{offs[a] + 4}, not a multiple of general.alignment "
                                         rf"32"):
        lmgguf.read_gguf(_patched(valid, tmp_path, {a: offs[a] + 4}))
    with pytest.raises(ValueError, match=rf"tensor '(?:{a}|{b})' \(data offset {offs[a]}\) "
                                         rf"overlaps tensor '(?:{a}|{b})'"):
        lmgguf.read_gguf(_patched(valid, tmp_path, {b: offs[a]}))
    with pytest.raises(ValueError, match=rf"tensor '{b}' .*overlaps tensor '{a}'"):
        lmgguf.read_gguf(_patched(valid, tmp_path, {a: offs[b] - 32}))  # out of order, overlapping
    with pytest.raises(ValueError, match=rf"tensor '{a}' declares \d+ bytes at data offset "
                                         rf"{32 * (size // 32)} but the data section holds"):
        lmgguf.read_gguf(_patched(valid, tmp_path, {a: 32 * (size // 32)}))
    # swapping two tensors of one size keeps every offset valid: the file still loads
    same = [t for t in offs if t.endswith("attn_norm.weight")]
    out = lmgguf.read_gguf(_patched(valid, tmp_path, {same[0]: offs[same[1]],
                                                      same[1]: offs[same[0]]}, "swap.gguf"))
    assert len(out["tensors"]) == len(offs)


def test_valid_file_passes_the_layout_check(valid):
    check_layout(str(valid), {int(k): v for k, v in gguf.GGML_QUANT_SIZES.items()})
    out = lmgguf.read_gguf(valid)
    assert all(np.all(np.isfinite(w)) for w in out["tensors"].values())
