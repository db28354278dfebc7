r"""Checked readers of the files of a local Hugging Face checkpoint directory (the loader,
:mod:`grpo_theory.lm.checkpoints.load`, builds the policy from what they return).

Every reader turns every failure into a ``ValueError`` that names the file and, where there is
one, the field or tensor:

* :func:`read_json`: a JSON file that must hold an object (``config.json``,
  ``generation_config.json``, ``tokenizer_config.json``, ``model.safetensors.index.json``);
* :func:`check_config`: the architecture of a Hugging Face ``config.json`` (every size a
  positive integer, ``rms_norm_eps > 0``, ``rope_theta > 0``, the sizes consistent with each
  other);
* :func:`shard_names`: the shard list of ``model.safetensors.index.json`` (each shard a plain
  file name inside the checkpoint directory: no path separator, no ``..``, not absolute; a
  symlinked file inside the directory, as in the Hugging Face cache layout, is allowed);
* :func:`header_shapes`: the tensor names and shapes of a safetensors header (nothing else
  read: the loaders check every tensor ``config.json`` implies before building the model);
* :func:`read_tensors`: tensors of one safetensors file, the library's errors wrapped with the
  file's name, each tensor checked finite (:func:`check_finite`, one reduction per tensor) and
  checked against the shape that ``config.json`` implies (:func:`tensor_shapes`);
* :func:`read_tokenizer`: ``tokenizer.json``, the ``tokenizers`` library's errors wrapped;
* :func:`checkpoint_dir`, :func:`read_config`, :func:`shards`, :func:`check_headers` and
  :func:`read_chat_template`: the directory itself (its checked ``config.json``, its weight
  files, every tensor ``config.json`` implies present in the headers, its chat template).

safetensors and tokenizers are imported on first use (the optional extra ``hf``).
"""

from __future__ import annotations

import json
import os

import numpy as np

from .. import families
from ..families.spec import json_kind as _json_kind
from ..families.spec import need_extra
from .chat_template import check_template


#: the ``model_type`` values of the registered families (:mod:`grpo_theory.lm.families`)
SUPPORTED_MODEL_TYPES = families.model_types()


def read_json(path: str, name: str, required: bool = True):
    """The JSON object (a dict) of file ``name`` in directory ``path``.

    Args:
        path: the checkpoint directory.
        name: the file name (e.g. ``"config.json"``).
        required: raise when the file is absent (else return None).

    Returns:
        The parsed dict, or None for an absent optional file.

    Raises:
        ValueError: absent (when required), unreadable, not valid JSON, or not a JSON object.
    """
    f = os.path.join(path, name)
    if not os.path.isfile(f):
        if required:
            raise ValueError(f"checkpoint directory {path!r} has no {name}: a Hugging Face "
                             f"checkpoint needs config.json, tokenizer.json and "
                             f"model.safetensors (or model.safetensors.index.json with its "
                             f"shards); nothing is downloaded")
        return None
    try:
        with open(f, encoding="utf-8") as fh:
            out = json.load(fh)
    except json.JSONDecodeError as e:
        raise ValueError(f"{f} is not valid JSON: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{f} cannot be read as UTF-8 text: {e}") from None
    if not isinstance(out, dict):
        raise ValueError(f"{f} must hold a JSON object ({{...}}), got a JSON "
                         f"{_json_kind(out)}")
    return out


def check_config(c, source: str) -> dict:
    """The checked architecture of a Hugging Face ``config.json``.

    The family reading its ``model_type`` (:func:`grpo_theory.lm.families.family`; one of
    :data:`SUPPORTED_MODEL_TYPES`) checks every field (for Qwen2 / Llama:
    :func:`grpo_theory.lm.families.qwen2.check_config`: sizes positive integers, head counts
    consistent, ``rms_norm_eps`` and ``rope_theta`` finite and > 0, special ids in the
    vocabulary, no feature the computation lacks).

    Args:
        c: the parsed ``config.json``.
        source: how to name the file in messages (e.g. ``"config.json of '/ckpt'"``).

    Returns:
        dict with the family's :attr:`~grpo_theory.lm.families.spec.ModelSpec.config_fields`
        (``model_type``, ``n_layers``, ``vocab_size``, ``d_model``, ``d_ff``, ``n_heads``,
        ``n_kv_heads``, ``head_dim``, ``rope_theta``, ``norm_eps``, ``tied``, ``qkv_bias``,
        ``max_length``, ``eos_ids``, ``pad_id``; None when absent).

    Raises:
        ValueError: naming ``source`` and the field.
    """
    if not isinstance(c, dict):
        raise ValueError(f"{source} must be a JSON object, got a JSON {_json_kind(c)}")
    mt = c.get("model_type")
    try:
        spec = families.family(mt)
    except ValueError:
        raise ValueError(f"{source} has model_type {mt!r}; supported: "
                         f"{', '.join(families.model_types())} (Qwen2, Qwen2.5, Llama)") from None
    return spec.check_config(c, source)


def tensor_shapes(arch: dict) -> dict:
    """The shape of every Hugging Face tensor (torch layout, ``Linear`` weights (out, in)) that
    an architecture of :func:`check_config` implies, ``lm_head`` and q/k/v biases included
    (the family's :attr:`~grpo_theory.lm.families.spec.ModelSpec.tensors` of the untied, biased
    variant)."""
    spec = families.family_of_arch(arch)
    full = dict(arch, tied=False, qkv_bias=True)
    return {k: t.shape for k, t in spec.tensors(full).items()}


def shard_names(index: dict, source: str, directory: str) -> list[str]:
    """The sorted, distinct shard file names of a ``model.safetensors.index.json``.

    Each shard must be a plain file name (no ``/`` or ``\\``, not ``.`` or ``..``, not
    absolute, no NUL) of a file in ``directory``; the file itself may be a symlink (the Hugging
    Face cache links snapshot files to blobs elsewhere), the name may not lead outside.

    Args:
        index: the parsed index; source: its name for messages; directory: the checkpoint.

    Returns:
        list of file names (not paths).

    Raises:
        ValueError: no ``weight_map`` object, a non-string tensor or shard name, a shard name
            that is a path, or a listed shard that is not a file of ``directory``.
    """
    wm = index.get("weight_map")
    if not isinstance(wm, dict) or not wm:
        raise ValueError(f"{source} has no weight_map (an object tensor name -> shard file)")
    names = set()
    for k, fn in wm.items():
        if not isinstance(fn, str) or not fn:
            raise ValueError(f"{source}: weight_map[{k!r}] must be a shard file name, got "
                             f"{fn!r}")
        if (fn in (".", "..") or "/" in fn or "\\" in fn or os.sep in fn or "\0" in fn
                or os.path.isabs(fn) or (os.altsep and os.altsep in fn)):
            raise ValueError(f"{source}: weight_map[{k!r}] = {fn!r} is not a plain file name "
                             f"inside the checkpoint directory (no path separators, '..' or "
                             f"absolute paths: a checkpoint never reads files outside its "
                             f"directory)")
        names.add(fn)
    files = sorted(names)
    absent = [fn for fn in files if not os.path.isfile(os.path.join(directory, fn))]
    if absent:
        raise ValueError(f"checkpoint {directory!r} lacks shard(s) {', '.join(absent)} listed "
                         f"in model.safetensors.index.json")
    return files


def check_finite(name: str, array, source: str) -> None:
    """Refuse a tensor with a NaN or inf entry (one reduction; the count only on failure).

    Args:
        name: the tensor's name; array: its values (NumPy, bfloat16 included); source: the file.
    """
    a = np.asarray(array)
    if a.dtype.kind in "biu":
        return
    if not bool(np.isfinite(a).all()):
        bad = int(a.size - np.count_nonzero(np.isfinite(a)))
        raise ValueError(f"tensor {name} in {source} has {bad} non-finite entr"
                         f"{'y' if bad == 1 else 'ies'} (NaN or inf) of {a.size}: the "
                         f"checkpoint is damaged")


def check_shape(name: str, array, expected, source: str) -> None:
    """Refuse a tensor (an array, or its shape as a tuple) whose shape differs from the one
    ``config.json`` implies."""
    got = tuple(array) if isinstance(array, tuple) else tuple(np.shape(array))
    if expected is not None and got != tuple(expected):
        raise ValueError(f"tensor {name} in {source} has shape {got}, "
                         f"expected {tuple(expected)} from config.json (hidden_size, "
                         f"intermediate_size, vocab_size, head counts and head_dim must agree "
                         f"with the tensors)")


def shard_source(file: str) -> str:
    """How messages name a shard: its base name and checkpoint directory."""
    return f"{os.path.basename(file)} of checkpoint {os.path.dirname(file)!r}"


def header_shapes(file: str, source: str | None = None) -> dict:
    """Tensor name -> shape of one safetensors file, from its header alone (no data read).

    Raises:
        ValueError: the library cannot read the header, naming the file.
    """
    safetensors = need_extra("safetensors")
    source = source or shard_source(file)
    try:
        with safetensors.safe_open(file, framework="numpy") as sf:
            return {k: tuple(int(x) for x in sf.get_slice(k).get_shape()) for k in sf.keys()}
    except Exception as e:  # SafetensorError, OSError
        raise ValueError(f"{source} is not a readable safetensors file: "
                         f"{type(e).__name__}: {e}") from None


def read_tensors(file: str, wanted, shapes: dict | None = None, source: str | None = None):
    """The tensors of one safetensors file whose names are in ``wanted``, checked.

    Args:
        file: the ``.safetensors`` path.
        wanted: a container of tensor names to read (others are skipped unread).
        shapes: expected shapes by name (:func:`tensor_shapes`), or None.
        source: how to name the file (default: its base name and directory).

    Returns:
        dict name -> NumPy array (each finite and of its expected shape).

    Raises:
        ValueError: the library cannot read the file (truncated, empty, garbage, an
            unsupported dtype), a non-finite entry, or a wrong shape, naming the file and
            tensor.
    """
    safetensors = need_extra("safetensors")
    source = source or shard_source(file)
    out = {}
    name = None
    try:
        with safetensors.safe_open(file, framework="numpy") as sf:
            for name in sf.keys():
                if name in wanted:
                    out[name] = sf.get_tensor(name)
    except Exception as e:  # SafetensorError, OSError, numpy's unsupported dtypes
        what = f" (tensor {name})" if name is not None else ""
        raise ValueError(f"{source} is not a readable safetensors file{what}: "
                         f"{type(e).__name__}: {e}") from None
    for name, w in out.items():
        check_shape(name, w, (shapes or {}).get(name), source)
        check_finite(name, w, source)
    return out


def read_tokenizer(file: str):
    """A ``tokenizers.Tokenizer`` from ``tokenizer.json``, the library's errors wrapped.

    Raises:
        ValueError: the file is not a tokenizer the library can build (corrupt, incomplete,
            truncated JSON), naming the file.
    """
    tokenizers = need_extra("tokenizers")
    try:
        return tokenizers.Tokenizer.from_file(file)
    except Exception as e:  # tokenizers raises a bare Exception
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"{file} is not a tokenizer the tokenizers library can read: "
                         f"{msg}") from None


def checkpoint_dir(path) -> str:
    """``path`` (``~`` expanded) when it is a directory; a ``ValueError`` naming it otherwise."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path must be a checkpoint directory (str or os.PathLike), got "
                         f"{type(path).__name__}")
    path = os.path.expanduser(os.fspath(path))
    if not os.path.isdir(path):
        raise ValueError(f"path {path!r} is not a directory: from_pretrained needs a local "
                         f"Hugging Face checkpoint directory (config.json, tokenizer.json, "
                         f"*.safetensors) or a llama.cpp .gguf file; nothing is "
                         f"downloaded")
    return path


def read_config(path) -> dict:
    """The checked architecture of a checkpoint directory's ``config.json``.

    Args:
        path: the checkpoint directory.

    Returns:
        dict with ``model_type``, ``n_layers``, ``vocab_size``, ``d_model``, ``d_ff``,
        ``n_heads``, ``n_kv_heads``, ``head_dim``, ``rope_theta``, ``norm_eps``, ``tied``,
        ``qkv_bias``, ``max_length`` (``max_position_embeddings`` or None) and ``eos_ids``,
        ``pad_id`` as written in ``config.json`` (None when absent).

    Raises:
        ValueError: missing directory or config.json, a file that is not a JSON object, a
            ``model_type`` no registered family reads, a missing or invalid field (sizes
            positive integers, ``rms_norm_eps`` and ``rope_theta`` finite and > 0, the head
            counts consistent; :func:`check_config`), or a feature the
            computation does not implement (``rope_scaling``, sliding windows, MLP biases,
            non-SiLU). The message names the file and the field.
    """
    path = checkpoint_dir(path)
    return check_config(read_json(path, "config.json"), f"config.json of {path!r}")


def hf_names(arch: dict) -> dict:
    """HF tensor name -> (path in tunix's parameter dict, transform of the HF array or None),
    from the family's :attr:`~grpo_theory.lm.families.spec.ModelSpec.tensors`."""
    return {k: (t.path, t.to_tunix)
            for k, t in families.family(arch["model_type"]).tensors(arch).items()}


def shards(path: str) -> list[str]:
    """The safetensors files of the checkpoint: those the index lists (plain file names inside
    ``path``, all present; :func:`shard_names`), else ``model.safetensors``."""
    index = read_json(path, "model.safetensors.index.json", required=False)
    if index is not None:
        src = f"model.safetensors.index.json of {path!r}"
        return [os.path.join(path, f) for f in shard_names(index, src, path)]
    single = os.path.join(path, "model.safetensors")
    if os.path.isfile(single):
        return [single]
    raise ValueError(f"checkpoint directory {path!r} has no model.safetensors and no "
                     f"model.safetensors.index.json (weights must be safetensors; nothing is "
                     f"downloaded)")


def check_headers(path: str, arch: dict) -> None:
    """Every tensor ``config.json`` implies, present with its shape in the shards' headers,
    checked before the model is built (headers only, no tensor data read).

    A layer count beyond what the shards hold is caught here, without enumerating the layers
    the file lacks: at most as many layers are listed as the shards have tensors, plus one.

    Raises:
        ValueError: naming the first missing tensor(s), or a tensor of the wrong shape.
    """
    found = {}
    for f in shards(path):
        found.update({k: (shape, f) for k, shape in header_shapes(f).items()})
    spec = families.family(arch["model_type"])
    listed = dict(arch, n_layers=min(arch["n_layers"], len(found) + 1))
    specs = spec.tensors(listed)
    missing = [k for k in specs if k not in found]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ValueError(f"checkpoint {path!r} lacks tensor(s) {', '.join(missing[:5])}{more} "
                         f"required by its config.json ({arch['model_type']}, "
                         f"num_hidden_layers = {arch['n_layers']}, "
                         f"tie_word_embeddings={arch['tied']}; read from the safetensors "
                         f"headers before the model is built)")
    for k, t in specs.items():
        shape, f = found[k]
        check_shape(k, shape, t.shape, shard_source(f))


def read_chat_template(path: str) -> str | None:
    """``chat_template`` of tokenizer_config.json (or chat_template.jinja), else None; a list
    of named templates gives the one named ``default``. The template must be UTF-8 text, a
    string (or such a list) and compile (:func:`.chat_template.check_template`)."""
    f = os.path.join(path, "chat_template.jinja")
    if os.path.isfile(f):
        try:
            with open(f, encoding="utf-8") as fh:
                t = fh.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"{f}: the chat template cannot be read as UTF-8 text "
                             f"({type(e).__name__}: {e})") from None
        return check_template(t or None, f"{f}: the chat template")
    where = f"tokenizer_config.json of {path!r}: chat_template"
    t = (read_json(path, "tokenizer_config.json", required=False) or {}).get("chat_template")
    if isinstance(t, list):
        t = next((d.get("template") for d in t if isinstance(d, dict)
                  and d.get("name") == "default"), None)
        where += "[name = 'default']"
    if t is not None and not isinstance(t, str):
        raise ValueError(f"{where} must be a string (or a list of named templates), got a "
                         f"JSON {_json_kind(t)}")
    return check_template(t or None, where)
