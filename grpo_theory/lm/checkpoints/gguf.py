r"""llama.cpp GGUF files of the Llama / Qwen2 family, read into the Hugging Face layout.

:func:`read_gguf` turns one ``.gguf`` file into what
:func:`grpo_theory.lm.checkpoints.load.from_pretrained`
builds a policy from: the checked architecture (the fields of
:func:`~grpo_theory.lm.checkpoints.files.read_config`, from the ``{arch}.*`` metadata), the tensors
under their Hugging Face names in torch layout, dequantised to float32 (``gguf.quants.dequantize``:
F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, the K-quants, ...), a ``tokenizers.Tokenizer`` rebuilt
from ``tokenizer.ggml.*`` (byte-level BPE: tokens, merges, token types; the pre-tokenizer named by
``tokenizer.ggml.pre``), the special ids and the chat template (``tokenizer.chat_template``).

Layout. GGUF stores a tensor's dimensions innermost first, so the NumPy array of a ``(out,
in)`` torch weight has the torch shape. llama.cpp's converter permutes the rows of a Llama
checkpoint's ``attn_q`` / ``attn_k`` weights (per head, from the rotate-half pairs ``(i, i +
hd/2)`` to interleaved pairs ``(2i, 2i + 1)``):

.. math:: P(w) = w\,.\mathrm{reshape}(n, 2, hd/2, \dots)\,.\mathrm{swapaxes}(1, 2)
          \,.\mathrm{reshape}(w.\mathrm{shape}),

with ``n`` the query heads for ``attn_q`` and the key/value heads for ``attn_k``;
:func:`unpermute_qk` applies ``P^{-1}`` (reshape to ``(n, hd/2, 2, ...)``, swap back). Qwen2
files are not permuted.

Before ``gguf`` reads the file, every declared count, length and tensor offset is checked
against the file's size and alignment (:mod:`grpo_theory.lm.checkpoints.gguf_layout`); the sizes,
rotary base and norm epsilon are checked by the rules ``config.json`` is checked by
(:func:`grpo_theory.lm.families.spec.check_sizes`, messages naming the metadata key).

Every failure (not a GGUF file, a bad header, a count or offset the file cannot hold, a missing
or mistyped metadata key, an unsupported architecture, tokenizer or tensor type, a missing,
unexpected or mis-shaped tensor, a non-finite value) is a ``ValueError`` naming the file and the
field or tensor. Nothing is
downloaded; ``gguf`` and ``tokenizers`` (the optional extra ``hf``) are imported on first use.
"""

from __future__ import annotations

import os

import numpy as np

from .. import families
from ..families.spec import check_sizes, need_extra
from .gguf_layout import check_layout
from ..._validation import eos_ids as _eos_ids


#: ``general.architecture`` values read (the registered families' GGUF architectures)
GGUF_ARCHITECTURES = families.gguf_architectures()
_REQUIRED = object()
# config.json field (spec.check_sizes) -> GGUF metadata key after "{arch}."
_SIZE_KEYS = {"hidden_size": "embedding_length", "intermediate_size": "feed_forward_length",
              "num_hidden_layers": "block_count", "num_attention_heads": "attention.head_count",
              "vocab_size": "vocab_size", "num_key_value_heads": "attention.head_count_kv",
              "head_dim": "attention.key_length", "max_position_embeddings": "context_length",
              "rope_theta": "rope.freq_base",
              "rms_norm_eps": "attention.layer_norm_rms_epsilon"}
_SIZE_FIELDS_REQUIRED = ("num_hidden_layers", "hidden_size", "intermediate_size",
                         "num_attention_heads")
_REAL = ("rope_theta", "rms_norm_eps")

# tokenizer.ggml.pre -> (split regex or None for ByteLevel's own GPT-2 regex, digits one by one,
# BPE ignore_merges), as llama.cpp's pre-tokenizers split text
_GPT2 = (None, False, False)
_QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
             r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}"
              r"\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_PRE = {"default": _GPT2, "gpt2": _GPT2, "smollm": (None, True, False),
        "qwen2": (_QWEN2_RE, False, False), "llama-bpe": (_LLAMA3_RE, False, True)}


def _need(module: str):
    return need_extra(module, "reading GGUF files")


def hf_tensor_name(name: str, architecture: str | None = None) -> str | None:
    """The Hugging Face name of a GGUF tensor name (``blk.3.attn_q.weight`` ->
    ``model.layers.3.self_attn.q_proj.weight``), or None for a tensor this reader does not
    know.

    Args:
        name: the GGUF tensor name.
        architecture: a GGUF ``general.architecture`` (its family's names); None: the first
            registered family that knows the name.
    """
    specs = (list(families.FAMILIES.values()) if architecture is None
             else [s for s in [families.family_of_gguf(architecture)] if s is not None])
    return next((h for h in (s.gguf_to_hf(name) for s in specs) if h is not None), None)


def _file(path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path must be a .gguf file path (str or os.PathLike), got "
                         f"{type(path).__name__}")
    p = os.path.expanduser(os.fspath(path))
    if not os.path.isfile(p):
        raise ValueError(f"GGUF file {p!r} does not exist or is not a file (nothing is "
                         f"downloaded)")
    return p


def _reader(path: str):
    gguf = _need("gguf")
    # every count, length and tensor offset against the file's size, before gguf allocates
    check_layout(path, {int(k): v for k, v in gguf.GGML_QUANT_SIZES.items()})
    try:
        return gguf.GGUFReader(path)
    except Exception as e:  # gguf raises ValueError, IndexError, struct/NumPy errors
        raise ValueError(f"GGUF file {path!r}: cannot read its header ({type(e).__name__}: "
                         f"{e}); is it a GGUF (v2/v3) file?") from None


def _field(reader, path: str, key: str, kind: str, default=_REQUIRED):
    """Metadata ``key`` as ``kind`` ("int" (>= 0), "integer", "number", "str", "bool",
    "str_list", "int_list"); the values of an architecture are checked by
    :func:`~grpo_theory.lm.families.spec.check_sizes`."""
    f = reader.fields.get(key)
    if f is None:
        if default is _REQUIRED:
            raise ValueError(f"GGUF file {path!r} lacks metadata key {key!r}")
        return default
    try:
        v = f.contents()
    except Exception as e:
        raise ValueError(f"GGUF file {path!r}: metadata {key!r} is unreadable ({e})") from None
    ok = {"int": lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 0,
          "integer": lambda x: isinstance(x, int) and not isinstance(x, bool),
          "number": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool),
          "str": lambda x: isinstance(x, str),
          "bool": lambda x: isinstance(x, bool),
          "str_list": lambda x: isinstance(x, list) and all(isinstance(t, str) for t in x),
          "int_list": lambda x: isinstance(x, list) and all(
              isinstance(t, int) and not isinstance(t, bool) for t in x)}[kind]
    if not ok(v):
        shown = repr(v) if not isinstance(v, list) else f"a list of {len(v)}"
        raise ValueError(f"GGUF file {path!r}: metadata {key!r} must be {kind.replace('_', ' ')}"
                         f"{' >= 0' if kind == 'int' else ''}, got {shown[:80]}")
    return v


def _config(reader, path: str) -> dict:
    """The checked architecture (the fields of
    :func:`~grpo_theory.lm.checkpoints.files.read_config`)."""
    a = _field(reader, path, "general.architecture", "str")
    spec = families.family_of_gguf(a)
    if spec is None:
        raise ValueError(f"GGUF file {path!r}: general.architecture is {a!r}; supported: "
                         f"{', '.join(GGUF_ARCHITECTURES)}")
    g = lambda k, kind="int", d=_REQUIRED: _field(reader, path, f"{a}.{k}", kind, d)  # noqa: E731
    tokens = _field(reader, path, "tokenizer.ggml.tokens", "str_list")
    keys = {k: f"{a}.{m}" for k, m in _SIZE_KEYS.items()}
    raw = {k: _field(reader, path, m, "number" if k in _REAL else "integer", None)
           for k, m in keys.items()}
    raw = {k: v for k, v in raw.items() if v is not None}
    raw.setdefault("vocab_size", len(tokens))
    if "rms_norm_eps" not in raw:  # required here (config.json's default is not GGUF's)
        _field(reader, path, keys["rms_norm_eps"], "number")
    for k in _SIZE_FIELDS_REQUIRED:
        if k not in raw:
            _field(reader, path, keys[k], "integer")
    sizes = check_sizes(raw, f"GGUF file {path!r}", keys)  # config.json's rules
    hd, vocab = sizes["head_dim"], sizes["vocab_size"]
    for k in ("attention.value_length", "rope.dimension_count"):
        v = g(k, "int", hd)
        if v != hd:
            raise ValueError(f"GGUF file {path!r}: metadata '{a}.{k}' is {v}, but only a "
                             f"rotary dimension and value length equal to the head dimension "
                             f"{hd} are supported")
    scaling = g("rope.scaling.type", "str", "none")
    if scaling != "none":
        raise ValueError(f"GGUF file {path!r}: metadata '{a}.rope.scaling.type' is "
                         f"{scaling!r}; only plain rotary embeddings are supported")
    if g("expert_count", "int", 0):
        raise ValueError(f"GGUF file {path!r}: metadata '{a}.expert_count' > 0 (mixture of "
                         f"experts) is not supported")
    if vocab != len(tokens):
        raise ValueError(f"GGUF file {path!r}: metadata '{a}.vocab_size' is {vocab} but "
                         f"tokenizer.ggml.tokens has {len(tokens)} tokens")
    special = {}
    for k in ("eos", "padding", "bos"):
        v = _field(reader, path, f"tokenizer.ggml.{k}_token_id", "int", None)
        if v is not None and v >= vocab:
            raise ValueError(f"GGUF file {path!r}: metadata 'tokenizer.ggml.{k}_token_id' is "
                             f"{v}, outside the vocabulary [0, {vocab})")
        special[k] = v
    flags = spec.gguf_flags({t.name for t in reader.tensors})
    return {
        "model_type": spec.model_types[0], "n_layers": sizes["n_layers"], "vocab_size": vocab,
        "d_model": sizes["d_model"], "d_ff": sizes["d_ff"], "n_heads": sizes["n_heads"],
        "n_kv_heads": sizes["n_kv_heads"], "head_dim": hd, "rope_theta": sizes["rope_theta"],
        "norm_eps": sizes["norm_eps"], "tied": flags["tied"], "qkv_bias": flags["qkv_bias"],
        "max_length": sizes["max_length"],
        "eos_ids": None if special["eos"] is None else _eos_ids(special["eos"]),
        "pad_id": special["padding"], "frozen_row": special["padding"],
        "bos_id": special["bos"],
    }


def _expected_shapes(c: dict) -> dict:
    """GGUF name -> (Hugging Face name, torch-layout shape) of every tensor the architecture
    has (its family's :attr:`~grpo_theory.lm.families.spec.ModelSpec.tensors`)."""
    return {t.gguf: (t.hf, t.shape)
            for t in families.family(c["model_type"]).tensors(c).values()}


def _tensors(reader, path: str, c: dict) -> dict:
    """Hugging Face name -> float32 array (torch layout), dequantised, Q/K rows restored."""
    quants = _need("gguf.quants")
    # at most one block more than the file has tensors: a huge block_count is not enumerated
    want = _expected_shapes(dict(c, n_layers=min(c["n_layers"], len(reader.tensors) + 1)))
    from_gguf = families.family(c["model_type"]).from_gguf
    out = {}
    for t in reader.tensors:
        if t.name not in want:
            raise ValueError(f"GGUF file {path!r}: tensor {t.name!r} is not part of a "
                             f"{c['model_type']} model with {c['n_layers']} blocks"
                             f"{'' if c['qkv_bias'] else ' and no q/k/v biases'} (unsupported)")
        hf, expected = want[t.name]
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        if shape != expected:
            raise ValueError(f"GGUF file {path!r}: tensor {t.name!r} has shape {shape}, "
                             f"expected {expected} from the metadata")
        try:
            w = np.asarray(quants.dequantize(t.data, t.tensor_type), np.float32).reshape(shape)
        except Exception as e:  # NotImplementedError for types without a dequantiser
            raise ValueError(f"GGUF file {path!r}: tensor {t.name!r} of type "
                             f"{getattr(t.tensor_type, 'name', t.tensor_type)} cannot be "
                             f"dequantised ({type(e).__name__}: {e})") from None
        if not np.all(np.isfinite(w)):
            raise ValueError(f"GGUF file {path!r}: tensor {t.name!r} has non-finite values "
                             f"({int(np.sum(~np.isfinite(w)))} of {w.size})")
        out[hf] = from_gguf(hf, w, c)
    missing = [g for g, (h, _) in want.items() if h not in out]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ValueError(f"GGUF file {path!r} lacks tensor(s) {', '.join(missing[:5])}{more} "
                         f"({want[missing[0]][0]}{', ...' if len(missing) > 1 else ''}) of a "
                         f"{c['model_type']} model with {c['n_layers']} blocks")
    return out


def _tokenizer(reader, path: str, c: dict):
    """A ``tokenizers.Tokenizer`` (byte-level BPE) from the ``tokenizer.ggml.*`` metadata."""
    tk = _need("tokenizers")
    model = _field(reader, path, "tokenizer.ggml.model", "str")
    if model != "gpt2":
        raise ValueError(f"GGUF file {path!r}: metadata 'tokenizer.ggml.model' is {model!r}; "
                         f"only 'gpt2' (byte-level BPE) is supported")
    pre = _field(reader, path, "tokenizer.ggml.pre", "str", "default")
    if pre not in _PRE:
        raise ValueError(f"GGUF file {path!r}: metadata 'tokenizer.ggml.pre' is {pre!r}; "
                         f"supported: {', '.join(_PRE)}")
    tokens = _field(reader, path, "tokenizer.ggml.tokens", "str_list")
    types = _field(reader, path, "tokenizer.ggml.token_type", "int_list", [1] * len(tokens))
    if len(types) != len(tokens):
        raise ValueError(f"GGUF file {path!r}: metadata 'tokenizer.ggml.token_type' has "
                         f"{len(types)} entries for {len(tokens)} tokens")
    merges = _field(reader, path, "tokenizer.ggml.merges", "str_list")
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    bad = next((m for m, p in zip(merges, pairs) if len(p) != 2), None)
    if bad is not None:
        raise ValueError(f"GGUF file {path!r}: metadata 'tokenizer.ggml.merges' holds "
                         f"{bad!r}, not two tokens separated by a space")
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ValueError(f"GGUF file {path!r}: metadata 'tokenizer.ggml.tokens' holds "
                         f"duplicate tokens")
    split, digits, ignore_merges = _PRE[pre]
    try:
        tok = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=pairs, fuse_unk=False,
                                         byte_fallback=False, ignore_merges=ignore_merges))
    except Exception as e:  # a merge of tokens that are not in the vocabulary
        raise ValueError(f"GGUF file {path!r}: metadata 'tokenizer.ggml.merges' does not fit "
                         f"'tokenizer.ggml.tokens' ({e})") from None
    pt = tk.pre_tokenizers
    steps = []
    if split is not None:
        steps.append(pt.Split(tk.Regex(split), behavior="isolated", invert=False))
    elif digits:
        steps.append(pt.Digits(individual_digits=True))
    steps.append(pt.ByteLevel(add_prefix_space=False, use_regex=split is None))
    tok.pre_tokenizer = steps[0] if len(steps) == 1 else pt.Sequence(steps)
    tok.decoder = tk.decoders.ByteLevel()
    # control (3) tokens are special; user-defined (4) ones are matched whole as well
    tok.add_special_tokens([tk.AddedToken(t, special=True, normalized=False)
                            for t, y in zip(tokens, types) if y == 3])
    tok.add_tokens([tk.AddedToken(t, special=False, normalized=False)
                    for t, y in zip(tokens, types) if y == 4])
    add_bos = _field(reader, path, "tokenizer.ggml.add_bos_token", "bool", False)
    add_eos = _field(reader, path, "tokenizer.ggml.add_eos_token", "bool", False)
    for flag, k, key in ((add_bos, "bos_id", "bos"), (add_eos, "eos_ids", "eos")):
        if flag and c[k] is None:
            raise ValueError(f"GGUF file {path!r}: 'tokenizer.ggml.add_{key}_token' is true "
                             f"but 'tokenizer.ggml.{key}_token_id' is absent")
    if add_bos or add_eos:
        sp = []
        single = "$A:0"
        if add_bos:
            sp.append((tokens[c["bos_id"]], c["bos_id"]))
            single = f"{tokens[c['bos_id']]}:0 " + single
        if add_eos:
            e = c["eos_ids"][0]
            sp.append((tokens[e], e))
            single = single + f" {tokens[e]}:0"
        tok.post_processor = tk.processors.TemplateProcessing(single=single, special_tokens=sp)
    return tok


def read_gguf_config(path) -> dict:
    """The checked architecture of a ``.gguf`` file (metadata only; no tensor is read).

    Returns:
        the fields of :func:`~grpo_theory.lm.checkpoints.files.read_config` (``model_type`` "llama"
        or "qwen2", sizes, ``rope_theta``, ``norm_eps``, ``tied`` (no ``output.weight``),
        ``qkv_bias``, ``max_length``, ``eos_ids``, ``pad_id``, ``frozen_row`` = ``pad_id``:
        ``tokenizer.ggml.padding_token_id``, which transformers' GGUF loader maps to
        ``config.pad_token_id`` and so to ``padding_idx``) plus ``bos_id``.

    Raises:
        ValueError: naming the file and the field (see the module doc).
    """
    p = _file(path)
    return _config(_reader(p), p)


def read_gguf(path) -> dict:
    """Everything :func:`~grpo_theory.lm.checkpoints.load.from_pretrained` needs from a ``.gguf``
    file.

    Args:
        path: the ``.gguf`` file.

    Returns:
        dict with ``path`` (the expanded path), ``config`` (:func:`read_gguf_config`),
        ``tensors`` (Hugging Face name -> float32 array in torch layout; exactly the file's
        tensors, so ``n_params`` is the file's own count), ``n_params``, ``tokenizer`` (a
        ``tokenizers.Tokenizer``) and ``chat_template`` (``tokenizer.chat_template`` or None).

    Raises:
        ValueError: naming the file and the field or tensor (see the module doc).
    """
    p = _file(path)
    reader = _reader(p)
    c = _config(reader, p)
    tensors = _tensors(reader, p, c)
    return {"path": p, "config": c, "tensors": tensors,
            "n_params": int(sum(w.size for w in tensors.values())),
            "tokenizer": _tokenizer(reader, p, c),
            "chat_template": _field(reader, p, "tokenizer.chat_template", "str", None) or None}
