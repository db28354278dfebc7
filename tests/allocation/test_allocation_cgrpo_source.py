"""C-GRPO's stopping rule transcribed from its trainer's source, PyPI ``trl-cgrpo`` 0.2.0
(``trl_cgrpo/conformal.py``: ``_answer_distribution``, ``prediction_set``,
``resolves_singleton``, ``pass_rate_score``; ``cgrpo_trainer.py``: ``_resolved``, MIT licence),
against ``conformal_stopping``'s decision at every count state of binary answers."""

import random
from collections import Counter

import numpy as np
import pytest

import grpo_theory.allocation as A


# --- transcribed from trl_cgrpo 0.2.0, conformal.py ---------------------------------------------
def _answer_distribution(answers, k, rng):
    counts = Counter(a for a in answers[:k] if a != "")
    probs = [(answer, count / k) for answer, count in counts.items()]
    probs.sort(key=lambda item: (-item[1], rng.random()))
    return probs


def prediction_set(answers, k, qhat, rng):
    out, cumulative = [], 0.0
    for answer, p in _answer_distribution(answers, k, rng):
        out.append(answer)
        cumulative += p
        if cumulative >= qhat:
            break
    return out


def resolves_singleton(answers, k, qhat, rng):
    pset = prediction_set(answers, k, qhat, rng)
    if len(pset) != 1:
        return False
    mass = sum(1 for a in answers[:k] if a == pset[0]) / k
    return mass >= qhat


def pass_rate_score(passes, k):
    return 1.0 - sum(bool(p) for p in passes[:k]) / k


def resolved(score, outcomes, k, qhat, rng):  # CGRPOTrainer._resolved
    if score == "aps":
        return resolves_singleton(outcomes, k, qhat, rng)
    if not any(outcomes[:k]):
        return False
    return pass_rate_score(outcomes, k) <= qhat
# -------------------------------------------------------------------------------------------------


GRID = (2, 3, 4, 6, 8)
QHATS = [1.0, 0.75, 0.5, 2 / 3, 0.0, (0.9, 0.75, 0.5, 1.0, 0.6)]


@pytest.mark.parametrize("score", ["aps", "pass_rate"])
@pytest.mark.parametrize("qhat", QHATS, ids=str)
def test_the_decision_is_the_trainers_at_every_count_state(score, qhat):
    rule = A.conformal_stopping(GRID, qhat=qhat, agree="reward", score=score)
    qs = dict(zip(GRID, np.broadcast_to(np.asarray(qhat, float), (len(GRID),))))
    rng = random.Random(0)
    for t in range(1, GRID[-1] + 1):
        n1 = np.arange(t + 1)
        stop = rule.decide(t, n1)[0][0]
        for n in n1:
            outcomes = [1] * n + [0] * (t - n)
            if score == "aps":
                outcomes = [str(o) for o in outcomes]  # answers: the reward value
            rng.shuffle(outcomes)
            if t == GRID[-1]:
                want = True  # the last grid size: the group is complete
            elif t in GRID:
                want = resolved(score, outcomes, t, qs[t], rng)
            else:
                want = False  # the trainer looks only at grid sizes
            assert bool(stop[n]) == want, (t, n, qhat)


def test_a_share_equal_to_the_threshold_resolves():
    """The rival "share > qhat" (strict) differs from the trainer at 3 of 4 with qhat 0.75."""
    rng = random.Random(1)
    assert resolves_singleton(["a", "a", "a", "b"], 4, 0.75, rng)
    rule = A.conformal_stopping((2, 4, 8), qhat=0.75, agree="reward")
    assert rule.decide(4, np.array([3]))[0][0, 0]


def test_per_size_thresholds_and_scores_are_checked():
    with pytest.raises(ValueError, match="one per grid size"):
        A.conformal_stopping((2, 4, 8), qhat=[0.5, 1.0])
    with pytest.raises(ValueError, match=r"qhat must lie in \[0, 1\]"):
        A.conformal_stopping((2, 4), qhat=[0.5, 1.2], agree="reward")
    with pytest.raises(ValueError, match="first pass: no exact route"):
        A.conformal_stopping((2, 4), score="first_success")
    with pytest.raises(ValueError, match="qhat must be 1 with agree='answer'"):
        A.conformal_stopping((2, 4), qhat=[1.0, 0.5])
