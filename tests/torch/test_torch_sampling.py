"""The torch route samples from the policy itself: transformers' default top-k 50 (and any
checkpoint sampling settings) are off unless the user asks for them."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402

from grpo_theory.torch.sampling import POLICY_SAMPLING, sample_from_policy  # noqa: E402

VOCAB = 160


def _model():
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, use_sliding_window=False,
                      eos_token_id=2, pad_token_id=1)
    model = Qwen2ForCausalLM(cfg).float().eval()
    model.generation_config.top_p = 0.8  # a checkpoint's own sampling setting is ignored too
    return model


def _first_tokens(model, n, **kwargs):
    ids = torch.tensor([[5, 6, 7, 8]])
    mask = torch.ones_like(ids)
    torch.manual_seed(1)
    resp = sample_from_policy(model, ids, mask, n, 0.7, 1, 1, (2,), kwargs or None)
    with torch.no_grad():
        probs = torch.softmax(model(ids, attention_mask=mask).logits[0, -1] / 0.7, -1).numpy()
    return resp[:, 0].numpy(), probs.astype(np.float64)


def test_responses_are_drawn_from_softmax_of_the_logits():
    """The mass outside the 50 likeliest tokens is sampled at its rate (a binomial z-test); the
    rival, transformers' default top-k 50, samples it never."""
    model = _model()
    n = 4000
    tok, probs = _first_tokens(model, n)
    outside = np.argsort(probs)[:-50]
    q = probs[outside].sum()
    assert q > 0.3  # a test that can see top-k 50
    hits = np.isin(tok, outside).mean()
    assert abs(hits - q) / np.sqrt(q * (1 - q) / n) < 4
    # and the whole law: chi-square over the 20 likeliest tokens and the rest pooled
    top = np.argsort(probs)[-20:]
    obs = np.array([np.sum(tok == t) for t in top] + [np.sum(~np.isin(tok, top))])
    exp = n * np.append(probs[top], 1 - probs[top].sum())
    chi2 = float(np.sum((obs - exp) ** 2 / exp))
    assert chi2 < 50  # 20 degrees of freedom: P(chi2 > 50) < 3e-4
    tok_k, _ = _first_tokens(model, 1000, top_k=50)
    assert not np.isin(tok_k, outside).any()


def test_the_settings_turn_every_warper_off():
    assert POLICY_SAMPLING["do_sample"] and POLICY_SAMPLING["top_k"] == 0
    assert POLICY_SAMPLING["top_p"] == 1.0 and POLICY_SAMPLING["repetition_penalty"] == 1.0
