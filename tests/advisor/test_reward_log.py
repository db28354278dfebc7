"""What rewards alone tell a trainer (``advisor.rewards``, ``grpo-theory rewards``).

Rivals: the plug-in estimate of the informative fraction (biased; the U-statistic is not), the
mean-pass-rate prediction (far off when pass rates spread), 1/a rounds for dynamic sampling.
"""

import json
from math import comb

import numpy as np
import pytest
from scipy.stats import binom

from grpo_theory.advisor import (RewardLog, expected_rounds, informative_estimates,
                                 read_reward_log, summarize_rewards)
from grpo_theory.experiments.cli import main


@pytest.mark.parametrize("n,G,p", [(6, 3, 0.2), (16, 8, 0.18), (5, 5, 0.6), (9, 2, 0.95)])
def test_informative_estimate_is_unbiased_and_plug_in_is_not(n, G, p):
    k = np.arange(n + 1)
    w = binom.pmf(k, n, p)
    truth = 1 - p**G - (1 - p) ** G
    assert w @ informative_estimates(np.full(n + 1, n), k, G) == pytest.approx(truth, abs=1e-12)
    plug = 1 - (k / n) ** G - (1 - k / n) ** G
    assert abs(w @ plug - truth) > 1e-3  # the rival
    assert np.isnan(informative_estimates([G - 1], [1], G))[0]


def test_informative_estimate_by_hand():
    assert informative_estimates([6], [2], 3)[0] == pytest.approx(
        1 - (comb(2, 3) + comb(4, 3)) / comb(6, 3))


def test_expected_rounds_against_simulation():
    rng = np.random.default_rng(0)
    a, B = 0.4, 5
    rounds = []
    for _ in range(20000):
        kept = r = 0
        while kept < B:
            kept += rng.binomial(B, a)
            r += 1
        rounds.append(r)
    m, se = np.mean(rounds), np.std(rounds) / np.sqrt(len(rounds))
    assert abs(expected_rounds(a, B) - m) < 4 * se
    assert abs(1 / a - m) > 4 * se  # the rival 1/a
    assert expected_rounds(1.0, 7) == pytest.approx(1.0)


def _synthetic_log(path, n=16, P=400, seed=0):
    """Pass rates spread as in a real run (mean about 0.2): most prompts nearly never solved."""
    rng = np.random.default_rng(seed)
    p = np.array([0.02, 0.3, 0.7])[rng.choice(3, P, p=[0.6, 0.25, 0.15])]
    with open(path, "w") as fh:
        for x in range(P):
            for z in rng.random(n) < p[x]:
                fh.write(json.dumps(dict(uid=f"q{x}", score=float(z))) + "\n")
    return p


def test_the_mean_pass_rate_mispredicts_informative_groups(tmp_path):
    """The public case's lesson on a synthetic log: the mean-p prediction at G = 8 is far above
    the per-prompt estimate, whose interval covers the truth."""
    f = tmp_path / "log.jsonl"
    p = _synthetic_log(f)
    s = summarize_rewards(read_reward_log(f, "uid", "score"), group_sizes=(4, 8))
    row = s.by_G[s.by_G.G == 8].iloc[0]
    truth = np.mean(1 - p**8 - (1 - p) ** 8)
    assert row.ci_low <= truth <= row.ci_high
    assert row.mean_p_prediction > row.ci_high + 0.2
    assert row.rollouts_per_kept_group == pytest.approx(8 / row.informative)
    assert len(s.prompts) == 400 and s.prompts.knapsack_G.sum() == 8 * 400


def test_command_prints_and_writes(tmp_path, capsys):
    f = tmp_path / "log.jsonl"
    _synthetic_log(f, P=60)
    out = tmp_path / "out"
    assert main(["rewards", str(f), "--prompt-field", "uid", "--reward-field", "score",
                 "--group-sizes", "2,8", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mean_p_prediction" in text and "grpo-theory advise" in text
    assert {"by_G.csv", "prompts.csv", "informative.png"} <= {q.name for q in out.iterdir()}


def test_csv_and_threshold(tmp_path):
    f = tmp_path / "log.csv"
    f.write_text("prompt,reward\na,0.9\na,0.1\nb,0.7\nb,0.8\n")
    log = read_reward_log(f, threshold=0.5)
    assert log.prompts == ("a", "b") and log.k.tolist() == [1, 2] and log.n.tolist() == [2, 2]


@pytest.mark.parametrize("text,match", [
    ('{"prompt": "a", "reward": 1}\n{"prompt": "a"}\n', r"log.jsonl:2: field 'reward' is missing"),
    ('{"prompt": "a", "reward": 0.5}\n', r"not 0 or 1; pass --threshold"),
    ('{"prompt": "a", "reward": "x"}\n', r"log.jsonl:1: field 'reward': the reward must be a"),
    ("[1, 2]\n", r"log.jsonl:1: each line must be a JSON object"),
    ("{oops\n", r"log.jsonl:1: not valid JSON"),
    ("\n", r"no records"),
])
def test_bad_logs_name_the_line_and_field(tmp_path, text, match):
    f = tmp_path / "log.jsonl"
    f.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_reward_log(f)


def test_bad_arguments(tmp_path, capsys):
    with pytest.raises(ValueError, match="no such file"):
        read_reward_log(tmp_path / "none.jsonl")
    g = tmp_path / "log.txt"
    g.write_text("x")
    with pytest.raises(ValueError, match="--format"):
        read_reward_log(g)
    log = RewardLog(("a",), np.array([4]), np.array([1]))
    with pytest.raises(ValueError, match="group_sizes must be integers >= 1"):
        summarize_rewards(log, group_sizes=(0,))
    h = tmp_path / "ok.csv"
    h.write_text("prompt,reward\na,1\na,0\n")
    capsys.readouterr()
    assert main(["rewards", str(h), "--group-sizes", "a"]) == 2
    assert "--group-sizes must be integers" in capsys.readouterr().err
