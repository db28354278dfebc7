"""The pad token's input-embedding row: the torch and JAX routes agree under each choice.

transformers 5.12.1 builds ``LlamaModel`` / ``Qwen2Model``'s ``embed_tokens`` as
``nn.Embedding(vocab_size, hidden_size, padding_idx=config.pad_token_id)``: the lookup gives
row ``pad_token_id`` no gradient (a tied head still does). SmolLM2's pad token is its EOS
``<|im_end|>``, which a ChatML prompt holds after every turn, so the convention changes the
gradient. The checkpoint here is ``support.gguf_checkpoint``'s (pad = EOS = ``<|im_end|>``, as
SmolLM2), written as a Hugging Face folder and as a GGUF file; its prompts hold the pad id as a
counted token. ``pad_embedding="frozen"`` (the default) is transformers' model as it is;
``"trained"`` is the same model with ``padding_idx`` switched off (``embed_tokens.padding_idx =
None``: ``nn.Embedding.forward`` passes it to ``F.embedding`` on every call).
"""

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from support.gguf_checkpoint import EOS, config, write_folder, write_gguf  # noqa: E402
from support.hf_checkpoint import hf_weights  # noqa: E402

from grpo_theory import lm  # noqa: E402
from grpo_theory.lm.checkpoints.hf import PROMPT_PAD  # noqa: E402
from grpo_theory.torch import score_statistics  # noqa: E402

PAD = EOS  # SmolLM2: pad_token_id = eos_token_id = <|im_end|>
M, N, P, T = 3, 3, 7, 4
RTOL = 2e-5  # float32 forward and backward on both sides, float64 sums


@pytest.fixture(scope="module", params=[("llama", True), ("qwen2", False)],
                ids=["llama-tied", "qwen2-untied"])
def ck(request, tmp_path_factory):
    kind, tied = request.param
    root = tmp_path_factory.mktemp(f"pad-{kind}")
    cfg = config(kind, tied)
    w = hf_weights(cfg, kind == "qwen2", seed=4)
    folder = write_folder(root / "hf", cfg, w, "smollm")
    gguf_file = write_gguf(root / "m.gguf", cfg, w, "smollm")
    cls = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM}[kind]
    frozen = cls.from_pretrained(folder).float()
    emb = frozen.get_input_embeddings()
    assert emb.padding_idx == PAD  # transformers' convention, from config.json's pad_token_id
    np.testing.assert_array_equal(emb.weight.detach().numpy(), w["model.embed_tokens.weight"])
    trained = copy.deepcopy(frozen)
    trained.get_input_embeddings().padding_idx = None
    return dict(folder=folder, gguf=gguf_file, tied=tied,
                torch={"frozen": frozen, "trained": trained},
                jax={c: lm.from_pretrained(folder, pad_embedding=c) for c in ("frozen",
                                                                                "trained")})


def _rollouts(pad_inside=True, seed=0):
    """Left-padded prompts (row 1: two slots of padding) that hold the pad id as a counted
    token (``pad_inside``; as ChatML's ``<|im_end|>`` after a turn), responses with an early
    EOS and the pad id filling after it."""
    g = np.random.default_rng(seed)
    x = g.integers(3, 200, (M, P))
    xm = np.ones_like(x)
    x[1, :2], xm[1, :2] = 0, 0
    if pad_inside:
        x[0, 2], x[1, 4], x[2, 1], x[2, 5] = PAD, PAD, PAD, PAD
    y = g.integers(3, 200, (M, N, T))
    y[0, 1, 1], y[0, 1, 2:] = EOS, PAD
    z = g.random((M, N))
    return x, xm, y, z


def _jax_prompts(x, xm):
    return np.where(xm.astype(bool), x, PROMPT_PAD)


def _stats(rec):
    return {k: np.asarray(getattr(rec, k)) for k in ("sq_norms", "mean_sq", "mean_dot")}


def _close(a, b, rtol=RTOL):
    return all(np.allclose(a[k], b[k], rtol=rtol, atol=rtol * np.abs(b[k]).max()) for k in a)


def _naive_sq_norms(model, x, xm, y):
    """(M, N) squared norms of the per-sample autograd gradients (one unpadded sample each)."""
    params = [p for p in model.parameters() if p.requires_grad]
    out = np.zeros((M, N))
    for a in range(M):
        xa = torch.as_tensor(x[a][xm[a].astype(bool)])[None]
        for i in range(N):
            yi = torch.as_tensor(y[a, i])
            hit = (yi == EOS).nonzero()
            yi = yi[: int(hit[0, 0]) + 1 if len(hit) else T][None]
            lg = model(input_ids=torch.cat([xa, yi], 1)).logits[:, xa.shape[1] - 1:-1]
            lp = torch.log_softmax(lg.float(), -1).gather(-1, yi[..., None]).sum()
            gs = torch.autograd.grad(lp, params)
            out[a, i] = sum(float((g.double() ** 2).sum()) for g in gs)
    return out


def test_the_default_is_transformers_padding_idx(ck):
    """config.json's pad_token_id is the frozen row by default (GGUF: the file's
    tokenizer.ggml.padding_token_id); "trained" freezes nothing."""
    assert lm.from_pretrained(ck["folder"]).config["frozen_row"] == PAD
    assert ck["jax"]["frozen"].config["frozen_row"] == PAD
    assert ck["jax"]["trained"].config["frozen_row"] is None
    assert lm.from_pretrained(ck["gguf"]).config["frozen_row"] == PAD
    no_pad = write_gguf(ck["folder"].parent / "nopad.gguf", config("llama", True),
                        hf_weights(config("llama", True), False, seed=4), "smollm",
                        drop=("tokenizer.ggml.padding_token_id",))
    assert lm.from_pretrained(no_pad).config["frozen_row"] is None
    with pytest.raises(ValueError, match="pad_embedding must be one of frozen, trained"):
        lm.from_pretrained(ck["folder"], pad_embedding="zero")


@pytest.mark.parametrize("choice", ["frozen", "trained"])
def test_torch_and_jax_routes_agree_under_each_choice(ck, choice):
    """The torch route on transformers' model and the JAX route (ghost norms; the per-sample
    route equals it, :func:`test_ghost_equals_per_sample_under_each_choice`) give the same
    statistics to float rounding; the rival choice on the JAX side does not."""
    x, xm, y, z = _rollouts()
    ref = _stats(score_statistics(ck["torch"][choice], x, y, z, prompt_mask=xm))
    np.testing.assert_allclose(ref["sq_norms"], _naive_sq_norms(ck["torch"][choice], x, xm, y),
                               rtol=RTOL)  # the torch route is transformers' autograd
    xj = _jax_prompts(x, xm)
    pol = ck["jax"][choice]
    got = _stats(pol.score_statistics(xj, y, z, chunk=2 * N))
    assert _close(got, ref), (got, ref)
    other = "trained" if choice == "frozen" else "frozen"
    rival = _stats(ck["jax"][other].score_statistics(xj, y, z, chunk=2 * N))
    assert not _close(rival, ref)


@pytest.mark.parametrize("choice", ["frozen", "trained"])
def test_ghost_equals_per_sample_under_each_choice(ck, choice):
    x, xm, y, z = _rollouts(seed=2)
    xs = np.repeat(_jax_prompts(x, xm), N, axis=0)
    ys = y.reshape(M * N, T)
    w = np.random.default_rng(3).standard_normal((2, M * N))
    pol = ck["jax"][choice]
    acc, sq = pol.score_contractions(xs, ys, w, chunk=3, method="ghost")
    acc_ps, sq_ps = pol.score_contractions(xs, ys, w, chunk=3, method="per_sample")
    np.testing.assert_allclose(sq, sq_ps, rtol=1e-5)
    np.testing.assert_allclose(acc, acc_ps, rtol=1e-5, atol=1e-5 * np.abs(acc_ps).max())
    # the rival choice's per-sample norms are not these
    other = ck["jax"]["trained" if choice == "frozen" else "frozen"]
    _, sq_o = other.score_contractions(xs, ys, w, chunk=3, method="per_sample")
    assert not np.allclose(sq_o, sq, rtol=1e-3)


def test_the_choices_differ_only_where_the_pad_id_is_counted(ck):
    """With the pad id inside the prompts the two choices give different norms (by more than
    the routes' rounding); without it they coincide."""
    for inside in (True, False):
        x, xm, y, z = _rollouts(pad_inside=inside, seed=5)
        xj = _jax_prompts(x, xm)
        a, b = (_stats(ck["jax"][c].score_statistics(xj, y, z, chunk=2 * N))
                for c in ("frozen", "trained"))
        if inside:
            assert not _close(a, b, rtol=1e-3)
        else:
            assert _close(a, b, rtol=1e-7)


def test_a_gguf_file_trains_as_its_folder(ck):
    """The GGUF file's frozen row is its tokenizer.ggml.padding_token_id (the folder's
    pad_token_id here): the same statistics as the folder (frozen: the default of both)."""
    x, xm, y, z = _rollouts(seed=6)
    xj = _jax_prompts(x, xm)
    g = lm.from_pretrained(ck["gguf"])
    assert lm.from_pretrained(ck["gguf"], pad_embedding="trained").config["frozen_row"] is None
    assert _close(_stats(g.score_statistics(xj, y, z, chunk=2 * N)),
                  _stats(ck["jax"]["frozen"].score_statistics(xj, y, z, chunk=2 * N)), rtol=1e-6)
