"""GroupSizeAdvisor under torchrun: 2 CPU processes (gloo, DDP), real tiny ``trl.GRPOTrainer``
runs (``tests/support/ddp_grpo.py``).

What is checked: each process logs the same constants, and they equal the single-process
estimate from the rows of both processes (per-sample autograd scores at the parameters that
generated them, gathered in TRL 1.16.0's order: for each generation batch, process 0's rows then
process 1's), also when a group is split between the processes and when a step pools two
generation batches; the rival (process 0's own rows, what an ungathered callback sees) gives
other constants; training is unchanged by the callback; sharded runs are refused."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import grpo_theory as gt
from grpo_theory.torch.distributed import check_distributed, gather_rollouts, on_main

pytest.importorskip("trl")
SCENARIOS = ("whole", "plain", "split", "accum", "error")
G_OF = {"whole": 3, "split": 4, "accum": 4}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from support.torchrun import torchrun

    return torchrun("ddp_grpo.py", tmp_path_factory.mktemp("ddp"), SCENARIOS)


def _reference(runs, scenario, ranks=(0, 1), rank_major=False):
    """The single-process estimate from the step's rows of ``ranks``, in TRL's order (for
    each generation batch, the processes in order; ``rank_major``: the rival order, each
    process's batches pooled first)."""
    from support.ddp_grpo import model
    from support.tiny_trl import naive_scores

    policy = model()
    policy.load_state_dict(runs[scenario, 0]["state"])
    S, z = [], []
    pairs = [(b, r) for b in range(len(runs[scenario, 0]["batches"])) for r in ranks]
    for b, r in sorted(pairs, key=lambda p: p[::-1]) if rank_major else pairs:
        batch = runs[scenario, r]["batches"][b]
        S.append(naive_scores(policy, batch["prompt_ids"], batch["prompt_mask"],
                              batch["completion_ids"], batch["completion_mask"]))
        z.append(batch["rewards"].double().numpy())
    S, z = np.concatenate(S), np.concatenate(z)
    G = G_OF[scenario]
    return gt.estimate_from_rollouts(z.reshape(-1, G), scores=S.reshape(-1, G, S.shape[1]))


@pytest.mark.parametrize("scenario", ["whole", "split", "accum"])
def test_two_processes_log_the_single_process_estimate_of_all_rows(runs, scenario):
    h0, h1 = runs[scenario, 0]["history"], runs[scenario, 1]["history"]
    assert runs[scenario, 0]["num_processes"] == 2
    assert "MULTI_CPU" in runs[scenario, 0]["distributed_type"]
    assert len(h0) == 1 and h0[0]["step"] == 1
    np.testing.assert_equal(h0, h1)  # the same values on every process (NaN included)
    n_batches = {"whole": 1, "split": 1, "accum": 2}[scenario]
    assert len(runs[scenario, 0]["batches"]) == n_batches
    ref = _reference(runs, scenario)
    for k in ("c1", "c2", "c3"):
        assert h0[0][k] == pytest.approx(getattr(ref, k), rel=1e-4, abs=1e-6), k
    rows = sum(b["completion_ids"].shape[0] for r in (0, 1) for b in runs[scenario, r]["batches"])
    assert h0[0]["budget"] == rows  # completions per optimisation step, all processes
    # TRL's logged values are the estimate's, on both processes
    for r in (0, 1):
        logged = [e for e in runs[scenario, r]["log_history"] if "advisor/c1" in e]
        assert len(logged) == 1 and logged[0]["advisor/c1"] == pytest.approx(h0[0]["c1"])
    # the rivals: process 0's rows alone (an ungathered callback; not even whole groups when
    # a group is split), or each process's batches pooled before gathering
    rival = (_reference(runs, scenario, ranks=(0,)) if scenario == "whole" else
             _reference(runs, scenario, rank_major=True) if scenario == "accum" else None)
    if rival is not None:
        assert abs(rival.c2 - h0[0]["c2"]) > 1e-3 * abs(h0[0]["c2"])


def test_the_callback_leaves_ddp_training_unchanged(runs):
    for r in (0, 1):
        whole, plain = runs["whole", r]["final"], runs["plain", r]["final"]
        for k in plain:
            torch.testing.assert_close(whole[k], plain[k], rtol=0, atol=0)
    for k, v in runs["whole", 0]["final"].items():  # DDP kept the processes in step
        torch.testing.assert_close(v, runs["whole", 1]["final"][k], rtol=0, atol=0)


def test_an_error_on_the_main_process_is_raised_on_every_process(runs):
    for r in (0, 1):
        assert runs["error", r]["got"] == "raised division by zero"
        assert runs["error", r]["value"] == 41  # the main process's value, broadcast


@pytest.mark.parametrize("kind", ["FSDP", "DEEPSPEED", "MEGATRON_LM"])
def test_sharded_runs_are_refused(kind):
    with pytest.raises(ValueError, match=f"distributed_type {kind}.*use DDP"):
        check_distributed(SimpleNamespace(distributed_type=kind))


def test_one_process_passes_through():
    acc = SimpleNamespace(num_processes=1, distributed_type="NO")
    check_distributed(acc)
    t = tuple(torch.ones(2, k, dtype=torch.long) for k in (3, 3, 4, 4))
    assert gather_rollouts(acc, *t) is not None and all(
        a is b for a, b in zip(gather_rollouts(acc, *t), t))
    assert on_main(acc, lambda: 7) == 7
