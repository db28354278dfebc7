"""RolloutAllocator: per-prompt group sizes in real tiny ``trl.GRPOTrainer`` runs on CPU (TRL
1.16.0): only the real rows are generated and scored, TRL's advantages are those of each group's
real rows, and the gradient TRL trains is the stated estimator for every loss and weighting."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from support.tiny_trl import allocator_weights, naive_scores, tiny_trainer

from grpo_theory.allocation import pass_rate_allocation
from grpo_theory.torch import (FunctionSizes, GroupSizeAdvisor, PassRateSizes, RolloutAllocator,
                               SizeRule, UniformSizes)

TEXTS8 = ["a b", "c d e", "f", "g h", "i j k", "l", "m n", "o p q"]
W, B = 4, 4  # the layout: 4 prompts x 4 rows per generation batch
SIZES = [2, 4, 3, 2]


def _recording_reward():
    calls = []

    def reward(completions, **kw):
        out = [float(len(c[0]["content"]) % 2) for c in completions]
        calls.append(out)
        return out

    return reward, calls


def _trainer(tmp_path, reward=None, **config):
    tr = tiny_trainer(tmp_path, prompts=B, num_generations=W, texts=TEXTS8, **config)
    if reward is not None:
        tr.reward_funcs = [reward]
        tr.reward_func_names = ["reward"]
    return tr


def _spy_generation(tr):
    """Record the rows each generation call receives (installed before the allocator)."""
    rows, single = [], tr._generate_single_turn

    def spy(prompt_ids, *a, **k):
        rows.append(len(prompt_ids))
        return single(prompt_ids, *a, **k)

    tr._generate_single_turn = spy
    return rows


def _capture(tr):
    outs, gen = [], tr._generate_and_score_completions

    def record(inputs, *a, **k):
        out = gen(inputs, *a, **k)
        outs.append((inputs, {k: (v.clone() if torch.is_tensor(v) else v)
                              for k, v in out.items()}))
        return out

    tr._generate_and_score_completions = record
    return outs


def _params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_uniform_sizes_at_the_full_budget_train_exactly_as_trl(tmp_path):
    plain = _trainer(tmp_path / "a", max_steps=2)
    plain.train()
    tr = _trainer(tmp_path / "b", max_steps=2)
    tr.add_callback(al := RolloutAllocator(tr, UniformSizes(), budget=B * W))
    tr.train()
    assert [h["sizes"] for h in al.history] == [[W] * B] * 2
    assert torch.equal(_params(plain.model), _params(tr.model))


def test_only_real_rows_are_generated_and_scored_and_advantages_are_each_groups(tmp_path):
    reward, calls = _recording_reward()
    tr = _trainer(tmp_path, reward=reward, max_steps=2, loss_type="dapo")
    generated = _spy_generation(tr)
    tr.add_callback(al := RolloutAllocator(tr, FunctionSizes(lambda *a: SIZES), budget=12))
    outs = _capture(tr)
    tr.train()
    assert generated == [sum(SIZES)] * 2 and [len(c) for c in calls] == [sum(SIZES)] * 2
    assert [h["rollouts"] for h in al.history] == [11, 11]
    assert [h["allocation/rollouts"] for h in tr.state.log_history[:2]] == [11.0, 11.0]
    rivals = 0
    for (inputs, out), z, h in zip(outs, calls, al.history):
        keep = np.array([j < g for g in SIZES for j in range(W)])
        cm = out["completion_mask"].numpy()
        assert (cm[~keep] == 0).all() and (cm[keep].sum(1) > 0).all()
        assert int(out["num_items_in_batch"]) == cm.sum()
        adv = out["advantages"].double().numpy()
        assert (adv[~keep] == 0).all()
        zs = np.split(np.asarray(z), np.cumsum(SIZES)[:-1])
        assert h["prompt_mean_reward"] == pytest.approx(np.mean([zi.mean() for zi in zs]))
        for i, zi in enumerate(zs):  # TRL's group advantage over the group's real rows
            ref = (zi - zi.mean()) / (zi.std(ddof=1) + 1e-4)
            np.testing.assert_allclose(adv[i * W:i * W + SIZES[i]], ref, rtol=1e-5, atol=1e-5)
            # the rival: masked rows scored (an empty completion has reward 0) join the baseline
            padded = np.concatenate([zi, np.zeros(W - SIZES[i])])
            rival = ((padded - padded.mean()) / (padded.std(ddof=1) + 1e-4))[:SIZES[i]]
            rivals += not np.allclose(rival, ref, atol=1e-3)
    assert rivals > 0


def _one_step(tmp_path, sizes, weighting, loss_type, scale, **config):
    """One step at learning rate 0 (the model stays at the parameters that generated): the
    gradient TRL's loss gives over the step's micro-batches, and the stated estimator's
    ``-sum_r w_r S_r`` from per-sample autograd scores of the real rows."""
    reward, calls = _recording_reward()
    tr = _trainer(tmp_path, reward=reward, max_steps=1, loss_type=loss_type, scale_rewards=scale,
                  learning_rate=0.0, **config)
    tr.add_callback(RolloutAllocator(tr, FunctionSizes(lambda *a: sizes), budget=sum(sizes),
                                     weighting=weighting))
    outs = _capture(tr)
    tr.train()
    (_, out), = outs
    model = tr.model
    model.train()
    model.zero_grad()
    for chunk in tr._buffered_inputs:
        tr.compute_loss(model, chunk).backward()
    params = [p for p in model.parameters() if p.requires_grad]
    got = torch.cat([p.grad.reshape(-1) for p in params]).double().numpy()
    keep = np.array([j < g for g in sizes for j in range(W)])
    x, xm, y, ym = (out[k][keep] for k in ("prompt_ids", "prompt_mask", "completion_ids",
                                           "completion_mask"))
    S = naive_scores(model, x, xm, y, ym)
    lengths = ym.sum(1).numpy()
    w = allocator_weights(calls[0], sizes, lengths, weighting, loss_type, scale,
                          tr.max_completion_length, B=len(sizes))
    ref = -(w[:, None] * S).sum(0)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6 * np.abs(ref).max())
    return tr, out["advantages"].double().numpy()[keep], S, lengths, ref


@pytest.mark.parametrize("weighting, loss_type, scale", [
    ("trl", "grpo", "group"), ("trl", "dapo", "group"), ("trl", "bnpo", "group"),
    ("trl", "dr_grpo", "none"),
    ("prompt", "dr_grpo", "none"), ("prompt", "grpo", "none")])
def test_the_gradient_trl_trains_is_the_stated_estimator(tmp_path, weighting, loss_type, scale):
    tr, A, S, lengths, ref = _one_step(tmp_path, SIZES, weighting, loss_type, scale)
    # the rival: TRL's advantages over the padded layout without the allocator's weights
    factor = {"prompt": W / (np.repeat(SIZES, SIZES) - 1)}.get(
        weighting, B * W / sum(SIZES) if loss_type in ("grpo", "dr_grpo") else 1.0)
    if np.ndim(factor) or factor != 1.0:
        denom = {"grpo": B * W * lengths, "dr_grpo": B * W * tr.max_completion_length
                 * np.ones_like(lengths)}[loss_type]
        rival = -((A / factor / denom)[:, None] * S).sum(0)
        assert not np.allclose(rival, ref, rtol=1e-3, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("weighting, loss_type, scale", [
    ("trl", "grpo", "group"), ("trl", "dapo", "group"), ("prompt", "dr_grpo", "none")])
def test_under_accumulation_the_step_gradient_is_the_estimator(tmp_path, weighting, loss_type,
                                                               scale):
    # 2 micro-batches of 16 rows per step (steps_per_generation = 2): one generation batch of
    # 8 prompts, shuffled into the 2 micro-batches with its masked rows
    tr, *_ = _one_step(tmp_path, SIZES + [4, 2, 2, 3], weighting, loss_type, scale,
                       gradient_accumulation_steps=2)
    assert len(tr._buffered_inputs) == 2 and tr.current_gradient_accumulation_steps == 2


def test_pass_rate_sizes_decide_from_earlier_batches_only(tmp_path):
    reward, calls = _recording_reward()
    tr = _trainer(tmp_path, reward=reward, max_steps=4, loss_type="dr_grpo",
                  scale_rewards="none")
    rule = PassRateSizes("knapsack", prior=0.5)
    tr.add_callback(al := RolloutAllocator(tr, rule, budget=12, weighting="prompt"))
    outs = _capture(tr)
    tr.train()
    replay = PassRateSizes("knapsack", prior=0.5)  # fed the reward function's own outputs
    seen = set()
    for (inputs, _), z, h in zip(outs, calls, al.history):
        prompts = [inputs[i * W] for i in range(B)]
        expect = list(pass_rate_allocation(np.array([replay.pass_rate(p) for p in prompts]),
                                           12, method="knapsack", min_size=2,
                                           max_size=W).sizes)
        assert h["sizes"] == expect and sum(expect) == 12
        zs = np.split(np.asarray(z), np.cumsum(expect)[:-1])
        replay.observe(prompts, expect, zs)
        seen.update(p["prompt"][0]["content"] for p in prompts)
    assert al.history[0]["sizes"] == [3, 3, 3, 3]  # unseen prompts: all at the prior
    assert len(seen) == 8 and any(len(set(h["sizes"])) > 1 for h in al.history)
    assert rule.counts == replay.counts


def test_size_rules():
    assert UniformSizes().sizes([{}] * 4, 10, 4, 2) == [3, 3, 2, 2]
    rule = PassRateSizes("vip", prior=0.3, prior_weight=2.0)
    rule.observe([{"prompt": "a"}], [3], [np.array([1.0, np.nan, 0.0])])
    assert rule.pass_rate({"prompt": "a"}) == pytest.approx((1 + 0.6) / (2 + 2))
    with pytest.raises(ValueError, match=r"needs rewards in \[0, 1\]"):
        rule.observe([{"prompt": "a"}], [2], [np.array([2.0, 0.0])])
    with pytest.raises(ValueError, match="method must be"):
        PassRateSizes("thompson")
    with pytest.raises(ValueError, match="prior must be a pass rate"):
        PassRateSizes(prior=1.5)
    with pytest.raises(NotImplementedError):
        SizeRule().sizes([{}], 2, 2, 2)


def test_allocator_refuses_what_it_cannot_weight(tmp_path):
    tr = _trainer(tmp_path)
    rule = UniformSizes()
    with pytest.raises(ValueError, match="rule must be a SizeRule"):
        RolloutAllocator(tr, lambda *a: SIZES, budget=12)
    with pytest.raises(ValueError, match="weighting must be 'trl' or 'prompt'"):
        RolloutAllocator(tr, rule, budget=12, weighting="tokens")
    with pytest.raises(ValueError, match=r"budget must lie in \[8, 16\]"):
        RolloutAllocator(tr, rule, budget=7)
    with pytest.raises(ValueError, match="min_size 5 exceeds num_generations 4"):
        RolloutAllocator(tr, rule, budget=12, min_size=5)
    with pytest.raises(ValueError, match="needs scale_rewards='none'"):
        RolloutAllocator(tr, rule, budget=12, weighting="prompt")
    with pytest.raises(ValueError, match="needs loss_type in"):
        RolloutAllocator(_trainer(tmp_path, scale_rewards="none"), rule, budget=12,
                         weighting="prompt")
    kl = _trainer(tmp_path)
    kl.beta = 0.1  # (a real beta > 0 would load a reference model)
    with pytest.raises(ValueError, match="needs beta=0"):
        RolloutAllocator(kl, rule, budget=12)
    with pytest.raises(ValueError, match=r"needs loss_type in .* \(got 'sapo'\)"):
        RolloutAllocator(_trainer(tmp_path, loss_type="sapo"), rule, budget=12)
    sharded = _trainer(tmp_path)
    sharded.accelerator = SimpleNamespace(distributed_type="FSDP", num_processes=2,
                                          process_index=0)
    with pytest.raises(ValueError, match="RolloutAllocator does not support .* FSDP .*use DDP"):
        RolloutAllocator(sharded, rule, budget=12)
    tr.add_callback(GroupSizeAdvisor(tr, every=1))
    with pytest.raises(ValueError, match="cannot run beside GroupSizeAdvisor"):
        RolloutAllocator(tr, rule, budget=12)


def test_a_rule_returning_bad_sizes_stops_training_with_its_name(tmp_path):
    tr = _trainer(tmp_path, max_steps=1)
    tr.add_callback(RolloutAllocator(tr, FunctionSizes(lambda *a: [4, 4, 4, 1]), budget=13))
    with pytest.raises(ValueError, match=r"FunctionSizes.sizes returned \[4, 4, 4, 1\]"):
        tr.train()


def test_the_prompt_weighting_is_unbiased_and_trls_is_not_exactly():
    # the two weightings on a two-prompt bandit at sizes (2, 4), exactly (allocation.audit):
    # "prompt" is leave-one-out over each group's own size (normaliser "group"); "trl" with a
    # token loss is the mean-centred advantage over the batch's responses ("token")
    from grpo_theory import SoftmaxBandit, allocation

    bandit = SoftmaxBandit(np.log([[0.2, 0.5, 0.3], [0.7, 0.2, 0.1]]),
                           [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    sizes = allocation.per_prompt((2, 4))
    prompt = allocation.audit(bandit, sizes, "grpo", normaliser="group")
    trl = allocation.audit(bandit, sizes, "grpo_mean", normaliser="token")
    assert prompt.bias_norm < 1e-12 and np.allclose(prompt.prompt_weights, [0.5, 0.5])
    assert trl.relative_bias == pytest.approx(0.402, abs=1e-3)
    assert trl.cosine == pytest.approx(0.921, abs=1e-3)  # not only a scale: the direction moves
    # at equal sizes TRL's weighting is only the scale (G - 1) / G
    equal = allocation.audit(bandit, allocation.fixed(4), "grpo_mean", normaliser="token")
    assert equal.relative_bias == pytest.approx(0.25) and equal.cosine == pytest.approx(1.0)


def test_allocation_rules_decided_before_sampling_reach_the_allocator(tmp_path):
    """One rule value for the exact audit, the JAX loops and TRL: a pass-rate rule gives
    PassRateSizes' sizes, fixed(G) G each; a rule decided from its own samples is refused by
    name (rival: accepting DAPO's filter would need rewards TRL has not generated yet)."""
    from grpo_theory import allocation as A
    from grpo_theory.torch import RuleSizes

    prompts = [{"prompt": t} for t in "abcd"]
    rule, ref = RuleSizes(A.pass_rate_rule("sgpo")), PassRateSizes("sgpo")
    for r in (rule, ref):
        r.observe(prompts[:2], [4, 4], [np.array([1.0, 1.0, 0.0, 1.0]), np.zeros(4)])
    assert rule.sizes(prompts, 12, 4, 2) == ref.sizes(prompts, 12, 4, 2)
    assert rule.sizes(prompts, 12, 4, 2) != UniformSizes().sizes(prompts, 12, 4, 2)
    assert RuleSizes(A.fixed(3)).sizes(prompts, 12, 4, 2) == [3, 3, 3, 3]
    with pytest.raises(ValueError, match="G = 5 must lie in"):
        RuleSizes(A.fixed(5)).sizes(prompts, 20, 4, 2)
    for riv in (A.dynamic_sampling(4, 3), A.conformal_stopping((2, 4))):
        with pytest.raises(ValueError, match="decides from the rewards it samples.*make_train"):
            RuleSizes(riv)
    tr = _trainer(tmp_path)
    with pytest.raises(ValueError, match="decides from the rewards it samples"):
        RolloutAllocator(tr, A.dynamic_sampling(4, 3), budget=12)
    al = RolloutAllocator(tr, A.pass_rate_rule("knapsack"), budget=12)
    assert isinstance(al.rule, RuleSizes) and al.rule.rule == A.pass_rate_rule("knapsack")
