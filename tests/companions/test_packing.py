"""Dense prompt packing: invariants (hypothesis), reference packer, exact loss equivalence."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from grpo_theory.companions import packing as pk


def reference_pack(lengths, capacity, window):
    """Independent, literal implementation of the documented algorithm (slow, for tests)."""
    stream = list(range(len(lengths)))
    rows = []
    while stream:
        row, free = [], capacity
        while True:
            win = stream[:window]
            fitting = [i for i in win if lengths[i] <= free]
            if not fitting:
                break
            best = max(fitting, key=lambda i: (lengths[i], -win.index(i)))
            stream.remove(best)
            row.append(best)
            free -= lengths[best]
        rows.append(row)
    return rows


@st.composite
def packing_case(draw):
    capacity = draw(st.integers(1, 64))
    lengths = draw(st.lists(st.integers(1, capacity), min_size=1, max_size=60))
    window = draw(st.integers(1, 70))
    return lengths, capacity, window


@given(packing_case())
def test_packing_invariants(case):
    lengths, capacity, window = case
    p = pk.pack(lengths, capacity, window)
    L = np.asarray(lengths)
    # rows never exceed capacity; sequences never overlap and are contiguous
    assert p.row_fill().max() <= capacity
    ids = np.arange(L.sum())
    seqs = np.split(ids, np.cumsum(L)[:-1])
    rows = pk.pack_tokens(seqs, p, pad_id=-1)
    real = rows[rows >= 0]
    np.testing.assert_array_equal(np.sort(real), ids)  # every token exactly once
    back = pk.unpack_tokens(rows, p)
    assert all(np.array_equal(a, b) for a, b in zip(seqs, back))
    # segment ids and positions describe the sequences exactly
    seg, pos = p.segment_ids(), p.positions()
    assert np.array_equal(seg > 0, rows >= 0)
    for i in range(L.size):
        r, o = p.row[i], p.offset[i]
        np.testing.assert_array_equal(pos[r, o:o + L[i]], np.arange(L[i]))
        assert len(set(seg[r, o:o + L[i]])) == 1
    # density: never below naive padding, rows never below the volume bound
    assert p.density >= pk.naive_density(L, capacity) - 1e-15
    assert pk.row_lower_bound(L, capacity) <= p.n_rows <= L.size
    # the same rows as the literal reference implementation
    ref = reference_pack(list(L), capacity, window)
    got = [list(np.flatnonzero(p.row == r)[np.argsort(p.offset[p.row == r])])
           for r in range(p.n_rows)]
    assert got == ref


def first_fit_decreasing(lengths, capacity):
    bins = []  # (free, items)
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for b in bins:
            if lengths[i] <= b[0]:
                b[0] -= lengths[i]
                b[1].append(i)
                break
        else:
            bins.append([capacity - lengths[i], [i]])
    return [b[1] for b in bins]


@given(st.lists(st.integers(1, 50), min_size=1, max_size=40), st.integers(0, 30))
def test_full_window_on_descending_input_is_first_fit_decreasing(lengths, extra):
    # filling one row at a time with the longest remaining sequence that fits, over a
    # descending list, puts into each row exactly the items first-fit-decreasing puts there
    L = sorted(lengths, reverse=True)
    p = pk.pack(L, 50, len(L) + extra)
    got = [sorted(np.flatnonzero(p.row == r).tolist()) for r in range(p.n_rows)]
    assert got == [sorted(b) for b in first_fit_decreasing(L, 50)]


def test_small_example_by_hand():
    p = pk.pack([5, 3, 4, 2, 6], capacity=8, window=3)
    # row 0: window {5,3,4} -> 5, then {3,4,2} fits 3 -> 3 (free 0); row 1: {4,2,6} -> 6, then 2
    # row 2: 4
    assert p.n_rows == 3
    np.testing.assert_array_equal(p.row, [0, 0, 2, 1, 1])
    np.testing.assert_array_equal(p.offset, [0, 5, 0, 6, 0])
    assert p.density == pytest.approx(20 / 24)
    np.testing.assert_array_equal(p.segment_ids()[1], [1, 1, 1, 1, 1, 1, 2, 2])
    np.testing.assert_array_equal(p.positions()[1], [0, 1, 2, 3, 4, 5, 0, 1])
    nf = pk.pack([5, 3, 4, 2, 6], 8, 1)  # next-fit in arrival order: [5,3] [4,2] [6]
    np.testing.assert_array_equal(nf.row, [0, 0, 1, 1, 2])
    assert pk.pack([6, 5, 2, 3], 8, 1).n_rows == 3 and pk.pack([6, 5, 2, 3], 8, 4).n_rows == 2


@pytest.mark.parametrize("args,match", [
    (([3, 9], 8, 2), "sequence 1 has length 9 > capacity=8"),
    (([], 8, 2), "non-empty"),
    (([3, 0], 8, 2), "lengths must be >= 1"),
    (([3, -1], 8, 2), "lengths must be >= 1"),
    (([3, 2.5], 8, 2), "integers"),
    (([3], 0, 2), "capacity"),
    (([3], -4, 2), "capacity"),
    (([3], 8, 0), "window"),
    (([3], 8, -1), "window"),
    (([3], 8, 1.5), "window"),
    (([[3, 2]], 8, 1), "1-d"),
])
def test_bad_input_raises_clear_value_error(args, match):
    with pytest.raises(ValueError, match=match):
        pk.pack(*args)


def _lm_case(seed=5, n=12, capacity=32, vocab=7):  # the driver's shapes: one compilation
    k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(seed), 4)
    L = np.asarray(jax.random.randint(k1, (n,), 1, capacity + 1))
    toks = np.asarray(jax.random.randint(k2, (int(L.sum()),), 0, vocab))
    seqs = np.split(toks, np.cumsum(L)[:-1])
    adv = np.asarray(jax.random.normal(k3, (n,)))
    return L, seqs, adv, pk.init_toy_lm(k4, vocab, capacity)


def _loss_and_grad(params, seqs, adv, L, p, n_rows, segment_mask=True):
    pad = n_rows - p.n_rows
    t = np.pad(pk.pack_tokens(seqs, p), ((0, pad), (0, 0)))
    seg = np.pad(p.segment_ids(), ((0, pad), (0, 0)))
    pos = np.pad(p.positions(), ((0, pad), (0, 0)))
    w = np.pad(pk.per_sequence_to_tokens(adv / L, p), ((0, pad), (0, 0)))
    if not segment_mask:  # the bug packing must avoid: one causal stream per row
        seg = (np.arange(p.capacity)[None, :] < p.row_fill()[:, None]).astype(int)
        seg = np.pad(seg, ((0, pad), (0, 0)))
        pos = np.where(seg > 0, np.arange(p.capacity)[None, :], 0)
    return _LOSS_GRAD(params, jnp.asarray(t), jnp.asarray(seg), jnp.asarray(pos), jnp.asarray(w))


_LOSS_GRAD = pk.toy_lm_value_and_grad


def test_packed_and_unpacked_loss_and_gradients_are_identical():
    L, seqs, adv, params = _lm_case()
    ref_loss, ref_grad = _loss_and_grad(params, seqs, adv, L, pk.naive_batching(L, 32), L.size)
    assert abs(float(ref_loss)) > 1e-3
    for w in (1, 3, L.size):
        p = pk.pack(L, 32, w)
        assert p.n_rows < L.size  # something was actually packed
        loss, grad = _loss_and_grad(params, seqs, adv, L, p, L.size)
        assert float(loss) == pytest.approx(float(ref_loss), rel=1e-12, abs=0)
        for k in grad:
            np.testing.assert_allclose(grad[k], ref_grad[k], rtol=0,
                                       atol=1e-12 * float(jnp.max(jnp.abs(ref_grad[k]))) + 1e-300)
    # negative control: without segment masking the packed loss is different
    bad, _ = _loss_and_grad(params, seqs, adv, L, pk.pack(L, 32, L.size), L.size,
                            segment_mask=False)
    assert abs(float(bad) - float(ref_loss)) > 1e-6


def test_attention_never_crosses_sequences():
    seg = jnp.array([[1, 1, 2, 2, 0]])
    pos = jnp.array([[0, 1, 0, 1, 0]])
    v = jnp.eye(5)[None]  # value of key k = e_k: the output row shows the attention weights
    q = jnp.zeros((1, 5, 3))
    out = pk.segment_causal_attention(q, q, v, seg, pos)[0]
    np.testing.assert_allclose(out[1], [0.5, 0.5, 0, 0, 0])
    np.testing.assert_allclose(out[2], [0, 0, 1, 0, 0])
    np.testing.assert_allclose(out[3], [0, 0, 0.5, 0.5, 0])
    np.testing.assert_allclose(out[4], [0, 0, 0, 0, 1])  # padding sees only padding


def test_driver_quick_setting_passes(tmp_path):
    from grpo_theory.experiments.runner import run_experiment
    from grpo_theory.studies import prompt_packing as drv

    res = run_experiment(drv.EXPERIMENT, tmp_path, "quick", seed=0, progress=False)
    assert res.tables.complete and set(res.tables) == {"density", "equivalence"}
    c = drv.summary(res.tables)
    assert c["eq_loss"] <= drv.EQ_TOL and c["eq_grad"] <= drv.EQ_TOL
    assert c["token_once"] and c["max_fill"] <= c["capacity"]
    assert c["min_gain"] > 0.1 and c["rows_vs_bound"] >= 0
    t = drv.summary_table(res.tables["density"])
    for dist, d in t.groupby("dist"):
        d = d.sort_values("window")
        # a window of 64 packs within 5% of the volume bound and far above naive padding
        w64 = d[d.window == 64].iloc[0]
        assert w64.rows <= 1.05 * w64.lower_bound, dist
        assert w64.density > 1.5 * w64.naive, dist
        assert d.density.iloc[-1] > d.density.iloc[0], dist  # look-ahead helps
    assert res.verdict == "PASS", res.section.checks_markdown()
    assert (tmp_path / drv.NAME / "packing_density.png").exists()
    # a row over capacity or a packed loss that differs makes the verdict FAIL
    bad = dict(res.tables)
    bad["density"] = res.tables["density"].assign(max_fill=drv.CAPACITY + 1)
    assert drv.report(bad, drv.SETTINGS["quick"]).verdict == "FAIL"
    bad = dict(res.tables)
    bad["equivalence"] = res.tables["equivalence"].assign(loss_rel_diff=1e-9)
    assert drv.report(bad, drv.SETTINGS["quick"]).verdict == "FAIL"
