"""Malformed inputs of the torch route and of the TRL callback: each refused with a one-line
``ValueError`` naming the argument; tiny random models built here (as test_torch_advisor.py)."""

import numpy as np
import pytest
import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (BertConfig, BertForMaskedLM, BertLMHeadModel, LlamaConfig,
                          LlamaForCausalLM, PreTrainedTokenizerFast)
from trl import GRPOConfig, GRPOTrainer

from grpo_theory.torch import (GroupSizeAdvisor, estimate_from_torch_model,
                               estimate_from_torch_rollouts, score_statistics)

PAD, EOS = 1, 2
SPECIAL = ["<unk>", "<pad>", "<eos>", "<bos>"]
WORDS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["user", "assistant", ":"]
VOCAB = len(SPECIAL) + len(WORDS)
CHAT = ("{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant : {% endif %}")


def _llama(seed=0):
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        pad_token_id=PAD, eos_token_id=EOS, bos_token_id=3, initializer_range=0.3)).float()


def _bert_config(**kw):
    return BertConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=24,
                      num_hidden_layers=1, num_attention_heads=4, max_position_embeddings=64,
                      pad_token_id=PAD, **kw)


def _rollouts(m=4, n=3, P=5, T=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(4, VOCAB, (m, P), generator=g)
    xm = torch.ones_like(x)
    x[1, :2], xm[1, :2] = PAD, 0
    y = torch.randint(4, VOCAB, (m, n, T), generator=g)
    z = torch.rand(m, n, generator=g).double().numpy()
    return x, xm, y, z


def _tokenizer():
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(SPECIAL + WORDS)},
                                     unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIAL)
    t = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                eos_token="<eos>", bos_token="<bos>")
    t.chat_template = CHAT
    return t


OK = dict(eos_token_id=EOS)


# --- the model ------------------------------------------------------------------------------------

def test_a_masked_language_model_is_refused():
    x, xm, y, z = _rollouts()
    with pytest.raises(ValueError, match=r"causal language model .*got BertForMaskedLM"):
        estimate_from_torch_rollouts(BertForMaskedLM(_bert_config()), x, y, z, prompt_mask=xm,
                                     **OK)
    # BERT's causal-LM head without is_decoder has a bidirectional attention
    with pytest.raises(ValueError, match=r"config.is_decoder=False"):
        score_statistics(BertLMHeadModel(_bert_config()), x, y, z, prompt_mask=xm, **OK)
    st = score_statistics(BertLMHeadModel(_bert_config(is_decoder=True)), x, y, z,
                          prompt_mask=xm, **OK)
    assert np.all(np.isfinite(st.sq_norms))


def test_a_model_on_the_meta_device_is_refused():
    x, xm, y, z = _rollouts()
    with torch.device("meta"):
        model = _llama()
    with pytest.raises(ValueError, match="meta device"):
        score_statistics(model, x, y, z, prompt_mask=xm, **OK)
    with pytest.raises(ValueError, match="meta device"):
        estimate_from_torch_model(model, _tokenizer(), ["a", "b", "c"], lambda p, c: [0.0] * 9,
                                  n_samples=3, max_new_tokens=2)


# --- the prompts ----------------------------------------------------------------------------------

def test_right_padded_prompts_are_refused():
    model = _llama()
    x, xm, y, z = _rollouts()
    right_x, right_m = x.clone(), xm.clone()
    right_x[1] = torch.cat([x[1, 2:], x[1, :2]])
    right_m[1] = torch.cat([xm[1, 2:], xm[1, :2]])
    with pytest.raises(ValueError, match=r"prompt_mask row 1 has a 0 after a 1: .*left-padded"):
        score_statistics(model, right_x, y, z, prompt_mask=right_m, **OK)
    hole = xm.clone()
    hole[0, 2] = 0  # a 0 between prompt tokens
    with pytest.raises(ValueError, match=r"prompt_mask row 0 .*left-padded"):
        score_statistics(model, x, y, z, prompt_mask=hole, **OK)
    st = score_statistics(model, x, y, z, prompt_mask=xm, **OK)  # left padding still works
    assert np.all(st.sq_norms > 0)


# --- the rewards and the seed ---------------------------------------------------------------------

@pytest.mark.parametrize("bad, msg", [
    ("rewards", r"rewards must be an array of real numbers, got a string"),
    ([["a"] * 3] * 4, r"rewards must be an array of real numbers, got dtype"),
    (np.ones((4, 3)) * (1 + 1j), r"rewards must be real"),
    (np.ones(12), r"rewards must be a 2-d array|rewards must have shape"),
    (np.ones((4, 4)), r"rewards must have shape \(4, 3\)"),
    (np.full((4, 3), np.inf), r"rewards must be finite"),
    (None, r"rewards must be an array of real numbers"),
])
def test_bad_rewards_name_the_argument(bad, msg):
    x, xm, y, _ = _rollouts()
    with pytest.raises(ValueError, match=msg):
        score_statistics(_llama(), x, y, bad, prompt_mask=xm, **OK)


def test_rewards_as_a_torch_tensor_are_accepted():
    model = _llama()
    x, xm, y, z = _rollouts()
    a = score_statistics(model, x, y, torch.tensor(z, requires_grad=True), prompt_mask=xm, **OK)
    b = score_statistics(model, x, y, z, prompt_mask=xm, **OK)
    np.testing.assert_array_equal(a.mean_sq, b.mean_sq)
    with pytest.raises(ValueError, match="rewards must be finite"):
        score_statistics(model, x, y, torch.full((4, 3), float("nan")), prompt_mask=xm, **OK)


@pytest.mark.parametrize("reward, msg", [
    (lambda p, c: [float("nan")] * len(c), "the rewards returned by reward must be finite"),
    (lambda p, c: ["x"] * len(c), "the rewards returned by reward must be an array of real"),
    (lambda p, c: [0.0] * 4, r"the rewards returned by reward must have shape \(9,\)"),
])
def test_the_reward_function_returns_are_checked(reward, msg):
    with pytest.raises(ValueError, match=msg):
        estimate_from_torch_model(_llama(), _tokenizer(), ["a b", "c", "d e"], reward,
                                  n_samples=3, max_new_tokens=2)


@pytest.mark.parametrize("seed, msg", [(2 ** 64, r"seed must be an integer <= 2\*\*64|seed must "
                                                 r"be an integer <= 18446744073709551615"),
                                       (-1, "seed must be an integer >= 0"),
                                       (1.5, "seed must be an integer")])
def test_seeds_out_of_range_are_refused(seed, msg):
    with pytest.raises(ValueError, match=msg):
        estimate_from_torch_model(_llama(), _tokenizer(), ["a b", "c", "d e"],
                                  lambda p, c: [1.0] * len(c), n_samples=3, max_new_tokens=2,
                                  seed=seed)


# --- the TRL callback's constructor ---------------------------------------------------------------

@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    ds = Dataset.from_dict({"prompt": [[{"role": "user", "content": t}]
                                       for t in ["a b", "c d e", "f"]]})

    def reward(completions, **kw):
        return [float(len(c[0]["content"]) % 2) for c in completions]

    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("trl")), report_to=[], use_cpu=True,
                      bf16=False, max_completion_length=4, num_generations=3,
                      per_device_train_batch_size=9, max_steps=1, save_strategy="no")
    return GRPOTrainer(model=_llama(), reward_funcs=reward, args=args, train_dataset=ds,
                       processing_class=_tokenizer())


@pytest.mark.parametrize("kw, msg", [
    (dict(every=0), "every must be an integer >= 1"),
    (dict(every=2.0), "every must be an integer"),
    (dict(every="10"), "every must be an integer"),
    (dict(budget=1), "budget must be an integer >= 2"),
    (dict(budget=9.5), "budget must be an integer"),
    (dict(budget=True), "budget must be an integer"),
    (dict(weighting="mean"), "weighting must be 'auto', 'none' or 'length'"),
    (dict(weighting=["none"]), "weighting must be 'auto', 'none' or 'length'"),
    (dict(weighting=None), "weighting must be 'auto', 'none' or 'length'"),
    (dict(alpha=0.0), "alpha must be > 0"),
    (dict(alpha=1.0), r"alpha must be in \(0, 1\)"),
    (dict(alpha=float("nan")), "alpha must be finite"),
    (dict(alpha="0.05"), "alpha must be a real number"),
    (dict(store_means="yes"), "store_means must be True or False"),
    (dict(store_means=2), "store_means must be True or False"),
])
def test_callback_arguments_are_checked_when_it_is_made(trainer, kw, msg):
    with pytest.raises(ValueError, match=msg):
        GroupSizeAdvisor(trainer, **kw)


def test_callback_refuses_a_non_trainer_and_keeps_valid_arguments(trainer):
    with pytest.raises(ValueError, match="trainer must be a trl.GRPOTrainer"):
        GroupSizeAdvisor(None)
    cb = GroupSizeAdvisor(trainer, every=3, budget=12, weighting="length", alpha=0.1,
                          store_means=False)
    assert (cb.every, cb.budget, cb.weighting, cb.alpha, cb.store_means) == (3, 12, "length",
                                                                            0.1, False)
    assert GroupSizeAdvisor(trainer).store_means is None


def test_callback_refuses_a_bad_trainer_temperature(trainer, monkeypatch):
    monkeypatch.setattr(trainer, "temperature", 0.0)
    with pytest.raises(ValueError, match="trainer.temperature must be > 0"):
        GroupSizeAdvisor(trainer)


def test_callback_refuses_a_trainer_whose_model_is_not_causal(trainer, monkeypatch):
    monkeypatch.setattr(trainer, "model", BertForMaskedLM(_bert_config()))
    with pytest.raises(ValueError, match="causal language model .*got BertForMaskedLM"):
        GroupSizeAdvisor(trainer)
