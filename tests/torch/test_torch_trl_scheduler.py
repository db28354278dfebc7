"""GroupSizeScheduler: the decision rule, the re-chunking sampler's layout, and real tiny
``trl.GRPOTrainer`` runs on CPU in which G changes (TRL 1.16.0)."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from support.tiny_trl import naive_scores, tiny_trainer

import grpo_theory as gt
from grpo_theory.torch import (GroupSizeAdvisor, GroupSizeScheduler, ReChunkingSampler,
                               allowed_group_sizes, propose_group_size)

#: 32 prompts: 4 generation batches of 8 prompts per epoch (2 steps of 2 under accumulation)
TEXTS32 = [" ".join(chr(97 + (7 * i + j) % 26) for j in range(1 + i % 3)) for i in range(32)]
TEXTS12 = ["a b", "c d e", "f", "g h", "i j k", "l", "m n", "o", "p q r", "s", "t u", "v w x"]


def test_allowed_group_sizes():
    assert allowed_group_sizes(24) == [3, 4, 6, 8]
    assert allowed_group_sizes(24, min_group_size=2, max_group_size=6) == [2, 3, 4, 6]
    assert allowed_group_sizes(64) == [4, 8, 16]
    with pytest.raises(ValueError, match="no group size fits a generation batch of 6 rows"):
        allowed_group_sizes(6)


def test_propose_group_size_moves_only_on_a_resolved_excluded_recommendation():
    allowed = [3, 4, 6, 8, 12, 16, 24]
    rec = dict(recommended_G=16.0, g_star_low=9.0, g_star_high=30.0)
    assert propose_group_size(4, rec, allowed) == 16
    assert propose_group_size(12, rec, allowed) == 12          # inside the G* interval
    # c1 not resolved above 0: no point estimate, the interval [low, inf) still excludes G < low
    unresolved = dict(recommended_G=math.nan, g_star_low=5.2, g_star_high=math.inf)
    assert propose_group_size(6, unresolved, allowed) == 6
    assert propose_group_size(4, unresolved, allowed) == 6
    assert propose_group_size(3, dict(unresolved, g_star_low=30.0), allowed) == 24
    assert propose_group_size(4, dict(unresolved, g_star_low=1.0), allowed) == 4
    assert propose_group_size(4, dict(rec, recommended_G=10.0), allowed) == 12  # nearest in log
    assert propose_group_size(4, dict(rec, recommended_G=10.0), [3, 4, 8]) == 8
    near = dict(recommended_G=4.8, g_star_low=4.5, g_star_high=5.5)
    assert propose_group_size(4, near, [3, 4, 5, 6]) == 5      # 5/4 = 1.25 reaches min_change
    assert propose_group_size(4, near, [3, 4, 5, 6], min_change=1.3) == 4  # hysteresis holds
    assert propose_group_size(24, dict(rec, g_star_high=12.0), allowed) == 16  # down too


def test_rechunking_sampler_layout_and_change_at_step_boundaries():
    s = ReChunkingSampler(12, rows=12, group_size=3, repeat_count=2, batches_per_step=2, seed=0)
    assert len(s) == (12 // 4) * 12 * 2
    it = iter(s)
    seen = []
    for b in range(3):
        idx = [next(it) for _ in range(24)]
        G = s.emitted[-1]
        first, second = idx[:12], idx[12:]
        assert first == second  # each generation batch repeated repeat_count times
        groups = np.asarray(first).reshape(12 // G, G)
        assert (groups == groups[:, :1]).all() and len(set(groups[:, 0])) == 12 // G
        seen.append((G, set(groups[:, 0])))
        if b == 0:
            s.request(4)  # batch 1 is inside a step (2 batches per step): waits for batch 2
    assert [G for G, _ in seen] == [3, 3, 4]
    assert len(seen[0][1] | seen[1][1]) == 8  # without replacement within a pass of the data
    with pytest.raises(ValueError, match="group_size 5 does not divide the generation batch"):
        s.request(5)



def test_rechunking_sampler_batches_hold_distinct_prompts_across_passes():
    # 10 prompts, B = 4: batches straddle passes of the data; a prompt never repeats inside a
    # batch (a plain running permutation would give {.., 7, 7, ..}), and over 5 batches
    # (20 draws = 2 passes) each prompt is drawn twice
    for seed in range(20):
        s = ReChunkingSampler(10, rows=12, group_size=3, seed=seed)
        idx = list(s)
        assert len(idx) == len(s) == 2 * 12
        prompts = [idx[i] for i in range(0, len(idx), 3)]
        for b in range(0, len(prompts), 4):
            assert len(set(prompts[b:b + 4])) == 4, (seed, prompts)
    with pytest.raises(ValueError, match="needs 12 distinct prompts"):
        ReChunkingSampler(10, rows=24, group_size=3).request(2)

def _forced(cb, at_step, recommended, low, high):
    """Wrap the advisor's estimate so the estimate of ``at_step`` recommends ``recommended``
    (a test device: the tiny model's c1 is not resolved, so it recommends nothing)."""
    inner, seen = cb._estimate, []

    def estimate(out, z):
        rec = inner(out, z)
        G = cb.group_size
        S = naive_scores(cb.trainer.accelerator.unwrap_model(cb.trainer.model),
                         out["prompt_ids"], out["prompt_mask"], out["completion_ids"],
                         out["completion_mask"])
        zz = z.double().numpy().reshape(-1, G)
        seen.append((G, gt.estimate_from_rollouts(zz, scores=S.reshape(zz.shape[0], G, -1))))
        if rec is not None and cb.trainer.state.global_step + 1 == at_step:
            rec.update(recommended_G=recommended, g_star_low=low, g_star_high=high)
        return rec

    cb._estimate = estimate
    return seen


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_real_run_changes_g_and_trl_follows_the_layout(tmp_path, accumulate):
    # 24 completions per generation batch: G in {3, 4, 6, 8}; start at G = 3 (8 prompts)
    config = dict(gradient_accumulation_steps=accumulate, steps_per_generation=1) \
        if accumulate > 1 else {}
    tr = tiny_trainer(tmp_path, prompts=8, num_generations=3, max_steps=4, texts=TEXTS32,
                      **config)
    cb = GroupSizeAdvisor(tr, every=1)
    tr.add_callback(cb)
    sch = GroupSizeScheduler(tr, cb)
    tr.add_callback(sch)
    seen = _forced(cb, at_step=1, recommended=8.0, low=6.0, high=11.0)
    gens, gen = [], tr._generate_and_score_completions

    def record(*a, **k):
        out = gen(*a, **k)
        gens.append((tr.state.global_step + 1, tr.num_generations, out))
        return out

    tr._generate_and_score_completions = record
    tr.train()
    assert sch.changes == [{"step": 1, "from": 3, "to": 8, "recommended_G": 8.0,
                            "g_star_low": 6.0, "g_star_high": 11.0}]
    per_step = {}
    for step, G, out in gens:
        per_step.setdefault(step, set()).add(G)
        x, xm = out["prompt_ids"], out["prompt_mask"]
        xs = (x * xm).reshape(-1, G, x.shape[1])
        assert out["completion_ids"].shape[0] == 24
        assert (xs == xs[:, :1]).all()  # G consecutive rows share a prompt
        prompts = {tuple(p[m.bool()].tolist()) for p, m in zip(x[::G], xm[::G])}
        assert len(prompts) == 24 // G  # B = N / G distinct prompts
    # decided at the end of step 1; the loader has drawn (the first of) step 2's batches
    # already (module docstring), so the change applies from step 3, never inside a step
    first = 3
    expect = [3 if s < first else 8 for s in (1, 2, 3, 4)]
    assert [per_step[s] for s in (1, 2, 3, 4)] == [{G} for G in expect], per_step
    hist = cb.history
    assert [h["group_size"] for h in hist] == expect
    assert [h["scheduler/num_generations"] for h in tr.state.log_history[:4]] == expect
    for h, (G, ref) in zip(hist, seen):
        assert h["group_size"] == G
        for k in ("c1", "c2", "c3"):
            assert h[k] == pytest.approx(getattr(ref, k), rel=1e-4, abs=1e-8)


def test_trl_advantages_follow_the_new_g(tmp_path):
    tr = tiny_trainer(tmp_path, prompts=8, num_generations=3, max_steps=3, texts=TEXTS12)
    cb = GroupSizeAdvisor(tr, every=1)
    tr.add_callback(cb)
    tr.add_callback(sch := GroupSizeScheduler(tr, cb))
    _forced(cb, at_step=1, recommended=6.0, low=4.5, high=9.0)
    gens, gen = [], tr._generate_and_score_completions

    def record(*a, **k):
        out = gen(*a, **k)
        gens.append((tr.num_generations, out, cb._rewards.clone()))
        return out

    tr._generate_and_score_completions = record
    tr.train()
    assert [G for G, _, _ in gens] == [3, 6, 6] and sch.changes[0]["to"] == 6
    rivals = 0
    for G, out, z in gens:
        zz = z.double().numpy().reshape(-1, G)
        adv = np.asarray(gt.compute_advantages(cb.preset, jnp.asarray(zz)))
        np.testing.assert_allclose(out["advantages"].double().numpy().reshape(-1, G), adv,
                                   rtol=1e-5, atol=1e-5)
        # the rival: the same rewards grouped by the old G give other advantages
        if G != 3 and np.ptp(zz) > 0:
            old = np.asarray(gt.compute_advantages(cb.preset, jnp.asarray(zz.reshape(-1, 3))))
            assert not np.allclose(old.reshape(-1), adv.reshape(-1), atol=1e-3)
            rivals += 1
    assert rivals > 0


def test_scheduler_refuses_bad_setups(tmp_path):
    tr = tiny_trainer(tmp_path, prompts=8, num_generations=3, texts=TEXTS12)
    cb = GroupSizeAdvisor(tr, every=1)
    with pytest.raises(ValueError, match="added first"):
        GroupSizeScheduler(tr, cb)
    tr.add_callback(cb)
    with pytest.raises(ValueError, match="min_change must be >= 1"):
        GroupSizeScheduler(tr, cb, min_change=0.5)
    with pytest.raises(ValueError, match="num_generations 3 is not among the allowed"):
        GroupSizeScheduler(tr, cb, min_group_size=4)
    with pytest.raises(ValueError, match="fewer than the 8 of one generation batch"):
        ReChunkingSampler(6, rows=24, group_size=3)
