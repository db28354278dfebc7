"""The ghost-norm route rule shared by the JAX and PyTorch backends
(grpo_theory.lm.budget.ghost_rule).

* the rule is what its docstring says: the route with fewer multiply-adds by the stated counts,
  a memory budget moving it to the other route only when that one fits;
* both backends pick the same route: the JAX ghost pass on a tiny checkpoint is watched through
  its adapter (``ghost_ops.layer_route``, called as the backward pass reaches each layer), and the
  PyTorch backend's own layer code (``_linear_uses`` / ``_embedding_uses``) is run at every shape
  it met and on a grid of shapes: a factored use is the gram route, a formed gradient the direct
  one;
* both routes give the same squared norms (each is exact).
"""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from grpo_theory import lm
from grpo_theory.lm.budget import ghost, ghost_ops
from grpo_theory.lm.budget import ghost_rule
from grpo_theory.torch import layers as torch_layers
from support.hf_checkpoint import EOS, write_checkpoint

PP = -1
GRID = list(itertools.product((1, 3, 12, 40, 130), (1, 8, 48, 300), (1, 16, 96),
                              (False, True)))


def test_counts_are_the_documented_formulas():
    t, di, do = 7, 11, 5
    c = ghost_rule.route_costs(t, di, do)
    assert c["gram"] == (t * t * (di + do + 1), 2 * t * t)
    assert c["direct"] == (t * di * do + di * do, di * do)
    assert c["activations"] == t * (di + do)
    e = ghost_rule.route_costs(t, di, do, one_hot=True)  # an embedding: ids, vocabulary di
    assert e["gram"] == (t * t * (1 + do + 1), 2 * t * t)
    assert e["direct"] == (t * do + di * do, di * do)
    assert e["activations"] == t * (1 + do)


@pytest.mark.parametrize("t,di,do,one_hot", GRID)
def test_rule_is_the_documented_criterion(t, di, do, one_hot):
    """Fewer multiply-adds; a route holding more than the activations only if the other holds
    more still (then the smaller)."""
    c = ghost_rule.route_costs(t, di, do, one_hot=one_hot)
    cheap = "gram" if c["gram"][0] <= c["direct"][0] else "direct"
    other = {"gram": "direct", "direct": "gram"}[cheap]
    fits = {k: c[k][1] <= c["activations"] for k in ("gram", "direct")}
    want = cheap if fits[cheap] else other if fits[other] else min(
        (cheap, other), key=lambda k: (c[k][1], k != cheap))
    got = ghost_rule.ghost_route(t, di, do, one_hot=one_hot)
    assert got == want
    # the choice depends on the shapes only: rows and dtype scale both sides
    assert ghost_rule.ghost_route(t, di, do, one_hot=one_hot, rows=5, dtype_bytes=8) == got
    # with an unbounded budget: the route with fewer multiply-adds
    assert ghost_rule.ghost_route(t, di, do, one_hot=one_hot, memory_budget=10**15) == cheap


def test_rule_at_chosen_shapes_and_under_a_budget():
    # few positions, wide layer: two 4 x 4 Grams beat a 896 x 896 matrix
    assert ghost_rule.ghost_route(4, 896, 896) == "gram"
    # many positions, narrow layer: the 8 x 8 matrix beats two 256 x 256 Grams
    assert ghost_rule.ghost_route(256, 8, 8) == "direct"
    # Qwen2.5-0.5B's embedding at 64 positions: the id mask and one Gram, not 151936 x 896
    assert ghost_rule.ghost_route(64, 151936, 896, one_hot=True) == "gram"
    # SmolLM2's embedding over a group of 800 positions: scattering the rows is cheaper
    # (800 x 576 + 49152 x 576 against 800^2 x 578 multiply-adds) but its 49152 x 576 matrix
    # holds far more than the activations; the two Grams hold less: gram, unless budgeted
    assert ghost_rule.ghost_route(800, 49152, 576, one_hot=True) == "gram"
    assert ghost_rule.ghost_route(800, 49152, 576, one_hot=True, memory_budget=2**40) == "direct"
    # gram is cheaper at (64, 4864, 896) but 8 rows of two 64 x 64 float32 Grams take 262144
    # bytes: a budget below that moves it to direct only if direct fits
    t, di, do = 64, 4864, 896
    assert ghost_rule.ghost_route(t, di, do) == "gram"
    gram_b, direct_b = 8 * 2 * t * t * 4, 8 * di * do * 4
    assert ghost_rule.ghost_route(t, di, do, rows=8, memory_budget=gram_b) == "gram"
    assert ghost_rule.ghost_route(t, di, do, rows=8, memory_budget=gram_b - 1) == "gram"  # neither
    small = (2, 3, 3)  # direct cheaper (2*3*3 + 9 = 27 < 4 * 7 = 28), both fit in 64 bytes
    assert ghost_rule.ghost_route(*small) == "direct"
    assert ghost_rule.ghost_route(*small, memory_budget=36) == "direct"
    assert ghost_rule.ghost_route(*small, memory_budget=35) == "gram"  # 9 values too many
    assert direct_b > gram_b
    for kw, name in [(dict(positions=0), "positions"), (dict(d_in=1.5), "d_in"),
                     (dict(d_out=True), "d_out"), (dict(rows=0), "rows"),
                     (dict(memory_budget=0), "memory_budget"), (dict(dtype_bytes=0),
                                                                "dtype_bytes")]:
        args = {**dict(positions=4, d_in=8, d_out=8), **kw}
        p, i, o = args.pop("positions"), args.pop("d_in"), args.pop("d_out")
        with pytest.raises(ValueError, match=name):
            ghost_rule.ghost_route(p, i, o, **args)


def _torch_route(t, di, do, one_hot, n=2):
    """The route the PyTorch backend's own layer code takes at these shapes."""
    g = torch.Generator().manual_seed(0)
    if one_hot:
        mod = torch.nn.Embedding(di, do)
        a = torch.randint(0, di, (n, t), generator=g)
        out = torch_layers._embedding_uses(mod, a, torch.randn(n, t, do, generator=g), n)
    else:
        mod = torch.nn.Linear(di, do, bias=False)
        out = torch_layers._linear_uses(mod, torch.randn(n, t, di, generator=g),
                                          torch.randn(n, t, do, generator=g), n)
    use = out[mod.weight]
    return "gram" if isinstance(use, torch_layers.Factored) else "direct"


@pytest.mark.parametrize("t,di,do,one_hot", GRID)
def test_both_backends_pick_the_same_route_on_a_grid(t, di, do, one_hot):
    jax_route = ghost_ops.layer_route("auto", t, di, do, one_hot=one_hot)
    assert jax_route == _torch_route(t, di, do, one_hot) == ghost_rule.ghost_route(
        t, di, do, one_hot=one_hot)
    assert ghost_ops.layer_route("gram", t, di, do, one_hot) == "gram"  # a forced route stays


@pytest.fixture(scope="module")
def pol(tmp_path_factory):
    path = tmp_path_factory.mktemp("rule_llama_tied")
    write_checkpoint(path, "llama", tied=True, bias=False, theta=100.0, seed=5, shards=1)
    return lm.from_pretrained(path)


def test_the_jax_pass_and_torch_agree_at_every_layer_it_meets(pol, monkeypatch):
    """Every shape the JAX ghost pass decides at (per sample and per group, the tied head,
    the embedding) gets the same route from the PyTorch backend's layer code."""
    seen = {}

    def watch(route, positions, d_in, d_out, one_hot=False, acc=jnp.float32):
        out = ghost_rule.ghost_route(positions, d_in, d_out, one_hot=one_hot) \
            if route == "auto" else route
        seen[(int(positions), int(d_in), int(d_out), bool(one_hot))] = out
        return out

    monkeypatch.setattr(ghost_ops, "layer_route", watch)
    ghost._ghost_jit.clear_cache()
    rng = np.random.default_rng(0)
    x, y = rng.integers(4, 40, size=(4, 5)), rng.integers(4, 40, size=(4, 6))
    x[0, :2] = PP
    y[1, 3] = EOS
    ghost.ghost_moments(pol.config, pol.params, x, y, rng.standard_normal(4), 2, chunk=4)
    ghost._ghost_jit.clear_cache()
    c = pol.config
    assert (11, c["vocab_size"], c["d_model"], True) in seen  # the embedding, per sample
    assert (22, c["vocab_size"], c["d_model"], True) in seen  # and per group of 2
    assert len({r for r in seen.values()}) == 2  # the tiny layers meet both routes
    for (t, di, do, one_hot), route in seen.items():
        assert _torch_route(t, di, do, one_hot) == route, (t, di, do, one_hot)


@pytest.mark.parametrize("one_hot", [False, True])
def test_both_jax_routes_give_the_same_norms(one_hot):
    rng = np.random.default_rng(1)
    n, t, di, do = 3, 5, 7, 4
    b = jnp.asarray(rng.standard_normal((n, t, do)))
    if one_hot:
        ids = jnp.asarray(rng.integers(0, 3, size=(n, t))).at[0, 0].set(-1)  # repeats
        b = b.at[0, 0].set(0.0)  # padding carries no gradient
        out = [ghost_ops.embedding_sq(b, ids, None, jnp.float32, r, di) for r in ("gram", "direct")]
    else:
        x = jnp.asarray(rng.standard_normal((n, t, di)))
        out = [ghost_ops._sq_linear(x, b, r, jnp.float32) for r in ("gram", "direct")]
    np.testing.assert_allclose(np.asarray(out[0]), np.asarray(out[1]), rtol=1e-5)
    assert np.all(np.asarray(out[0]) > 0)
