"""RolloutAllocator under torchrun: 2 CPU processes (gloo, DDP), one real tiny
``trl.GRPOTrainer`` step per scenario (``tests/support/ddp_allocator.py``).

What is checked: the processes agree on the sizes and the gathered rewards (NaN exactly on the
masked rows, in TRL 1.16.0's order: process 0's rows, then process 1's); each process generates
and scores only its own real rows (none at all when it holds only masked rows); a group split
between the processes keeps its real rows on both; ``num_items_in_batch`` counts the real tokens
of both processes; and the gradient DDP trains (the mean of the processes' gradients, and the
norm TRL logs) is the stated estimator of the single-process tests over all real rows, from
per-sample autograd scores. The rival: each process normalising ``dapo`` by its own tokens."""

import numpy as np
import pytest
import torch

pytest.importorskip("trl")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from support.ddp_allocator import SCENARIOS
    from support.torchrun import torchrun

    return torchrun("ddp_allocator.py", tmp_path_factory.mktemp("ddp_allocator"), SCENARIOS)


def _real_rows(runs, scenario):
    """The step's real rows over both processes, in the batch's order: their per-sample scores
    at the parameters that generated them, rewards and lengths; and the global mask."""
    from support.ddp_allocator import SCENARIOS
    from support.tiny_trl import naive_scores, tiny_llama

    W, n, sizes, *_ = SCENARIOS[scenario]
    mask = np.array([j < g for g in sizes for j in range(W)])
    policy = tiny_llama()
    policy.load_state_dict(runs[scenario, 0]["state"])
    S, lengths, owner = [], [], []
    for r in (0, 1):
        out, keep = runs[scenario, r]["out"], mask[r * n:(r + 1) * n]
        x, xm, y, ym = (out[k][torch.from_numpy(keep)] for k in (
            "prompt_ids", "prompt_mask", "completion_ids", "completion_mask"))
        if keep.any():
            S.append(naive_scores(policy, x, xm, y, ym))
        lengths += ym.sum(1).tolist()
        owner += [r] * int(keep.sum())
    z = runs[scenario, 0]["rewards"][:, 0].double().numpy()[mask]
    return np.concatenate(S), z, np.array(lengths, float), np.array(owner), mask


@pytest.mark.parametrize("scenario", ["split", "prompt", "idle"])
def test_two_processes_train_the_stated_estimator_of_all_real_rows(runs, scenario):
    from support.ddp_allocator import SCENARIOS
    from support.tiny_trl import allocator_weights

    W, n, sizes, weighting, loss_type, scale = SCENARIOS[scenario]
    r0, r1 = runs[scenario, 0], runs[scenario, 1]
    assert r0["num_processes"] == 2 and "MULTI_CPU" in r0["distributed_type"]
    assert r0["history"] == r1["history"] and r0["history"][0]["sizes"] == sizes
    torch.testing.assert_close(r0["rewards"], r1["rewards"], equal_nan=True, rtol=0, atol=0)
    S, z, lengths, owner, mask = _real_rows(runs, scenario)
    assert (np.isnan(r0["rewards"][:, 0].numpy()) == ~mask).all()
    for r, rec in ((0, r0), (1, r1)):  # each process generates and scores its real rows only
        real = int(mask[r * n:(r + 1) * n].sum())
        assert sum(rec["generated"]) == real and sum(rec["scored"]) == real
        keep = torch.from_numpy(mask[r * n:(r + 1) * n])
        assert (rec["out"]["completion_mask"][~keep] == 0).all()
        assert (rec["out"]["advantages"][~keep] == 0).all()
        assert int(rec["out"]["num_items_in_batch"]) == lengths.sum()  # both processes' tokens
    if scenario == "idle":
        assert r1["generated"] == [] and r1["scored"] == []
    assert not np.all(z == z[0])  # the rewards are mixed: the gradient is not zero
    w = allocator_weights(z, sizes, lengths, weighting, loss_type, scale,
                          r0["max_completion_length"], B=len(sizes))
    ref = -(w[:, None] * S).sum(0)
    got = ((r0["grad"] + r1["grad"]) / 2).numpy()  # what DDP's all-reduce trains
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6 * np.abs(ref).max())
    logged = [e["grad_norm"] for e in r0["log_history"] if "grad_norm" in e]
    assert logged[0] == pytest.approx(np.linalg.norm(ref), rel=1e-4)
    if scenario == "split":
        # the rival: num_items_in_batch left at each process's own tokens
        T = np.array([lengths[owner == r].sum() for r in (0, 1)])
        rival = -sum((w[owner == r, None] * lengths.sum() / T[r] * S[owner == r]).sum(0)
                     for r in (0, 1)) / 2
        assert not np.allclose(rival, ref, rtol=1e-3, atol=1e-6 * np.abs(ref).max())


def test_the_split_group_has_real_rows_on_both_processes(runs):
    from support.ddp_allocator import SCENARIOS

    W, n, sizes, *_ = SCENARIOS["split"]
    mask = np.array([j < g for g in sizes for j in range(W)])
    rows = np.arange(mask.size)
    second = (rows // W == 1) & mask
    assert (rows[second] < n).any() and (rows[second] >= n).any()
    z = runs["split", 0]["rewards"][:, 0].numpy()[second]
    assert len(set(z.tolist())) > 1  # the split group's rewards differ: its advantage matters
