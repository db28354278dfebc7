"""PEFT setups through the torch route (peft as installed with the torch extra): DoRA, LoRA on
the input embeddings (plain and DoRA), ``modules_to_save`` on the embeddings, each exact against
per-sample autograd of exactly the trainable parameters; IA3 refused before any pass."""

import numpy as np
import pytest
from peft import IA3Config, LoraConfig, get_peft_model

from support.torch_rollouts import EOS, naive_scores, rollouts, tiny_model

from grpo_theory.torch import score_statistics

SETUPS = {
    "dora": dict(target_modules=["q_proj", "v_proj"], use_dora=True),
    "lora-embeddings": dict(target_modules=["embed_tokens", "q_proj"]),
    "dora-embeddings": dict(target_modules=["embed_tokens", "o_proj"], use_dora=True),
    "modules-to-save": dict(target_modules=["q_proj"], modules_to_save=["embed_tokens"]),
}


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_peft_setup_equals_per_sample_autograd(setup):
    cfg = LoraConfig(r=2, lora_alpha=4, init_lora_weights=False, lora_dropout=0.0,
                     **SETUPS[setup])
    model = get_peft_model(tiny_model("llama", False, layers=1), cfg)
    x, xm, y, z = rollouts(seed=2)
    st = score_statistics(model, x, y, z, prompt_mask=xm, eos_token_id=EOS)
    S = naive_scores(model, x, xm, y)
    assert st.n_params == S.shape[2] == sum(p.numel() for p in model.parameters()
                                             if p.requires_grad)
    ghat = np.einsum("ai,aid->ad", z, S) / z.shape[1]
    np.testing.assert_allclose(st.sq_norms, np.sum(S * S, axis=2), rtol=2e-5)
    np.testing.assert_allclose(st.mean_sq, np.sum(ghat * ghat, axis=1), rtol=2e-5)
    ref = ghat @ ghat.sum(0)
    np.testing.assert_allclose(st.mean_dot, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


def test_ia3_is_refused_before_any_pass():
    cfg = IA3Config(target_modules=["q_proj", "down_proj"], feedforward_modules=["down_proj"])
    model = get_peft_model(tiny_model("llama", False, layers=1), cfg)
    x, xm, y, z = rollouts(seed=2)
    with pytest.raises(ValueError, match="IA3|LoRA|tuner"):
        score_statistics(model, x, y, z, prompt_mask=xm, eos_token_id=EOS)


def test_the_callback_refuses_ia3_when_it_is_made(tmp_path):
    from support.tiny_trl import tiny_llama, tiny_trainer

    from grpo_theory.torch import GroupSizeAdvisor

    cfg = IA3Config(target_modules=["q_proj", "down_proj"], feedforward_modules=["down_proj"])
    trainer = tiny_trainer(tmp_path, model=get_peft_model(tiny_llama(), cfg))
    with pytest.raises(ValueError, match="IA3|LoRA|tuner"):
        GroupSizeAdvisor(trainer, every=1)
