"""``advise`` on a package model that is not trained yet says what it trains, where and about
how long, then shows the warm-up's training as named phases (a bar each on a terminal)."""

import io
import re

import jax
import numpy as np
import pytest

from grpo_theory.advisor import advise as A
from grpo_theory.advisor import progress as P
from grpo_theory.lm import task
from grpo_theory.lm.checkpoints import load as loading
from grpo_theory.lm.model import ModelConfig, init_params
from grpo_theory.lm.warmup import save_checkpoint


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_training_note_names_what_where_and_how_long(tmp_path):
    with jax.enable_x64(False):  # advise runs in float32 (the test session enables x64)
        note = P.training_note("instruct", tmp_path, "quick")
        assert note is not None and "training it now" in note
        assert "quick warm-up" in note and "base 150, instruct 150, in-context 200" in note
        assert "about 1 min" in note and str(tmp_path) in note
        full = P.training_note("base", tmp_path, None)
        assert "full warm-up" in full and "about 23 min" in full and "--warmup quick" in full
        for f in loading.warmup_files(tmp_path, "quick"):  # cached: nothing to announce
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(b"")
        assert P.training_note("instruct", tmp_path, "quick") is None
        assert P.training_note("instruct", tmp_path, None) is not None  # the full one is not
    assert P.training_note(str(tmp_path / "tiny.npz"), tmp_path, "quick") is None
    with pytest.raises(ValueError, match="warmup"):
        P.training_note("instruct", tmp_path, "medium")


def test_warmup_lines_become_named_phases():
    """Training lines drive one phase per stage (rival: lines dropped, a silent minute)."""
    tty, log = _Tty(), io.StringIO()
    for stream in (tty, log):
        bar = P.Progress(True, stream)
        fn = P.warmup_log(bar)
        fn("not a training line")
        for name, n in (("base", 150), ("instruct", 150), ("icl", 200)):
            for done in range(50, n + 1, 50):
                fn(f"[warmup {name}] step {done}/{n} loss 1.000 (10 tok/s)")
        bar.stage("loading", 0, 1)
        bar.stage("loading", 1, 1)
    text = log.getvalue()
    assert "advise: training the warm-up's base model (1/3) ..." in text
    assert "advise: training the warm-up's base model (1/3) 150/150" in text
    assert "advise: training the warm-up's in-context model (3/3) 200/200" in text
    assert "not a training line" not in text
    assert "200/200" in tty.getvalue() and "(2/3)" in tty.getvalue()


def test_advise_announces_and_shows_the_training(tmp_path, monkeypatch, capsys):
    """advise with a package model whose warm-up is not cached: the note first, then the
    training phases, then the run (training stubbed: the warm-up's lines and a tiny model)."""
    A.write_prompts(tmp_path / "prompts.jsonl", task.eval_set(n=8))
    cfg = dict(d_model=16, n_layers=1, n_heads=2)
    save_checkpoint(tmp_path / "tiny.npz", init_params(jax.random.PRNGKey(0),
                                                       ModelConfig(**cfg)), dict(config=cfg))
    real = A.load_policy

    def trained(spec, options, *, cache_dir, warmup, log):
        assert spec == "instruct" and warmup == "quick"
        for done in (75, 150):
            log(f"[warmup base] step {done}/150 loss 2.0 (1 tok/s)")
        return real(tmp_path / "tiny.npz", options)

    monkeypatch.setattr(A, "load_policy", trained)
    with jax.enable_x64(False):
        A.advise(tmp_path / "prompts.jsonl", "instruct", lambda t, a: float(t[:1].isdigit()),
                 n_prompts=6, n_samples=4, budgets=(16,), group_sizes=(2, 4), response_len=3,
                 cache_dir=tmp_path / "cache", warmup="quick", figure=False)
    err = capsys.readouterr().err
    i = err.index("advise: model 'instruct' is the package's quick warm-up")
    j = err.index("advise: training the warm-up's base model (1/3) 150/150")
    k = err.index("advise: sampling responses")
    assert i < j < k


def _hf_policy(tmp_path):
    pytest.importorskip("tunix")
    pytest.importorskip("safetensors")
    from support.hf_checkpoint import write_checkpoint

    from grpo_theory.lm.checkpoints import from_pretrained

    write_checkpoint(tmp_path / "qwen")
    return tmp_path / "qwen", from_pretrained(tmp_path / "qwen")


def test_sampling_a_checkpoint_reports_its_blocks(tmp_path):
    """sample_blocked on a Hugging Face checkpoint reports (0, k), then (i, k) after each of
    its k blocks, and samples the same responses as without the callback (rival: progress
    that changes the key schedule or the blocks)."""
    _, pol = _hf_policy(tmp_path)
    x = pol.encode(["a b c", "d e", "f g h i", "j", "k l", "m n o"])
    p = x.shape[1]
    seen = []
    y = pol.sample_blocked(3, x, 4, max_elems=2 * p * p, progress=lambda *a: seen.append(a))
    assert seen == [(0, 3), (1, 3), (2, 3), (3, 3)]
    np.testing.assert_array_equal(y, pol.sample_blocked(3, x, 4, max_elems=2 * p * p))
    one = []
    pol.sample_blocked(3, x, 4, progress=lambda *a: one.append(a))
    assert one == [(0, 1), (1, 1)]


@pytest.mark.filterwarnings("ignore:WARNING. c1 is not resolved")
def test_advise_on_a_checkpoint_names_its_phases_in_plain_lines(tmp_path, capsys):
    """advise on a Hugging Face checkpoint, stderr not a terminal: one start line and done/total
    lines with seconds per phase (loading, sampling, scores, pass 2); progress=False: silent
    (rival: a sampling phase that says nothing while it runs)."""
    ckpt, _ = _hf_policy(tmp_path)
    rows = [dict(question=q, answer=1) for q in ("a b c", "d e", "f g h i", "j", "k l")]
    kw = dict(n_prompts=5, n_samples=4, budgets=(16,), group_sizes=(2, 4), response_len=4,
              figure=False)
    reward = lambda text, answer: float(text[:1].isdigit())
    A.advise(rows, str(ckpt), reward, progress=True, **kw)
    err = capsys.readouterr().err.splitlines()
    for desc in ("loading the model", "sampling responses", "per-sample scores"):
        assert f"advise: {desc} ..." in err, (desc, err)
        done = [ln for ln in err if ln.startswith(f"advise: {desc} ") and "/" in ln]
        assert done and re.fullmatch(rf"advise: {desc} (\d+)/\1 \(\d+\.\ds\)", done[-1]), err
    assert any(ln.startswith("advise: pass 2 5/5 prompts") for ln in err), err
    assert not any("\r" in ln for ln in err)  # plain lines, no bar
    A.advise(rows, str(ckpt), reward, progress=False, **kw)
    assert "advise" not in capsys.readouterr().err
