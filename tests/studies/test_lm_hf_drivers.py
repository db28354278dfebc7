"""lm-mse, lm-groupsize and lm-rank on a Hugging Face checkpoint (``Settings.model``,
``--model PATH``).

A tiny random checkpoint in the Hugging Face layout (``support.hf_checkpoint.write_checkpoint``) is
biased so that the arithmetic task's rewards are neither all 0 nor all 1: a constant direction in
the embeddings makes digits the likely first token and a digit marker makes EOS the likely second
one, so ``[digit, EOS]`` responses are common; the first token favours 1, 2 and 3, so questions
with those answers have pass rates near 0.25 and the others near 0.05. Both drivers run once on it
(module fixture, shared compiled shapes: 32 questions x 16 responses of 2 tokens in both), then the
CLI's error cases and the cell identities of the package runs (model=None) are checked. lm-rank
runs on it too (32 questions x one group of 16, lm-mse's sampled shape; its 2-step GRPO run cell is
a slow test), and its package cells keep their identities.
"""

import dataclasses
import hashlib
import json

import numpy as np
import pytest

pytest.importorskip("tunix")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from support.hf_checkpoint import write_checkpoint  # noqa: E402

from grpo_theory.experiments import cli  # noqa: E402
from grpo_theory.experiments.runner import (Cell, Experiment, report_section, run_experiment,
                                            setting_name)
from grpo_theory.experiments.checks import Section, check
from grpo_theory.experiments.store import cell_hash  # noqa: E402
from grpo_theory.lm.training.grpo import task_tokens  # noqa: E402
from grpo_theory.lm.task import TaskConfig, eval_set  # noqa: E402
from grpo_theory.studies import lm_groupsize, lm_mse, lm_rank  # noqa: E402

DIGITS = slice(30, 40)  # token ids of "0".."9" in support.hf_checkpoint's tokenizer
FAVOURED = slice(31, 34)  # "1", "2", "3": the likely first tokens
EOS = 2
#: division questions with single-digit operands: every answer is one digit, one token
TASK = TaskConfig(hard_fraction=0.0, category_probs=(0, 0, 0, 1, 0))
#: sha256 over (driver, setting, cell id, kind, cell hash) of every cell of both drivers'
#: quick and full settings, computed with the drivers before Settings.model existed
PACKAGE_CELLS_DIGEST = "39d008bad283c3cd6b4f65e081bd8909724749164423ffee57e60ae63704c3f1"
#: the digest of every cell now (lm-groupsize's quick setting at 8 seeds)
CELLS_DIGEST_8_SEEDS = "327d3bf124e5d3e13c96fee932f1a109407a528c6f77e00f30e15265ffeaa07a"
#: the same digest over lm-rank's quick and full settings, before its Settings.model existed
RANK_CELLS_DIGEST = "fb19947b1721cc606bdce2122870b9e773eebc74f0d589ba434f1d3164d4f85e"


def biased_checkpoint(path):
    """write_checkpoint's weights with the digit / EOS bias of the module doc; returns path."""
    from safetensors.numpy import load_file, save_file

    cfg, _ = write_checkpoint(path, shards=1)
    cfg["num_hidden_layers"] = 1  # one layer: half the compilation (layer 1's tensors unused)
    (path / "config.json").write_text(json.dumps(cfg))
    w = load_file(str(path / "model.safetensors"))
    emb, head = w["model.embed_tokens.weight"], w["lm_head.weight"]
    emb[:, 0] += 30.0
    emb[DIGITS, 1] += 30.0
    head[:, 0], head[:, 1] = -1.0, 0.0
    head[DIGITS, 0], head[DIGITS, 1], head[EOS, 1] = 1.0, -3.0, 3.0
    head[FAVOURED, 0] = 2.0
    for k in ("self_attn.o_proj", "mlp.down_proj"):  # small layer outputs: the bias dominates
        w[f"model.layers.0.{k}.weight"] *= 0.05
    save_file(w, str(path / "model.safetensors"))
    return path


def _small(mod, path, **kw):
    q = mod.SETTINGS["quick"]
    return dataclasses.replace(q, model=str(path),
                               warmup=dataclasses.replace(q.warmup, task=TASK), **kw)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return biased_checkpoint(tmp_path_factory.mktemp("hf") / "tiny-qwen2")


@pytest.fixture(scope="module")
def runs(ckpt, tmp_path_factory):
    """Both drivers on the checkpoint: ``(settings, RunResult)`` by driver name."""
    root = tmp_path_factory.mktemp("hf-drivers")
    mse = _small(lm_mse, ckpt, n_questions=32, group_sizes=(2, 4, 16), model_samples=16,
                 model_response_len=2, model_chunk=16)
    none = lm_groupsize.Sweep(budgets=(8,), group_sizes=(2,), seeds=0)
    gs = _small(lm_groupsize, ckpt, budgets=(8,), group_sizes=(2, 4), seeds=1, steps=2,
                checkpoints=(1, 2), lr=3e-2, n_eval=32, n_pool=64, gstar_samples=16,
                model_chunk=16, knob=dataclasses.replace(none, hard_fractions=()),
                practical=none)
    return {mod.NAME: (s, run_experiment(mod.EXPERIMENT, root, s, seed=0, figures=True,
                                         progress=False, verbose=False))
            for mod, s in ((lm_mse, mse), (lm_groupsize, gs))}


def test_lm_mse_on_a_checkpoint(runs, ckpt):
    s, r = runs[lm_mse.NAME]
    d = r.tables["model"]
    assert r.n_cells == 1 and len(r.tables["table"]) == 0
    assert set(d.model) == {str(ckpt.resolve())} and str(ckpt.resolve()) in d.config.iloc[0]
    assert sorted(set(zip(d.G, d.estimator))) == sorted(
        (g, e) for g in s.group_sizes for e in ("vanilla", "oracle", "grpo", "grpo_mean"))
    m = d.pivot_table(index="G", columns="estimator", values="mse")
    r0 = d.iloc[0]
    b, g = r0.n_questions, m.index.to_numpy()
    # Theorem 7's finite-(B, G) forms: grpo - oracle = c3/(BG(G-1)), oracle = c1/B + c2/(BG)
    np.testing.assert_allclose(m.grpo - m.oracle, r0.c3 / (b * g * (g - 1)), rtol=1e-9)
    np.testing.assert_allclose(m.oracle, r0.c1 / b + r0.c2 / (b * g), rtol=1e-9)
    assert (d.ci_low <= d.mse).all() and (d.mse <= d.ci_high).all()
    assert 0 < r0.frac_varied and 0 < r0.J < 1 and r0.c3_low > 0
    ratio = (m.grpo / m.oracle).to_numpy()
    assert np.all(np.diff(ratio) < 0) and np.all(ratio > 1)
    assert r.verdict == "PASS", r.section.checks_markdown()
    assert "Not run for a model" in r.section.markdown and len(r.section.checks) == 2


def test_lm_groupsize_on_a_checkpoint(runs, ckpt):
    from grpo_theory.lm import from_pretrained

    s, r = runs[lm_groupsize.NAME]
    tr, pr = r.tables["train"], r.tables["prediction_model"]
    assert len(r.tables["prediction"]) == 0 and len(pr) == 1
    assert all(str(ckpt.resolve()) in c for c in tr.config)
    assert sorted(set(zip(tr.G, tr.step))) == [(2, 0), (2, 1), (2, 2), (4, 0), (4, 1), (4, 2)]
    assert tr.accuracy.between(0, 1).all()
    # the held-out accuracy is the exact mean pi(y*|x) of the canonical tokenization
    pol = from_pretrained(ckpt)
    x, canon = task_tokens(pol, eval_set(TASK).subset(np.arange(s.n_eval)))
    assert canon.shape[1] == 2 and np.all(canon[:, 1] == EOS)
    exact = float(np.mean(np.exp(np.asarray(pol.log_probs(x, canon), np.float64))))
    np.testing.assert_allclose(tr[tr.step == 0].accuracy, exact, rtol=1e-5)
    np.testing.assert_allclose(pr.J.iloc[0], exact, rtol=1e-5)
    assert not np.allclose(tr[tr.step == 2].accuracy, exact)  # training moved the policy
    p = pr.iloc[0]
    for c in ("c1", "c2", "c3"):
        assert p[f"{c}_low"] <= p[c] <= p[f"{c}_high"]
    assert p.G_low <= p.G_continuous <= p.G_high and p.n_samples == s.gstar_samples
    by = {c.name: c.verdict for c in r.section.checks}
    assert by["every held-out accuracy is a probability (in [0, 1])"] == "PASS"
    assert "Advisor's estimates there" in r.section.markdown


def _cells_digest(*mods, keep=lambda mod, name, c: True) -> str:
    """sha256 over (driver, setting, cell id, kind, cell hash) of every cell of the drivers'
    named settings (those ``keep`` keeps), asserting on the way that none of them has a
    model."""
    h = hashlib.sha256()
    for mod in mods:
        for name, s in mod.SETTINGS.items():
            assert s.model is None and setting_name(mod.EXPERIMENT, s) == name
            for c in mod.EXPERIMENT.cell_list(s):
                assert "model" not in c.config
                if not keep(mod, name, c):
                    continue
                h.update(f"{mod.NAME}/{name}/{c.id}/{c.kind}/"
                         f"{cell_hash(mod.NAME, name, c.id, c.config, 0)}\n".encode())
    return h.hexdigest()


def _first_two_seeds(mod, name, c):
    """The cells lm-groupsize's quick setting had before it went from 2 to 8 seeds."""
    return not (mod is lm_groupsize and name == "quick" and c.config.get("sweep") == "main"
                and c.config.get("run_seed", 0) >= 2)


def test_package_cells_keep_their_identity():
    """model=None: the cells, ids and hashes of the quick and full settings are unchanged (the
    quick lm-groupsize cells of seeds 2-7, added later, aside); the whole list is pinned too."""
    assert _cells_digest(lm_mse, lm_groupsize, keep=_first_two_seeds) == PACKAGE_CELLS_DIGEST
    assert _cells_digest(lm_mse, lm_groupsize) == CELLS_DIGEST_8_SEEDS


def _rank_checks(r, ckpt, s):
    """lm-rank's result ``r`` on the checkpoint: PASS, the model's answer-only rows, the gated
    quantities, ranks <= G, exact J; returns the (table, run) tables."""
    assert r.verdict == "PASS", r.section.checks_markdown()
    assert r.setting.startswith("custom-")
    d, run = r.tables["table"], r.tables["run"]
    for t in (d, run) if len(run) else (d,):
        assert set(zip(t.policy, t.fmt)) == {("model", "answer")} and t.exact_V.all()
        assert sorted(t.G.unique()) == sorted(s.group_sizes)
        m = t[t.n_mixed > 0]
        assert len(m) == len(t)  # pass rates near 0.05-0.25: mixed groups at every G
        assert (m.identity <= 1e-12).all() and (m.class_n <= 2).all() and (m.excess <= 0).all()
        assert ((m.erank >= 1) & (m.erank <= m.G) & (m.n90 <= m.G)).all()
        assert ((m.distinct >= 2) & (m.distinct <= m.G)).all()
    # J is the exact mean pi(y*|x) of the checkpoint's canonical tokenization
    pol = lm_mse.model_policy(str(ckpt.resolve()))
    x, canon = task_tokens(pol, eval_set(TASK).subset(np.arange(s.n_questions)))
    exact = float(np.mean(np.exp(np.asarray(pol.log_probs(x, canon), np.float64))))
    np.testing.assert_allclose(d.J, exact, rtol=1e-5)
    assert int(d.dim.iloc[0]) == pol.dim
    assert str(ckpt.resolve()) in r.section.markdown
    assert "trace format is not run for a model" in r.section.markdown
    assert r.section.title == f"Rank of {ckpt.name}'s group gradients"
    return d, run, exact


def test_lm_rank_on_a_checkpoint(ckpt, tmp_path):
    """lm-rank on the checkpoint, one answer-only cell: 32 questions x one group of 16 (G = 2,
    4, 16 are its prefixes), lm-mse's sampled shapes (compiled sampler reused)."""
    s = _small(lm_rank, ckpt, n_questions=32, group_sizes=(2, 4, 16), n_reps=1, n_ref=16,
               chunk=64, run=None)
    assert [(c.id, c.kind, c.config["model"]) for c in lm_rank.EXPERIMENT.cell_list(s)] == [
        ("model_answer", "table", str(ckpt.resolve()))]
    r = run_experiment(lm_rank.EXPERIMENT, tmp_path, s, seed=0, figures=False, progress=False,
                       verbose=False)
    d, run, _ = _rank_checks(r, ckpt, s)
    assert len(run) == 0 and len(d) == 3


@pytest.mark.slow
def test_lm_rank_run_on_a_checkpoint(ckpt, tmp_path):
    """lm-rank's GRPO run cell from the checkpoint (2 steps; ~20 s of compilation)."""
    s = _small(lm_rank, ckpt, n_questions=32, group_sizes=(2, 4), n_reps=1, n_ref=4, chunk=64,
               run=lm_rank.Run(group_size=4, budget=8, steps=2, checkpoints=(1, 2), lr=3e-2,
                               n_pool=64))
    assert [(c.id, c.kind) for c in lm_rank.EXPERIMENT.cell_list(s)] == [
        ("model_answer", "table"), ("run_model_answer", "run")]
    r = run_experiment(lm_rank.EXPERIMENT, tmp_path, s, seed=0, figures=True, progress=False,
                       verbose=False)
    d, run, exact = _rank_checks(r, ckpt, s)
    assert sorted(run.step.unique()) == [0, 1, 2] and (run.train_G == 4).all()
    np.testing.assert_allclose(run[run.step == 0].J, exact, rtol=1e-5)
    assert not np.allclose(run[run.step == 2].J, exact)  # training moved the policy
    assert (tmp_path / lm_rank.NAME / "lm_rank.png").exists()
    # the Gram route on the checkpoint (EOS then pad_id in the responses) equals the Gram of
    # its dense scores
    from grpo_theory.experiments.lm_support.rank import dense_scores, group_score_grams

    pol = lm_mse.model_policy(str(ckpt.resolve()))
    x, _ = task_tokens(pol, eval_set(TASK).subset(np.arange(3)))
    y = np.asarray(pol.sample_blocked(1, np.repeat(x, 4, 0), 3))
    assert np.any(y == pol.pad_id)
    S = dense_scores(pol, np.repeat(x, 4, 0), y).reshape(3, 4, -1)
    np.testing.assert_allclose(group_score_grams(pol, x, y.reshape(3, 4, -1), chunk=4),
                               np.einsum("bgd,bhd->bgh", S, S), rtol=1e-4, atol=1e-8)


def test_rank_package_cells_keep_their_identity():
    """lm-rank, model=None: the cells, ids and hashes of the quick and full settings."""
    assert _cells_digest(lm_rank) == RANK_CELLS_DIGEST


def test_cli_model_errors(tmp_path, ckpt, capsys):
    out = tmp_path / "out"
    assert cli.main(["lm-mse", "--model", str(tmp_path / "absent"), "--out", str(out)]) == 2
    assert "is neither a directory nor a .gguf file" in capsys.readouterr().err
    assert cli.main(["mse-table", "--model", str(ckpt), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "accepted only by" in err and "lm-mse" in err and "lm-groupsize" in err
    assert "lm-rank" in err
    (tmp_path / "empty").mkdir()  # a directory that is not a checkpoint
    assert cli.main(["lm-groupsize", "--model", str(tmp_path / "empty"), "--out",
                     str(out)]) == 2
    assert "config.json" in capsys.readouterr().err
    assert not out.exists()  # nothing ran, nothing written
    with pytest.raises(ValueError, match="is neither a directory nor a .gguf file"):
        run_experiment(lm_mse.EXPERIMENT, out, dataclasses.replace(
            lm_mse.SETTINGS["quick"], model=str(tmp_path / "absent")), progress=False)
    assert not (out / "lm-mse" / "cells").exists()


@dataclasses.dataclass(frozen=True)
class _Toy:
    n: int
    model: str | None = None


def _toy_cell(config, key):
    return dict(x=float(config["n"]), model=config.get("model", "none"))


def _toy_report(tables, s):
    t = tables["table"]
    return Section("toy", f"model {s.model}", [check("x", (t.x == s.n).all(), t.x.to_numpy(),
                                                       kind="sanity")])


TOY = Experiment(name="toy-model", claim="toy", settings={"quick": _Toy(2)},
                 cells=lambda s: [Cell("a", dict(n=s.n, **({"model": s.model} if s.model
                                                             else {})))],
                 cell=_toy_cell, schema={"table": dict(x="float", model="str")},
                 report=_toy_report)


def test_model_setting_name_and_report(tmp_path):
    """A named setting on a model is ``<name>+model-<hash>``; its report is rebuilt later."""
    s = dataclasses.replace(TOY.settings["quick"], model="/m/one")
    name = setting_name(TOY, s)
    assert name.startswith("quick+model-") and name != setting_name(
        TOY, dataclasses.replace(s, model="/m/two"))
    assert setting_name(TOY, dataclasses.replace(s, n=3)).startswith("custom-")
    res = run_experiment(TOY, tmp_path, s, progress=False, verbose=False)
    assert res.verdict == "PASS" and res.setting == name
    sec, manifest = report_section(TOY, tmp_path)
    assert manifest["setting"] == name and sec.verdict == "PASS" and "/m/one" in sec.markdown


def test_chat_template_prompts(ckpt, tmp_path):
    """A checkpoint with a chat template: task_tokens renders the user message through it."""
    import shutil

    from grpo_theory.lm import from_pretrained
    from grpo_theory.lm.training.grpo import CHAT_PROMPT, PLAIN_PROMPT

    tmpl = ("{% for m in messages %}<|eot|>{{ m['role'] }} {{ m['content'] }}<|im_end|>"
            "{% endfor %}{% if add_generation_prompt %}<|eot|>assistant {% endif %}")
    path = tmp_path / "chat"
    shutil.copytree(ckpt, path)
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": tmpl}))
    pol, plain = from_pretrained(path), from_pretrained(ckpt)
    q = eval_set(TASK).subset(np.arange(3))
    want = [f"<|eot|>user {CHAT_PROMPT.format(question=t)}<|im_end|><|eot|>assistant "
            for t in q.text]
    assert pol.chat([CHAT_PROMPT.format(question=t) for t in q.text]) == want
    assert pol.chat("x", system="s")[0].startswith("<|eot|>system s<|im_end|><|eot|>user x")
    x, canon = task_tokens(pol, q)
    np.testing.assert_array_equal(x, pol.encode(want))
    np.testing.assert_array_equal(task_tokens(plain, q)[0], plain.encode(
        [PLAIN_PROMPT.format(question=t) for t in q.text]))
    np.testing.assert_array_equal(canon, task_tokens(plain, q)[1])
    with pytest.raises(ValueError, match="no chat_template"):
        plain.chat("x")
