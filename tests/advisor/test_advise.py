"""``grpo-theory advise`` (grpo_theory.advisor.advise): end to end on a tiny package model and on a
tiny Hugging Face checkpoint, its input errors, and the notebook notebooks/advisor.py."""

import json
import math
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest

from grpo_theory.advisor import advise as A
from grpo_theory.advisor.estimate import estimate_from_rollouts
from grpo_theory.advisor.pieces import t_quantile
from grpo_theory.experiments.cli import main
from grpo_theory.lm import task
from grpo_theory.lm.model import ModelConfig, init_params
from grpo_theory.lm.warmup import save_checkpoint

ROOT = Path(__file__).resolve().parents[2]
REWARD_MODULE = '''
def first_is_digit(text, answer):
    return float(text[:1].isdigit())
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A prompt file (task questions), a tiny random package checkpoint and a reward module."""
    d = tmp_path_factory.mktemp("advise")
    A.write_prompts(d / "prompts.jsonl", task.eval_set(n=20))
    cfg = dict(d_model=16, n_layers=1, n_heads=2)
    save_checkpoint(d / "tiny.npz", init_params(jax.random.PRNGKey(0), ModelConfig(**cfg)),
                    dict(config=cfg))
    (d / "h9_reward.py").write_text(REWARD_MODULE)
    return d


def _check_outputs(out: Path, res_text: str, figure: bool = True):
    for name in ("advice_constants.csv", "advice_groups.csv", "advice_budgets.csv",
                 "advice_prompts.csv"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    for name in ("advice.png", "advice.pdf"):
        assert (out / name).is_file() == figure, name
        assert not figure or (out / name).stat().st_size > 0, name
    c = pd.read_csv(out / "advice_constants.csv", index_col=0)
    for p in ("c1", "c2", "c3"):
        est, lo, hi = c.loc[p, ["estimate", "ci_low", "ci_high"]]
        assert np.isfinite([est, lo, hi]).all() and lo <= est <= hi, (p, est, lo, hi)
    g, lo, hi = c.loc["g_star", ["estimate", "ci_low", "ci_high"]]
    if np.isfinite(g):  # c1-hat > 0: G* finite and inside its Fieller interval
        assert lo <= g <= hi
    groups = pd.read_csv(out / "advice_groups.csv")
    assert list(groups.G) == [2, 4, 8]
    v = pd.read_csv(out / "advice_prompts.csv").V_hat.to_numpy()
    assert ((v >= 0) & (v <= 1)).all()
    # predicted share of all-equal groups: the plug-in mean of V^G + (1 - V)^G
    assert np.allclose(groups.zero_var_predicted, [np.mean(v**G + (1 - v) ** G) for G in groups.G])
    # the empirical share exists for G <= n_samples (4) only
    assert np.isfinite(groups.zero_var_empirical[:2]).all()
    assert groups.zero_var_empirical[2:].isna().all()
    # GRPO's noise scale per G: N MSE / ||grad J||^2 from the same estimates
    c1, c2, c3, gsq = (c.loc[k, "estimate"] for k in ("c1", "c2", "c3", "grad_norm_sq"))
    want = (c1 * groups.G + c2 + c3 / (groups.G - 1)) / gsq if gsq > 0 else np.nan * groups.G
    np.testing.assert_allclose(groups.noise_scale, want, rtol=1e-9)
    b = pd.read_csv(out / "advice_budgets.csv")
    assert list(b.N) == [16, 64]
    assert (b.G_low <= b.G_high).all()
    assert "recommended G per budget" in res_text
    assert "WARNING: c1 is not resolved above 0" in res_text  # 6 prompts: c1 unresolved
    # so no recommendation (never the budget N): G and B missing, "none" with the reason
    assert c.loc["c1", "ci_low"] <= 0 and b.G.isna().all() and b.B.isna().all()
    assert "G=- (none)" in res_text and "no recommendation: c1 is not resolved" in res_text


def test_advise_package_model_end_to_end(files, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(files)  # the reward module is imported from the current folder
    out = tmp_path / "out"
    code = main(["advise", "--prompts", str(files / "prompts.jsonl"), "--model",
                 str(files / "tiny.npz"), "--reward", "h9_reward:first_is_digit",
                 "--n-prompts", "6", "--n-samples", "4", "--budgets", "16,64",
                 "--group-sizes", "2,4,8", "--response-len", "3", "--out", str(out)])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "advise: pass 2 6/6 prompts" in cap.err  # plain progress lines (not a tty)
    _check_outputs(out, cap.out)


def test_advise_python_api_matches_rewards(files):
    """advise() from Python: V-hat is the per-prompt mean of the rewards it computed."""
    res = A.advise(files / "prompts.jsonl", files / "tiny.npz",
                   lambda text, answer: float(text[:1].isdigit()), n_prompts=6, n_samples=4,
                   budgets=(16,), group_sizes=(2, 4), response_len=3, progress=False)
    assert isinstance(res, A.AdviceResult) and res.files == ()
    assert np.allclose(res.prompt_values, res.estimate.rewards.mean(axis=1))
    G = res.estimate.recommended_group_size(16)  # None (c1 unresolved): NaN in the table
    assert (math.isnan(res.budgets.G[0]) if G is None else res.budgets.G[0] == G)
    e = res.estimate
    r = (e.c1 + e.c2 / 4 + e.c3 / 12) / (e.c1 + e.c2 / 4)
    assert math.isclose(res.by_group.mse_ratio_grpo_oracle[1], r, rel_tol=1e-9)


def test_advise_hf_checkpoint_end_to_end(files, tmp_path, monkeypatch, capsys):
    pytest.importorskip("tunix")
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    from support.hf_checkpoint import write_checkpoint

    ckpt = tmp_path / "qwen"
    write_checkpoint(ckpt)
    words = ["a b c", "d e", "f g h i", "j", "k l"]
    prompts = tmp_path / "words.jsonl"
    prompts.write_text("".join(json.dumps({"question": w, "answer": 1}) + "\n" for w in words))
    monkeypatch.chdir(files)
    out = tmp_path / "out"
    code = main(["advise", "--prompts", str(prompts), "--model", str(ckpt), "--reward",
                 "h9_reward:first_is_digit", "--n-prompts", "5", "--n-samples", "4",
                 "--budgets", "16,64", "--group-sizes", "2,4,8", "--response-len", "4",
                 "--out", str(out), "--no-figures"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    _check_outputs(out, cap.out, figure=False)  # the figure is checked with the package model


@pytest.mark.parametrize("lines, match", [
    (['{"question": "1+1", "answer": 2}', "not json"], r"prompts.jsonl:2: not valid JSON"),
    (['{"question": "1+1", "answer": 2}', "", '{"question": "2+2"}'],
     r"prompts.jsonl:3: .*'question' and 'answer'"),
    (['{"question": "", "answer": 2}'], r"prompts.jsonl:1: 'question' must be a non-empty"),
    ([""], r"has no prompts"),
])
def test_bad_jsonl_names_the_line(tmp_path, lines, match):
    p = tmp_path / "prompts.jsonl"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=match):
        A.read_prompts(p)


def test_cli_errors(files, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(files)
    base = ["advise", "--prompts", str(files / "prompts.jsonl"), "--model",
            str(files / "tiny.npz"), "--out", str(tmp_path / "o")]
    cases = [
        (["advise", "--prompts", str(tmp_path / "nope.jsonl")], "does not exist"),
        (base + ["--reward", "nocolon"], "must be 'module:function'"),
        (base + ["--reward", "no_such_module_h9:f"], "cannot import module 'no_such_module_h9'"),
        (base + ["--reward", "h9_reward:missing"], "has no attribute 'missing'"),
        (base + ["--n-samples", "2"], "n_samples must be >= 3"),
        (base + ["--n-prompts", "2"], "n_prompts must be >= 3"),
        (base[:3] + ["--model", str(tmp_path / "missing")], "neither one of base, instruct"),
    ]
    for argv, msg in cases:
        assert main(argv) == 2, argv
        assert msg in capsys.readouterr().err, (argv, msg)
    assert not (tmp_path / "o").exists()


def test_reward_helpers():
    assert A.load_reward(None)("12=5", 5) == 1.0  # the integer-answer reward
    assert A.exact_answer_reward("5", 5) == 1.0
    assert A.exact_answer_reward("05", 5) == 0.0 and A.exact_answer_reward("+5", 5) == 0.0
    with pytest.raises(ValueError, match="not callable"):
        A.load_reward("math:pi")


def test_reward_must_return_a_number(files):
    with pytest.raises(ValueError, match="reward must return a number, got 'yes'"):
        A.advise(files / "prompts.jsonl", files / "tiny.npz", lambda text, answer: "yes",
                 n_prompts=6, n_samples=4, response_len=3, progress=False)


def test_notebook_executes():
    import jupytext
    import nbclient

    nb = jupytext.read(ROOT / "notebooks" / "advisor.py")
    nbclient.NotebookClient(nb, kernel_name="python3", timeout=300,
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    line = next(ln for ln in text.splitlines() if ln.startswith("chosen G for N=256:"))
    g = line.split(":", 1)[1].split()[0]
    if "c1 interval excludes 0: True" in text:
        assert 2 <= int(g) <= 256
    else:  # no recommendation, with the reason (never the budget)
        assert g == "none" and "c1 is not resolved above 0" in line
    assert "G* 95% CI" in text


def test_progress_bar_on_a_terminal_and_lines_otherwise():
    import io

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, log = Tty(), io.StringIO()
    for stream in (tty, log):
        p = A._Progress(True, stream)
        for i in range(1, 21):
            p(i, 20)
    assert "20/20" in tty.getvalue() and "advise: prompts" in tty.getvalue()  # tqdm's bar
    lines = log.getvalue().splitlines()
    assert lines[-1] == "advise: pass 2 20/20 prompts" and len(lines) <= 11
    silent = io.StringIO()
    A._Progress(False, silent)(1, 2)
    assert silent.getvalue() == ""


def test_c1_warning_when_c1_is_not_resolved():
    """A loud warning, with the prompts that would resolve c1, exactly when its CI reaches 0."""
    rng = np.random.default_rng(0)
    m, n, d = 8, 6, 5
    # every prompt equally hard (V = 1/2), scores unrelated to the reward: c1 = 0
    est = estimate_from_rollouts(rng.binomial(1, 0.5, size=(m, n)).astype(float),
                                 rng.normal(size=(m, n, d)))
    lo, hi = est.c1_ci
    assert lo <= 0 < hi
    w = A.c1_warning(est)
    assert w.startswith("WARNING: c1 is not resolved above 0 from 8 prompts")
    c = est.c1 if est.c1 > 0 else hi
    need = math.ceil(m * (t_quantile(est.alpha, m) * est.bse[0] / c) ** 2)
    assert f"about {need} prompts would resolve it" in w
    # scores pointing along the reward in a prompt-dependent direction: g(x) = 0.75 e_(x mod 2),
    # c1 = 2 * 0.375^2, resolved from 40 prompts, and no warning
    m = 40
    z = rng.binomial(1, 0.5, size=(m, n)).astype(float)
    s = rng.normal(size=(m, n, d)) + 3.0 * (z - 0.5)[..., None] * np.eye(d)[np.arange(m) % 2][
        :, None, :]
    est = estimate_from_rollouts(z, s)
    assert est.c1_ci[0] > 0 and A.c1_warning(est) is None


def test_advise_reports_no_recommended_g_while_c1_is_unresolved():
    """c1's interval reaches 0: the budget table has no G (NaN) and the printed result says
    "none" with the reason (rival: G = N, the whole budget, from a c1 estimate <= 0)."""
    from grpo_theory.advisor.result import ScalingEstimate

    m = 12
    z = np.tile([0.0, 1.0, 0.0, 1.0], (m, 1))
    est = ScalingEstimate(np.array([-0.2, 1.0, 1.0, 1.0, 1.0]),
                          np.diag([0.01, 0.01, 0.01, 0.01, 0.01]),
                          {"value": z.mean(axis=1)}, z)
    by_group, budgets = A._tables(est, (2, 4), (16, 64))
    assert budgets.G.isna().all() and budgets.B.isna().all()
    assert list(budgets.N) == [16, 64]
    res = A.AdviceResult(est, est.summary(), by_group, budgets, est.prompt_values)
    text = res.text()
    assert "N=16     G=- (none)" in text and "G=16" not in text and "G=64" not in text
    assert "no recommendation: c1 is not resolved above 0" in text
