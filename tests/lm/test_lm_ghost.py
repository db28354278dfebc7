"""Ghost-norm score statistics of the Hugging Face route (grpo_theory.lm.budget.ghost).

Tiny random checkpoints (Qwen2 with q/k/v biases and an untied head; Llama without biases, tied
and untied) are written in the Hugging Face layout and loaded. The pure-JAX forward must give
tunix's logits; the ghost route's ``(W S, ||s_n||^2)`` must equal the per-sample route's
(``vmap(grad)``, S formed) on left-padded prompts, responses with an EOS inside, temperature != 1:

* float64 (parameters cast to float64, the per-sample route run on the same pure forward):
  relative 1e-5 (the two differ only by float64 rounding);
* float32 (the policy as loaded: ghost route vs tunix's module by ``vmap(grad)``): relative
  2e-4 of the largest entry (float32 rounding over a few hundred terms).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_theory import lm
from grpo_theory.lm.budget import ghost
from grpo_theory.lm.checkpoints import hf
from grpo_theory.lm import policy as lmpolicy
from support.hf_checkpoint import EOS, EOS2, write_checkpoint

PP = hf.PROMPT_PAD
R = 7


FAMILIES = [pytest.param(("qwen2", False, True), id="qwen2-untied-bias"),
            pytest.param(("llama", True, False), id="llama-tied"),
            pytest.param(("llama", False, False), id="llama-untied")]
# the float32 policy, block and advisor tests: llama-untied's tensors (no biases, an untied head)
# are each met by another family there, and its own ghost route ("auto") by the float64 test
# below, so it runs with the slow tests only
HEAVY = pytest.mark.parametrize("pol", FAMILIES[:2] + [
    pytest.param(*FAMILIES[2].values, id=FAMILIES[2].id, marks=pytest.mark.slow)], indirect=True)


@pytest.fixture(scope="module", params=[p.values[0] for p in FAMILIES],
                ids=[p.id for p in FAMILIES])
def pol(request, tmp_path_factory):
    model_type, tied, bias = request.param
    path = tmp_path_factory.mktemp(f"{model_type}_{tied}")
    write_checkpoint(path, model_type, tied=tied, bias=bias, theta=100.0, seed=3, shards=1)
    return lm.from_pretrained(path, temperature=0.7)


def _batch(seed=1):
    rng = np.random.default_rng(seed)
    x = rng.integers(4, 40, size=(6, 5))
    x[0, :3] = PP  # left padding (the marker, never a token id)
    x[1, :1] = PP
    x[2, 2] = EOS  # an EOS id inside a prompt is an ordinary token
    y = rng.integers(4, 40, size=(6, R))
    y[0, 2] = EOS  # scores stop at the first EOS
    y[3, 4] = EOS2
    y[4, :3] = x[4, 2:]  # repeated token ids across prompt and response (embedding grouping)
    w = np.vstack([np.eye(6), rng.standard_normal((2, 6))])
    return x, y, w


def test_pure_forward_equals_tunix(pol):
    x, y, _ = _batch()
    tok = np.concatenate([x, y], axis=1)
    ref = np.asarray(pol.apply_fn.module_logits(pol.params, tok), np.float64)  # tunix's module
    out = np.asarray(ghost.forward(pol.config, pol.params, tok), np.float64)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    lp = lmpolicy.seq_log_probs(ghost.PureForward.of(pol.config), pol.params, x, y,
                                pol.temperature, pol.eos_ids)
    np.testing.assert_allclose(lp, pol.log_probs(x, y), rtol=1e-5)


def test_ghost_equals_per_sample_float64(pol):
    """float64 parameters: relative 1e-5; the per-layer route alternates with the model (the
    tiny layers make "auto" mix them), so each route meets every kind of tensor."""
    route = {"qwen2": "gram", "llama": "direct" if pol.config["tied"] else "auto"}[
        pol.config["model_type"]]
    x, y, w = _batch()
    p64 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), pol.params)
    fwd = ghost.PureForward.of(pol.config)
    acc_ref, sq_ref = lmpolicy.score_contractions(fwd, p64, x, y, w, pol.temperature, 4,
                                                  pol.eos_ids)
    acc, sq = ghost.ghost_contractions(pol.config, p64, x, y, w, pol.temperature, chunk=4,
                                       eos=pol.eos_ids, route=route)
    assert acc.shape == acc_ref.shape == (8, pol.dim)
    np.testing.assert_allclose(sq, sq_ref, rtol=1e-5)
    np.testing.assert_allclose(acc, acc_ref, rtol=1e-5, atol=1e-5 * np.abs(acc_ref).max())
    assert np.all(sq > 0) and np.abs(acc_ref[:6]).max() > 1e-2  # non-trivial scores


@HEAVY
def test_policy_default_is_ghost_float32(pol):
    """HFPolicy.score_contractions (ghost, default) against method="per_sample" (tunix's module,
    vmap(grad)) in float32, one block and several blocks."""
    x, y, w = _batch(2)
    acc_ref, sq_ref = pol.score_contractions(x, y, w, chunk=3, method="per_sample")
    for chunk in ((6, 4) if pol.config["model_type"] == "qwen2" else (4,)):
        acc, sq = pol.score_contractions(x, y, w, chunk=chunk)
        np.testing.assert_allclose(sq, sq_ref, rtol=2e-4)
        np.testing.assert_allclose(acc, acc_ref, atol=2e-4 * np.abs(acc_ref).max())
    # the score of a response is zero after its first EOS: changing those tokens changes nothing
    y2 = y.copy()
    y2[0, 3:] = 5
    acc2, sq2 = pol.score_contractions(x, y2, w, chunk=4)
    np.testing.assert_allclose(sq2, sq, rtol=1e-5)
    # all-zero weights skip the weighted sums: zeros, the same squared norms
    acc0, sq0 = pol.score_contractions(x, y, np.zeros_like(w), chunk=4)
    assert acc0.shape == acc.shape and not acc0.any()
    np.testing.assert_allclose(sq0, sq, rtol=1e-5)


def test_errors_name_the_argument(pol):
    x, y, _ = _batch(3)
    with pytest.raises(ValueError, match="method"):
        pol.score_contractions(x, y, np.ones(6), method="exact")
    with pytest.raises(ValueError, match="weights"):
        pol.score_contractions(x, y, np.ones((1, 5)))
    with pytest.raises(ValueError, match="chunk"):
        pol.score_contractions(x, y, np.ones(6), chunk=0)
    with pytest.raises(ValueError, match="prompts"):
        pol.score_contractions(np.full_like(x, PP), y, np.ones(6))  # rows of padding only
    with pytest.raises(ValueError, match="route"):
        ghost.ghost_contractions(pol.config, pol.params, x, y, np.ones((1, 6)), route="fast")


@HEAVY
@pytest.mark.parametrize("gs,chunk", [(2, 2), (3, 6)])
def test_moments_and_dots_equal_formed_scores_float64(pol, gs, chunk):
    """ghost_moments (S, ||s_n||^2, group norms ||sum_{n in a} w_n s_n||^2) and score_dots
    (<s_n, v> by jax.jvp) against the per-sample scores formed (vmap(grad)), float64: relative
    1e-5. Groups straddle nothing: blocks of ``chunk`` hold whole groups (one block and a scan
    over three)."""
    route = {"qwen2": "gram", "llama": "direct" if pol.config["tied"] else "auto"}[
        pol.config["model_type"]]
    x, y, _ = _batch(4)
    w = np.random.default_rng(5).standard_normal(6)
    p64 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), pol.params)
    fwd = ghost.PureForward.of(pol.config)
    # the per-sample scores formed: rows of W S with W = [I; 0] (8 x 6, chunk 4: the shapes of
    # test_ghost_equals_per_sample_float64's reference, so its compiled route is reused)
    scores, sq_ref = lmpolicy.score_contractions(fwd, p64, x, y, np.eye(8, 6), pol.temperature,
                                                 4, pol.eos_ids)
    scores = scores[:6]
    one_block = chunk == 6  # then the same backward pass forms every <s_n, S> as well
    out = ghost.ghost_moments(pol.config, p64, x, y, w, gs, pol.temperature, chunk=chunk,
                              eos=pol.eos_ids, route=route, dots=one_block)
    s, sq, gsq = out[:3]
    flat = np.concatenate([np.ravel(a) for a in jax.tree_util.tree_leaves(s)])
    s_ref = w @ scores
    np.testing.assert_allclose(flat, s_ref, rtol=1e-5, atol=1e-5 * np.abs(s_ref).max())
    np.testing.assert_allclose(sq, sq_ref, rtol=1e-5)
    g_ref = (w[:, None] * scores).reshape(6 // gs, gs, -1).sum(1)
    np.testing.assert_allclose(gsq, np.sum(g_ref ** 2, axis=1), rtol=1e-5)
    assert gsq.shape == (6 // gs,) and np.all(gsq > 0)
    ref = scores @ s_ref
    if one_block:
        # every layer's part counts: the embedding's rows (and a tied head's) come after the
        # pass, so a missing one moves the dots by far more than the tolerance
        np.testing.assert_allclose(out[3], ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())
    else:
        with pytest.raises(ValueError, match="one block"):
            ghost.ghost_moments(pol.config, p64, x, y, w, gs, pol.temperature, chunk=chunk,
                                eos=pol.eos_ids, dots=True)
    dots = ghost.score_dots(pol.config, p64, x, y, s, pol.temperature, chunk=4, eos=pol.eos_ids)
    np.testing.assert_allclose(dots, ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())
    with pytest.raises(ValueError, match="group_size"):
        ghost.ghost_moments(pol.config, p64, x, y, w, 4, pol.temperature, chunk=4)


@HEAVY
def test_advisor_ghost_route_equals_per_prompt_route(pol):
    """lm_rollout_statistics on a checkpoint: the ghost route (group ghost norms + forward-mode
    dots; chunk 6 and 9 = 2 and 3 prompts of 3 responses, the last call padded) gives the
    per-prompt route's statistics (chunk 2 < n: per-sample scores + one backward pass per
    prompt) on the same sampled responses: relative 1e-4 (float32 parameters). Every family
    meets the padded last call (chunk 9, the architecture's tensors in the ghost route); the
    unpadded blocks (chunk 6) and a chunk rounded down to whole prompts (7 -> 6) read no tensor
    of their own, so they run on one family (one compilation fewer per other family)."""
    from grpo_theory.advisor import estimate as E

    x = _batch(6)[0][:4]

    def reward(rows, y):
        return (y[:, 0] % 3 == 0) + 0.25 * (rows + 1)

    ref = E.lm_rollout_statistics(pol, x, reward, 3, 7, 5, chunk=2)
    assert ref.chunk == 2 and np.all(ref.mean_sq > 0)
    first = pol.config["model_type"] == "qwen2"
    # chunk 12 holds all 12 responses: one backward pass forms the dot products too
    for chunk in ((6, 9, 12) if first else (9,)):
        seen, done = [], []
        st = E.lm_rollout_statistics(pol, x, reward, 3, 7, 5, chunk=chunk,
                                     stage=lambda *a: seen.append(a),
                                     progress=lambda *a: done.append(a))
        assert st.chunk == chunk
        np.testing.assert_array_equal(st.responses, ref.responses)
        np.testing.assert_array_equal(st.rewards, ref.rewards)
        for k in ("sq_norms", "mean_sq", "mean_dot"):
            np.testing.assert_allclose(getattr(st, k), getattr(ref, k), rtol=1e-4,
                                       atol=1e-6 * np.abs(getattr(ref, k)).max(), err_msg=k)
        if chunk < 12:
            assert ("scores", 2, 2) in seen and ("dots", 2, 2) in seen
        else:
            assert [a for a in seen if a[0] != "sampling"] == [("scores", 0, 1), ("scores", 1, 1)]
        assert done[-1] == (4, 4)
    if first:
        assert E.lm_rollout_statistics(pol, x, reward, 3, 7, 5, chunk=7).chunk == 6
