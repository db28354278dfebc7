"""Malformed inputs of ``advise`` and of the group-size schedule's rule: a reward of the wrong
arity or with overflowing squares named as the reward and the cause; a non-integer answer
(``7.9``) refused, never truncated, naming the field, for every integer-answer reward; the
schedule's helpers refuse empty, zero and non-integer inputs and never loop over every integer
up to the batch."""

import json
import time

import jax
import pytest

from grpo_theory.advisor import advise as A
from grpo_theory.advisor.schedule import allowed_group_sizes, propose_group_size
from grpo_theory.lm import task
from grpo_theory.lm.model import ModelConfig, init_params
from grpo_theory.lm.warmup import save_checkpoint

# --- the reward's arity ---------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [lambda text: 0.0, lambda text, answer, extra: 0.0,
                                lambda: 0.0, lambda *, text, answer: 0.0])
def test_a_reward_of_the_wrong_arity_is_named(fn):
    """The rival (called as it is) fails at the first response with Python's words on the
    call, naming neither ``reward`` nor the signature."""
    with pytest.raises(ValueError, match=r"reward .* must take two arguments \(text, answer\)"):
        A.load_reward(fn)


def test_rewards_of_two_arguments_are_kept():
    for fn in (lambda t, a: 0.0, lambda t, a, extra=1: 0.0, lambda *a: 0.0, max):
        assert A.load_reward(fn) is fn


def test_a_named_reward_of_the_wrong_arity_names_the_spec(tmp_path, monkeypatch):
    (tmp_path / "r4_reward.py").write_text("def one(text):\n    return 1.0\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"reward 'r4_reward:one' must take two arguments"):
        A.load_reward("r4_reward:one")
    with pytest.raises(ValueError, match="r4_reward:one"):
        A.advise([{"question": "q", "answer": 1}], "no-such-model", "r4_reward:one")


# --- integer answers: refused, not truncated ------------------------------------------------------

@pytest.mark.parametrize("reward", [task.reward_text, task.reward_answer_text,
                                    A.exact_answer_reward])
def test_a_non_integer_answer_is_refused_not_truncated(reward):
    """The rival ``int(answer)`` rewards the response "7" for the answer 7.9."""
    with pytest.raises(ValueError, match="answer must be an integer"):
        reward("7", 7.9)
    with pytest.raises(ValueError, match="answer must be an integer.*'seven'"):
        reward("7", "seven")
    assert reward("7", 7.0) == 1.0 and reward("7", "7") == 1.0 and reward("8", 7) == 0.0


@pytest.mark.parametrize("reward", [None, task.reward_text, task.reward_answer_text,
                                    A.exact_answer_reward])
@pytest.mark.parametrize("answer", [7.9, "seven", None, [7]])
def test_prompts_with_a_non_integer_answer_are_refused_before_loading(reward, answer, tmp_path):
    """For every integer-answer reward, the answers are checked when the prompts are read:
    the error names the file and line (or the list index) and the field, before the model."""
    p = tmp_path / "prompts.jsonl"
    p.write_text(json.dumps({"question": "q", "answer": 1}) + "\n"
                 + json.dumps({"question": "q", "answer": answer}) + "\n")
    with pytest.raises(ValueError, match=r"prompts.jsonl:2: 'answer' must be an integer"):
        A.advise(p, "no-such-model", reward)
    with pytest.raises(ValueError, match=r"prompts\[1\]: 'answer' must be an integer"):
        A.advise([{"question": "q", "answer": 1}, {"question": "q", "answer": answer}],
                 "no-such-model", reward)


def test_another_reward_takes_any_answer(tmp_path):
    """A reward of the user's own takes answers as they are (here the model is what fails)."""
    p = tmp_path / "prompts.jsonl"
    p.write_text(json.dumps({"question": "q", "answer": "seven"}) + "\n")
    with pytest.raises(ValueError, match="model"):
        A.advise(p, str(tmp_path / "no-such-model.npz"), lambda t, a: float(t == a))


# --- rewards whose squares overflow ---------------------------------------------------------------

def test_rewards_whose_squares_overflow_name_the_reward(tmp_path):
    cfg = dict(d_model=16, n_layers=1, n_heads=2)
    save_checkpoint(tmp_path / "tiny.npz", init_params(jax.random.PRNGKey(0),
                                                       ModelConfig(**cfg)), dict(config=cfg))
    A.write_prompts(tmp_path / "prompts.jsonl", task.eval_set(n=8))
    with pytest.raises(ValueError, match=r"reward returned 1e\+200 .*\|r\| <= 1e\+150 .*"
                                         r"squared rewards.*rescale the reward"):
        A.advise(tmp_path / "prompts.jsonl", tmp_path / "tiny.npz", lambda t, a: 1e200,
                 n_prompts=3, n_samples=3, response_len=2, progress=False)


# --- the schedule's rule --------------------------------------------------------------------------

REC = dict(recommended_G=16.0, g_star_low=9.0, g_star_high=30.0)


@pytest.mark.parametrize("args, match", [
    ((0, REC, [3, 4]), "current must be an integer >= 1"),
    ((4.5, REC, [3, 4]), "current must be an integer"),
    ((4, REC, []), "allowed must hold at least one"),
    ((4, REC, [0, 4]), "allowed must be an integer >= 1"),
    ((4, REC, 7), "allowed must be a list"),
    ((4, {"recommended_G": 16.0}, [3, 4]), "record lacks 'g_star_low'"),
    ((4, dict(REC, g_star_low="x"), [3, 4]), r"record\['g_star_low'\] must be a number"),
    ((4, REC, [3, 4], 0.5), "min_change must be >= 1"),
    ((4, REC, [3, 4], float("nan")), "min_change must be finite")])
def test_propose_group_size_refuses_what_would_divide_by_zero_or_fail(args, match):
    with pytest.raises(ValueError, match=match):
        propose_group_size(*args)


def test_propose_group_size_keeps_its_answers():
    assert propose_group_size(4, REC, [3, 4, 6, 8, 12, 16, 24]) == 16
    assert propose_group_size(12, REC, [3, 4, 6, 8, 12, 16, 24]) == 12


@pytest.mark.parametrize("kw, match", [
    (dict(rows=24, min_group_size=2.5), "min_group_size must be an integer"),
    (dict(rows=24, min_group_size=1), "min_group_size must be an integer >= 2"),
    (dict(rows=24, max_group_size=8.0), "max_group_size must be an integer"),
    (dict(rows=24, min_group_size=6, max_group_size=4), "max_group_size must be an integer >= 6"),
    (dict(rows=24, min_prompts=0), "min_prompts must be an integer >= 1"),
    (dict(rows=0), "rows")])
def test_allowed_group_sizes_domain(kw, match):
    with pytest.raises(ValueError, match=match):
        allowed_group_sizes(**kw)


def test_allowed_group_sizes_of_a_huge_batch_are_divisors_not_a_scan():
    """The rival scans every integer up to the batch (10^10 steps); the divisors take
    10^5."""
    t0 = time.perf_counter()
    got = allowed_group_sizes(10**10, max_group_size=1000)
    assert time.perf_counter() - t0 < 5.0
    assert got == [g for g in range(3, 1001) if 10**10 % g == 0]
    assert allowed_group_sizes(24) == [3, 4, 6, 8]
    assert allowed_group_sizes(36, 2, 12) == [2, 3, 4, 6, 9, 12]
