"""The advisor for PyTorch / transformers models and the TRL GRPOTrainer callback (grpo_theory.torch).

Tiny random Llama and Qwen2 causal LMs (hidden 16, 1-2 layers, vocab 47) built here; the
statistics computed with ghost norms are compared with the naive per-sample scores (one sample at
a time, unpadded, ``torch.autograd.grad``) and with the package's JAX route on the same weights
saved as a Hugging Face folder. A 2-step ``trl.GRPOTrainer`` run with a tiny WordLevel tokenizer
checks the callback against a standalone estimate on the same rollouts, and TRL 1.16.0's own
conventions (scale_rewards -> preset, its advantages on the batch) against the package's.
"""

import copy
import json
import re
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

import grpo_theory as gt
from grpo_theory import lm
from grpo_theory.lm.checkpoints.hf import PROMPT_PAD
from grpo_theory.torch import (GroupSizeAdvisor, estimate_from_torch_model,
                               estimate_from_torch_rollouts, score_statistics, trl_preset,
                               trl_sequence_weighting)
from grpo_theory.torch import estimate as torch_estimate
from grpo_theory.torch import ghost as torch_ghost
from support.torch_rollouts import VOCAB as SUPPORT_VOCAB, naive_scores, rollouts, tiny_model
from grpo_theory.torch import layers as torch_layers

PAD, EOS = 1, 2
SPECIAL = ["<unk>", "<pad>", "<eos>", "<bos>"]
WORDS = ([chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
         + ["user", "assistant", ":", "system"])
VOCAB = len(SPECIAL) + len(WORDS)  # 44
assert VOCAB == SUPPORT_VOCAB
CHAT = ("{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant : {% endif %}")


_model, _rollouts, _naive_scores = tiny_model, rollouts, naive_scores


def _assert_same_estimate(a, b, rtol):
    np.testing.assert_allclose(a.theta, b.theta, rtol=rtol, atol=rtol * np.max(np.abs(b.theta)))
    np.testing.assert_allclose(a.cov, b.cov, rtol=rtol, atol=rtol * np.max(np.abs(b.cov)))
    assert a.g_star == pytest.approx(b.g_star, rel=rtol)
    assert a.recommended_group_size(64) == b.recommended_group_size(64)


def _tokenizer():
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(SPECIAL + WORDS)},
                                     unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIAL)
    return tok


def _hf_tokenizer():
    t = PreTrainedTokenizerFast(tokenizer_object=_tokenizer(), unk_token="<unk>",
                                pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")
    t.chat_template = CHAT
    return t


# --- the package around torch -------------------------------------------------------------------

def test_import_grpo_theory_does_not_import_torch():
    code = ("import grpo_theory, grpo_theory.advisor, grpo_theory.lm, sys; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_subpackage_does_not_shadow_torch():
    import grpo_theory.torch as gtt

    assert torch_estimate.torch is sys.modules["torch"] is torch
    assert torch.__name__ == "torch" and gtt.__name__ == "grpo_theory.torch"
    assert "grpo_theory" not in torch.__file__ and hasattr(torch, "autograd")


# --- the estimate equals the naive per-sample route ---------------------------------------------

@pytest.mark.parametrize("kind,tied,store,formed", [("llama", True, True, True),
                                                    ("llama", True, None, False),
                                                    ("qwen2", False, False, True),
                                                    ("qwen2", False, None, False)])
def test_estimate_equals_naive_per_sample_scores(kind, tied, store, formed, monkeypatch):
    """Tied Llama (cross terms of the shared embedding), untied Qwen2 with q/k/v biases; left
    padding, EOS-masked responses; the per-prompt means formed (small parameters) or kept
    factored (per-prompt ghost norms, the dots by a matmul: ``FORM_BYTES = 0``)."""
    if not formed:
        monkeypatch.setattr(torch_ghost, "FORM_BYTES", 0)
    model = _model(kind, tied)
    x, xm, y, z = _rollouts()
    st = score_statistics(model, x, y, z, prompt_mask=xm, eos_token_id=EOS, store_means=store)
    S = _naive_scores(model, x, xm, y)
    assert st.n_params == S.shape[2] == sum(p.numel() for p in model.parameters())
    ghat = np.einsum("ai,aid->ad", z, S) / z.shape[1]
    np.testing.assert_allclose(st.sq_norms, np.sum(S * S, axis=2), rtol=2e-5)
    np.testing.assert_allclose(st.mean_sq, np.sum(ghat * ghat, axis=1), rtol=2e-5)
    np.testing.assert_allclose(st.mean_dot, ghat @ ghat.sum(0), rtol=2e-5,
                               atol=2e-5 * np.max(np.abs(ghat @ ghat.sum(0))))
    est = estimate_from_torch_rollouts(model, x, y, z, prompt_mask=xm, eos_token_id=EOS,
                              store_means=store)
    _assert_same_estimate(est, gt.estimate_from_rollouts(z, scores=S), 1e-4)
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("chunk,store,formed", [(1, True, True), (3, False, True),
                                                (2, None, False), (3, False, False)])
def test_chunks_give_the_one_pass_statistics(chunk, store, formed, monkeypatch):
    """Fewer prompts per pass than m (the sum S known only after the last chunk): the kept
    per-prompt means or a second pass give the one-pass statistics, uneven last chunk included;
    a chunk of 0 is refused."""
    model = _model("llama", True)
    x, xm, y, z = _rollouts(m=5, n=3, seed=7)
    one = score_statistics(model, x, y, z, prompt_mask=xm, eos_token_id=EOS)
    if not formed:
        monkeypatch.setattr(torch_ghost, "FORM_BYTES", 0)
    done = []
    st = score_statistics(model, x, y, z, prompt_mask=xm, eos_token_id=EOS, chunk=chunk,
                          store_means=store, progress=lambda *a: done.append(a))
    for k in ("sq_norms", "mean_sq", "mean_dot"):
        np.testing.assert_allclose(getattr(st, k), getattr(one, k), rtol=1e-5,
                                   atol=1e-6 * np.abs(getattr(one, k)).max(), err_msg=k)
    passes = -(-5 // chunk) * (2 if store is False else 1)
    assert done[-1] == (passes, passes) and len(done) == passes
    with pytest.raises(ValueError, match="chunk"):
        score_statistics(model, x, y, z, prompt_mask=xm, eos_token_id=EOS, chunk=0)


def test_weights_temperature_and_mask_given():
    """Per-sequence weights (TRL's loss_type="grpo": 1/L), a temperature, a response mask given
    instead of EOS, and the model's training mode restored."""
    model = _model("qwen2", True, layers=1)
    model.train()
    x, xm, y, z = _rollouts(m=3, n=4, seed=4)
    ym = torch_estimate.response_mask_from_eos(y, EOS)
    w = 1.0 / ym.sum(-1).double().numpy()
    est = estimate_from_torch_rollouts(model, x, y, z, prompt_mask=xm, response_mask=ym,
                              sequence_weights=w, temperature=0.7)
    assert model.training
    S = _naive_scores(model, x, xm, y, temperature=0.7, weights=w)
    _assert_same_estimate(est, gt.estimate_from_rollouts(z, scores=S), 1e-4)
    # the default EOS is the model's own generation_config.eos_token_id
    st = score_statistics(model, x, y, z, prompt_mask=xm)
    np.testing.assert_allclose(st.sq_norms, np.sum(_naive_scores(model, x, xm, y) ** 2, 2),
                               rtol=2e-5)


def test_lora_counts_only_adapter_parameters():
    base = _model("llama", False, layers=1)
    cfg = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                     init_lora_weights=False)
    model = get_peft_model(base, cfg)
    adapters = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
    assert adapters and all("lora_" in k for k, _ in adapters)
    x, xm, y, z = _rollouts(seed=2)
    st = score_statistics(model, x, y, z, prompt_mask=xm, eos_token_id=EOS)
    D = sum(p.numel() for _, p in adapters)
    # q_proj 16 -> 16 and v_proj 16 -> 8 (2 kv heads of 4), rank 2: A (2, 16), B (out, 2)
    assert st.n_params == D == (2 * 16 + 16 * 2) + (2 * 16 + 8 * 2)
    S = _naive_scores(model, x, xm, y)
    assert S.shape[2] == D
    np.testing.assert_allclose(st.sq_norms, np.sum(S * S, axis=2), rtol=2e-5)
    est = estimate_from_torch_rollouts(model, x, y, z, prompt_mask=xm, eos_token_id=EOS)
    _assert_same_estimate(est, gt.estimate_from_rollouts(z, scores=S), 1e-4)


def test_factored_and_explicit_inner_products_agree():
    """The ghost-norm algebra on its own: per-sample inner products of two uses of a parameter,
    dense (linear layer) or token-id (embedding) factors, factored or formed explicitly."""
    g = torch.Generator().manual_seed(0)
    n, T, V_, d = 3, 5, 7, 4
    dense = torch_layers.Factored(torch.randn(n, T, V_, generator=g, dtype=torch.float64),
                                     torch.randn(n, T, d, generator=g, dtype=torch.float64))
    ids = torch_layers.Factored(torch.randint(0, V_, (n, T), generator=g),
                                   torch.randn(n, T, d, generator=g, dtype=torch.float64), V_)
    for u in (dense, ids):
        for v in (dense, ids):
            eu, ev = torch_layers.explicit_grad(u), torch_layers.explicit_grad(v)
            want = (eu * ev).sum(dim=(1, 2))
            for a, b in ((u, v), (eu, v), (u, ev), (eu, ev)):
                torch.testing.assert_close(torch_layers.inner_products(a, b), want)
    one_hot = torch.nn.functional.one_hot(ids.L, V_).double()
    torch.testing.assert_close(torch_layers.explicit_grad(ids), one_hot.transpose(1, 2) @ ids.R)


# --- the same weights through the JAX route -----------------------------------------------------

@pytest.mark.parametrize("kind,tied", [("llama", True), ("qwen2", False)])
def test_same_constants_as_the_jax_route(tmp_path, kind, tied):
    model = _model(kind, tied, layers=1, seed=3)
    model.save_pretrained(tmp_path, safe_serialization=True)
    _tokenizer().save(str(tmp_path / "tokenizer.json"))
    gen = json.loads((tmp_path / "generation_config.json").read_text())
    assert gen["eos_token_id"] == EOS and gen["pad_token_id"] == PAD
    policy = lm.from_pretrained(tmp_path)
    x, xm, y, z = _rollouts(m=4, n=3, seed=5)
    m, n, T = y.shape
    est = estimate_from_torch_rollouts(model, x, y, z, prompt_mask=xm)
    # JAX: per-sample squared norms and the per-prompt means ghat_a as weighted contractions
    # the JAX route marks left padding outside the vocabulary (PROMPT_PAD), from the mask
    xj = np.where(xm.numpy().astype(bool), x.numpy(), PROMPT_PAD)
    xs = np.repeat(xj, n, axis=0)
    W = np.zeros((m, m * n))
    for a in range(m):
        W[a, a * n:(a + 1) * n] = z[a] / n
    acc, sq = policy.score_contractions(xs, y.reshape(m * n, T).numpy(), W, chunk=6)
    ref = gt.estimate_from_rollouts(z, sq_norms=sq.reshape(m, n), mean_gram=acc @ acc.T)
    _assert_same_estimate(est, ref, 1e-4)
    # exactly the checkpoint's parameters (no zero q/k/v biases for Llama)
    assert policy.dim == sum(p.numel() for p in model.parameters())


def test_the_torch_and_jax_routes_exchange_one_record(tmp_path):
    """score_statistics (torch) and HFPolicy.score_statistics (JAX, ghost norms) return the
    same record type; each record's estimate equals that of its raw arrays exactly, and the two
    routes agree on the same weights."""
    from grpo_theory.core.rollouts import RolloutStatistics

    model = _model("qwen2", False, layers=1, seed=3)
    model.save_pretrained(tmp_path, safe_serialization=True)
    _tokenizer().save(str(tmp_path / "tokenizer.json"))
    policy = lm.from_pretrained(tmp_path)
    x, xm, y, z = _rollouts(m=4, n=3, seed=5)
    st = score_statistics(model, x, y, z, prompt_mask=xm)
    xj = np.where(xm.numpy().astype(bool), x.numpy(), PROMPT_PAD)
    sj = policy.score_statistics(xj, y.numpy(), z, chunk=6)
    assert type(st) is type(sj) is RolloutStatistics and sj.chunk == 6
    assert st.n_params == sj.n_params == policy.dim
    for rec in (st, sj):
        a = gt.estimate_from_rollouts(rec)
        b = gt.estimate_from_rollouts(rec.rewards, sq_norms=rec.sq_norms, mean_sq=rec.mean_sq,
                                      mean_dot=rec.mean_dot)
        np.testing.assert_array_equal(a.theta, b.theta)
        np.testing.assert_array_equal(a.cov, b.cov)
    np.testing.assert_array_equal(estimate_from_torch_rollouts(model, x, y, z, prompt_mask=xm).theta,
                                  gt.estimate_from_rollouts(st).theta)
    _assert_same_estimate(gt.estimate_from_rollouts(st), gt.estimate_from_rollouts(sj), 1e-4)


# --- TRL ------------------------------------------------------------------------------------------

def test_trl_options_map_to_the_package_presets():
    # TRL 1.16.0 grpo_config.py: scale_rewards True/False become "group"/"none"
    for given, value in ((True, "group"), (False, "none"), ("batch", "batch")):
        cfg = GRPOConfig(output_dir="unused", scale_rewards=given, report_to=[], use_cpu=True)
        assert cfg.scale_rewards == value
        assert trl_preset(given) == trl_preset(value)
    assert [trl_preset(v) for v in ("group", "batch", "none")] == \
        ["grpo_std_trl", "grpo_std_trl_batch", "grpo_mean"]
    assert GRPOConfig(output_dir="unused", report_to=[], use_cpu=True).loss_type == "dapo"
    assert trl_sequence_weighting("dapo") == "none" and trl_sequence_weighting("grpo") == "length"
    with pytest.raises(ValueError, match="scale_rewards"):
        trl_preset("std")
    with pytest.raises(ValueError, match="loss_type"):
        trl_sequence_weighting("mean")


def _trainer(tmp_path, scale_rewards="group", loss_type="dapo", num_generations=3, prompts=3):
    texts = ["a b", "c d e", "f", "g h", "i j k", "l"]
    ds = Dataset.from_dict({"prompt": [[{"role": "user", "content": t}] for t in texts]})

    def reward(completions, **kw):  # 1 for an odd number of characters
        return [float(len(c[0]["content"]) % 2) for c in completions]

    args = GRPOConfig(output_dir=str(tmp_path), report_to=[], use_cpu=True, bf16=False,
                      max_completion_length=5, num_generations=num_generations,
                      per_device_train_batch_size=num_generations * prompts, max_steps=2,
                      logging_steps=1, save_strategy="no", learning_rate=1e-2, seed=0,
                      scale_rewards=scale_rewards, loss_type=loss_type, temperature=1.0)
    return GRPOTrainer(model=_model("llama", True, layers=1), reward_funcs=reward, args=args,
                       train_dataset=ds, processing_class=_hf_tokenizer())


def test_grpo_trainer_callback_logs_the_constants(tmp_path):
    """2 steps: the logs hold the constants, which equal a standalone estimate on the same
    rollouts at the parameters that generated them; TRL's advantages are the preset's."""
    tr = _trainer(tmp_path)
    cb = GroupSizeAdvisor(tr, every=1)
    tr.add_callback(cb)
    seen = []
    inner = cb._estimate

    def spy(out, rewards):  # the parameters and the trainer's output at each estimate
        seen.append((copy.deepcopy(tr.model.state_dict()), out, rewards.clone()))
        return inner(out, rewards)

    cb._estimate = spy
    tr.train()
    assert cb.preset == "grpo_std_trl" and cb.weighting == "none" and len(cb.history) == 2
    logged = [h for h in tr.state.log_history if "advisor/c1" in h]
    assert len(logged) == 2
    for h, rec, (state, out, rewards) in zip(logged, cb.history, seen):
        for k in ("c1", "c2", "c3", "g_star", "recommended_G", "zero_variance_share",
                  "noise_scale", "noise_scale_low", "noise_scale_high"):
            if np.isnan(rec[k]):  # logged as missing (TRL's log history holds None)
                assert h[f"advisor/{k}"] is None or np.isnan(h[f"advisor/{k}"])
            else:
                assert h[f"advisor/{k}"] == pytest.approx(rec[k], rel=1e-12)
        model = _model("llama", True, layers=1)
        model.load_state_dict(state)
        G = 3
        z = rewards.double().numpy().reshape(-1, G)
        est = estimate_from_torch_rollouts(model, out["prompt_ids"][::G],
                                  out["completion_ids"].reshape(-1, G, 5), z,
                                  prompt_mask=out["prompt_mask"][::G],
                                  response_mask=out["completion_mask"].reshape(-1, G, 5))
        for k in ("c1", "c2", "c3"):
            assert rec[k] == pytest.approx(getattr(est, k), rel=1e-6, abs=1e-9)
        assert rec["g_star"] == pytest.approx(est.g_star, rel=1e-6)
        if est.c1_resolved:
            assert rec["recommended_G"] == est.recommended_group_size(9)
        else:  # no recommendation while c1 is not resolved above 0 (never the whole budget)
            assert np.isnan(rec["recommended_G"])
        if est.grad_norm_sq > 0:  # the GRPO noise scale at the trainer's G, in completions
            assert rec["noise_scale"] == pytest.approx(est.noise_scale(G).value, rel=1e-6)
            assert rec["noise_scale_low"] <= rec["noise_scale"] <= rec["noise_scale_high"]
        else:
            assert np.isnan(rec["noise_scale"])
        assert rec["budget"] == 9 and rec["group_size"] == G
        assert rec["zero_variance_share"] == pytest.approx(np.mean(np.ptp(z, axis=1) == 0))
        # TRL's own advantages on this batch are the package's preset on the same rewards
        adv = np.asarray(gt.compute_advantages(cb.preset, jnp.asarray(z)))
        np.testing.assert_allclose(out["advantages"].double().numpy().reshape(-1, G), adv,
                                   rtol=1e-5, atol=1e-5)


def test_callback_weighting_follows_loss_type_and_refuses_bad_setups(tmp_path):
    tr = _trainer(tmp_path, scale_rewards="none", loss_type="grpo")
    cb = GroupSizeAdvisor(tr, every=5)
    assert cb.weighting == "length" and cb.preset == "grpo_mean" and cb.budget == 9
    with pytest.raises(ValueError, match="num_generations >= 3"):
        GroupSizeAdvisor(_trainer(tmp_path, num_generations=2, prompts=3))
    with pytest.raises(ValueError, match=">= 3 prompts"):
        GroupSizeAdvisor(_trainer(tmp_path, prompts=2))
    with pytest.raises(ValueError, match="every"):
        GroupSizeAdvisor(tr, every=0)
    with pytest.raises(ValueError, match="weighting"):
        GroupSizeAdvisor(tr, weighting="mean")
    with pytest.raises(ValueError, match="trl.GRPOTrainer"):
        GroupSizeAdvisor(object())


def test_estimate_scaling_constants_samples_itself():
    model, tok = _model("llama", True, layers=1), _hf_tokenizer()
    calls = []

    def reward(prompts, completions):
        calls.append((list(prompts), list(completions)))
        return [float(len(c) % 2) for c in completions]

    kw = dict(n_samples=3, max_new_tokens=4, seed=7)
    a = estimate_from_torch_model(model, tok, ["a b", "c", "d e f"], reward, **kw)
    b = estimate_from_torch_model(model, tok, ["a b", "c", "d e f"], reward, **kw)
    np.testing.assert_array_equal(a.theta, b.theta)
    assert calls[0][0] == ["a b"] * 3 + ["c"] * 3 + ["d e f"] * 3 and len(calls[0][1]) == 9
    assert a.n_prompts == 3 and a.n_samples == 3 and np.all(np.isfinite(a.theta))


def test_sampling_reports_its_generation_steps():
    """estimate_from_torch_model with a stage callback: the phase "sampling" over the
    max_new_tokens steps, as plain lines through the advisor's Progress on a non-terminal, and
    the same estimate as without it (rival: a progress hook that changes the samples)."""
    import io

    from grpo_theory.advisor.progress import Progress

    model, tok = _model("llama", True, layers=1), _hf_tokenizer()
    reward = lambda prompts, completions: [float(len(c) % 2) for c in completions]
    kw = dict(n_samples=3, max_new_tokens=4, seed=7)
    seen = []
    a = estimate_from_torch_model(model, tok, ["a b", "c", "d e f"], reward,
                                  stage=lambda *s: seen.append(s), **kw)
    b = estimate_from_torch_model(model, tok, ["a b", "c", "d e f"], reward, **kw)
    np.testing.assert_array_equal(a.theta, b.theta)
    assert seen[0] == ("sampling", 0, 4) and seen[-1] == ("sampling", 4, 4)
    assert all(p == "sampling" and t == 4 for p, _, t in seen)
    assert [d for _, d, _ in seen] == sorted(d for _, d, _ in seen)
    log = io.StringIO()
    estimate_from_torch_model(model, tok, ["a b", "c", "d e f"], reward,
                              stage=Progress(True, log, name="torch").stage, **kw)
    lines = log.getvalue().splitlines()
    assert lines[0] == "torch: sampling responses ..."
    assert re.fullmatch(r"torch: sampling responses 4/4 \(\d+\.\ds\)", lines[-1]), lines


# --- bad input ------------------------------------------------------------------------------------

def test_bad_input_gives_clear_errors():
    model = _model("llama", True, layers=1)
    x, xm, y, z = _rollouts()
    ok = dict(prompt_mask=xm, eos_token_id=EOS)
    cases = [
        ((model, x.float(), y, z), ok, "prompt_ids must be an integer"),
        ((model, x, y[0], z), ok, "response_ids must have 3 dimensions"),
        ((model, x[:3], y, z), ok, "prompt_ids has 3 rows"),
        ((model, x, y, z[:, :2]), ok, "rewards"),
        ((model, x, y[:, :2], z[:, :2]), ok, ">= 3 responses"),
        ((model, x, y, z), dict(prompt_mask=xm * 2, eos_token_id=EOS), "only 0 and 1"),
        ((model, x, y, z), dict(prompt_mask=xm[:, :3], eos_token_id=EOS), "prompt_mask"),
        ((model, x, y, z), dict(prompt_mask=xm, response_mask=torch.ones_like(y),
                                eos_token_id=EOS), "not both"),
        ((model, x, y + VOCAB, z), ok, r"token ids in \[0, 44\)"),
        ((model, x, y, z * np.nan), ok, "rewards"),
        ((model, x, y, z), dict(ok, sequence_weights=np.ones((4, 2))), "sequence_weights"),
        ((model, x, y, z), dict(ok, temperature=0.0), "temperature"),
    ]
    for args, kw, msg in cases:
        with pytest.raises(ValueError, match=msg):
            estimate_from_torch_rollouts(*args, **kw)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        estimate_from_torch_rollouts("model", x, y, z, **ok)
    frozen = _model("llama", True, layers=1).requires_grad_(False)
    with pytest.raises(ValueError, match="requires_grad"):
        estimate_from_torch_rollouts(frozen, x, y, z, **ok)
    with pytest.raises(ValueError, match="prompts"):
        estimate_from_torch_model(model, _hf_tokenizer(), ["a", "b"], lambda p, c: [0.0] * 6,
                                   n_samples=3)
