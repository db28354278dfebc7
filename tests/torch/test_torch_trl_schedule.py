"""GroupSizeAdvisor in TRL 1.16.0's schedules (gradient accumulation, steps_per_generation,
num_iterations) and logging window, in real tiny ``trl.GRPOTrainer`` runs on CPU.

TRL 1.16.0's conventions transcribed here (``trl/trainer/grpo_trainer.py``, ``_prepare_inputs``
and ``log``): micro-step s generates when ``s % (steps_per_generation * num_iterations) == 0``
and trains on chunk ``s % steps_per_generation`` of the shuffled generation batch; ``log``
averages each ``_metrics`` list over the logging window. Each estimate is checked against naive
per-sample autograd scores of the rows it pools, and against the rows the step trains on (the
inputs of ``compute_loss``)."""

import pytest
from support.tiny_trl import naive_scores, rows, tiny_trainer

import grpo_theory as gt
from grpo_theory.torch import GroupSizeAdvisor
from grpo_theory.torch.schedule import Schedule, estimated_steps

G = 3


def _run(tmp_path, every, **config):
    """Train with the advisor; return the trainer, the advisor and what was seen: the rows each
    step trained on, the generation batches of each step and, per estimate, its pooled rows
    and the naive estimate on them."""
    tr = tiny_trainer(tmp_path, **config)
    cb = GroupSizeAdvisor(tr, every=every)
    tr.add_callback(cb)
    seen = dict(trained={}, generated={}, naive=[])
    loss, gen, inner = tr.compute_loss, tr._generate_and_score_completions, cb._estimate

    def compute_loss(model, inputs, *a, **k):
        seen["trained"].setdefault(tr.state.global_step + 1, []).extend(rows(
            inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"],
            inputs["completion_mask"]))
        return loss(model, inputs, *a, **k)

    def generate(*a, **k):
        out = gen(*a, **k)
        seen["generated"].setdefault(tr.state.global_step + 1, []).append(out)
        return out

    def estimate(out, rewards):
        x, xm, y, ym = (out[k] for k in ("prompt_ids", "prompt_mask", "completion_ids",
                                         "completion_mask"))
        S = naive_scores(tr.accelerator.unwrap_model(tr.model), x, xm, y, ym)
        z = rewards.double().numpy().reshape(-1, G)
        ref = gt.estimate_from_rollouts(z, scores=S.reshape(z.shape[0], G, -1))
        seen["naive"].append((rows(x, xm, y, ym), ref, z, S))
        return inner(out, rewards)

    tr.compute_loss, tr._generate_and_score_completions, cb._estimate = \
        compute_loss, generate, estimate
    tr.train()
    return tr, cb, seen


def _assert_equal_estimate(rec, ref):
    for k in ("c1", "c2", "c3"):
        assert rec[k] == pytest.approx(getattr(ref, k), rel=1e-4, abs=1e-8)
    assert rec["g_star"] == pytest.approx(ref.g_star, rel=1e-4)


def _batch_rows(out):
    return rows(out["prompt_ids"], out["prompt_mask"], out["completion_ids"],
                out["completion_mask"])


def test_estimated_steps_of_each_schedule():
    # (every, gradient_accumulation_steps, steps_per_generation, num_iterations) -> steps in 8
    cases = {(1, 1, 1, 1): [1, 2, 3, 4, 5, 6, 7, 8], (3, 1, 1, 1): [1, 4, 7],
             (1, 2, 1, 1): [1, 2, 3, 4, 5, 6, 7, 8], (3, 2, 2, 1): [1, 4, 7],
             (1, 1, 2, 1): [1, 3, 5, 7], (3, 1, 2, 1): [1, 3, 7],
             (1, 1, 1, 2): [1, 3, 5, 7], (2, 1, 2, 2): [1, 5], (5, 1, 1, 2): [1, 5],
             (2, 4, 1, 2): [1, 3, 5, 7], (4, 1, 4, 1): [1, 5]}
    for (K, A, S, I), want in cases.items():
        assert estimated_steps(K, A, S, I, 8) == want, (K, A, S, I)
    # every due step 1, 1 + K, ... is fed by exactly one estimated generation batch
    for (K, A, S, I) in cases:
        F = Schedule(A, S, I, K).steps_fed
        got = estimated_steps(K, A, S, I, 40)
        for d in range(1, 41, K):
            assert sum(k <= d < k + F for k in got) == 1
    with pytest.raises(ValueError, match="steps_per_generation \\* num_iterations"):
        Schedule(2, 3, 1, 1)


def test_refuses_a_misaligned_schedule(tmp_path):
    tr = tiny_trainer(tmp_path, gradient_accumulation_steps=2, steps_per_generation=3)
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        GroupSizeAdvisor(tr, every=1)
