"""Malformed inputs of the study entry points (``python -m grpo_theory.studies...``): every flag
that cannot work refused by argparse before any sampling, one error line naming the flag, file
or field (a traceback only with ``GRPO_THEORY_DEBUG=1``), resume keys that hold the model's
content and the study's prompts, and damaged, truncated or foreign cells and checkpoints
recomputed with a warning naming the file, or refused by name; never reused silently."""

import json
import os
import subprocess
import sys
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest

from grpo_theory.experiments import study_cli as C
from grpo_theory.studies.allocation_lm import study as alm
from grpo_theory.studies.smollm2 import measured as MS
from grpo_theory.studies.smollm2 import study as S
from grpo_theory.studies.trl_scheduler import allocation as trl_alloc
from grpo_theory.studies.trl_scheduler import study as trl

# --- the shared argparse types --------------------------------------------------------------------


@pytest.mark.parametrize("parse, text", [
    (C.positive_int, "2.5"), (C.positive_int, "0"), (C.positive_int, "1e3"), (C.positive_int, "x"),
    (C.nonnegative_int, "-1"), (C.positive_float, "nan"), (C.positive_float, "inf"),
    (C.positive_float, "0"), (C.positive_float, "abc"), (C.int_list(2), "2,2"),
    (C.int_list(2), "4,2"), (C.int_list(2), "2,,4"), (C.int_list(2), "1,2"),
    (C.int_list(2), "2,x"), (C.name_list(("a", "b")), "a,c"), (C.name_list(("a", "b")), "a,a")])
def test_argparse_types_refuse_what_cannot_work(parse, text):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        parse(text)


def test_argparse_types_keep_good_values():
    assert C.positive_int(" 7 ") == 7 and C.nonnegative_int("0") == 0
    assert C.positive_float("1e-3") == 1e-3 and C.int_list(2)("2,4,8") == (2, 4, 8)
    assert C.name_list(("a", "b"))("b,a") == ("b", "a")


# --- every entry point: argparse refuses before any sampling, naming the flag --------------------

ENTRY = [
    (trl.main, ["--steps", "2.5"], "--steps"), (trl.main, ["--budget", "0"], "--budget"),
    (trl_alloc.main, ["--width", "x"], "--width"), (alm.main, ["--lr", "nan"], "--lr"),
    (alm.main, ["--seeds", "-1"], "--seeds"), (alm.main, ["--warmup", "medium"], "--warmup"),
    (S.main, ["--model", "m", "--n-samples", "2.0"], "--n-samples"),
    (S.main, ["--model", "m", "--tasks", "add1,div7"], "--tasks"),
    (S.main, ["--model", "m", "--tasks", "add1,add1"], "--tasks"),
    (MS.main, ["--model", "m", "--group-sizes", "4,2"], "--group-sizes"),
    (MS.main, ["--model", "m", "--group-sizes", "2,2"], "--group-sizes"),
    (MS.main, ["--model", "m", "--budgets", "8,x"], "--budgets"),
    (MS.main, ["--model", "m", "--checkpoint", "nan"], "--checkpoint")]


@pytest.mark.parametrize("main, argv, flag", ENTRY)
def test_flags_that_cannot_work_are_refused_by_argparse(main, argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error: argument " + flag in err


@pytest.mark.parametrize("main, argv, words", [
    (trl.main, ["--budget", "50"], "budget 50 must be a multiple"),
    (trl_alloc.main, ["--budget", "36", "--prompts-per-step", "12"], "budget 36 must be"),
    (S.main, ["--model", "MISSING"], "--model MISSING: no such file"),
    (S.main, ["--model", "FILE", "--task", "mul1", "--tasks", "add1"], "--task 'mul1'"),
    (S.main, ["--model", "FILE", "--n-study", "40", "--n-prompts", "8"], "--n-study"),
    (MS.main, ["--model", "FILE", "--group-sizes", "4,8", "--budgets", "6"], "--budgets 6"),
    (MS.main, ["--model", "FILE", "--group-sizes", "4,8", "--rows", "6"], "--rows"),
    (MS.main, ["--model", "FILE", "--study", "NOSTUDY"], "prompts.csv is missing")])
def test_settings_that_cannot_work_are_one_line_before_any_model_loads(main, argv, words, tmp_path,
                                                                       capsys, monkeypatch):
    """A bad combination is one ``error:`` line and exit 2, before the model loads (the rival,
    loading first, would fail on the junk model file instead)."""
    model = tmp_path / "junk.gguf"
    model.write_bytes(b"not a model")
    argv = [str(tmp_path / "missing") if a == "MISSING" else str(model) if a == "FILE"
            else str(tmp_path / "nostudy") if a == "NOSTUDY" else a for a in argv]
    words = words.replace("MISSING", str(tmp_path / "missing"))
    monkeypatch.setenv("GRPO_THEORY_DEBUG", "0")
    assert main(argv + ["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: " in err[0] and words in err[0], err
    assert not (tmp_path / "out").exists()


def test_one_line_without_traceback_and_the_debug_variable(tmp_path, monkeypatch):
    """As ``grpo-theory``: one line, exit 2 (a real process); ``GRPO_THEORY_DEBUG=1``
    re-raises the exception with its traceback."""
    argv = ["--model", str(tmp_path / "none.gguf"), "--out", str(tmp_path / "o")]
    env = dict(os.environ, GRPO_THEORY_DEBUG="0")
    p = subprocess.run([sys.executable, "-m", "grpo_theory.studies.smollm2"] + argv,
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [
        f"python -m grpo_theory.studies.smollm2: error: --model {tmp_path / 'none.gguf'}: "
        "no such file"]
    monkeypatch.setenv("GRPO_THEORY_DEBUG", "1")
    with pytest.raises(ValueError, match="--model"):
        S.main(argv)


def test_run_main_turns_any_exception_into_one_line(capsys, monkeypatch):
    monkeypatch.delenv("GRPO_THEORY_DEBUG", raising=False)

    def body(argv):
        raise KeyError("x")

    assert C.run_main("prog", body, []) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("prog: error: KeyError")
    monkeypatch.setenv("GRPO_THEORY_DEBUG", "1")
    with pytest.raises(KeyError):
        C.run_main("prog", body, [])


# --- resume keys: the model by content, the study's prompts, every setting -----------------------

def test_the_model_is_keyed_by_content_not_file_name(tmp_path):
    """Two models with the same file name and other bytes resume nothing of each other (the
    rival, the file name, gives equal keys)."""
    a, b = tmp_path / "a" / "m.gguf", tmp_path / "b" / "m.gguf"
    for p, data in ((a, b"weights one"), (b, b"weights two")):
        p.parent.mkdir()
        p.write_bytes(data)
    ka = S.StudyConfig(model=str(a)).key("seed")
    kb = S.StudyConfig(model=str(b)).key("seed")
    assert ka != kb and S.model_hash(a) != S.model_hash(b)
    assert ka == S.StudyConfig(model=str(a)).key("seed")
    b.write_bytes(b"weights one")  # the same content under another folder: the same key
    assert S.StudyConfig(model=str(b)).key("seed") == ka
    ma, mb = (MS.MeasuredConfig(model=str(p)) for p in (a, tmp_path / "b" / "m.gguf"))
    assert ma.key("pop") == mb.key("pop") and ma.key("pop") != ma.key("other prompts")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "w.bin").write_bytes(b"1")
    h1 = C.content_hash(tmp_path / "d")
    (tmp_path / "d" / "w.bin").write_bytes(b"2")
    assert C.content_hash(tmp_path / "d") != h1


def test_the_measured_key_holds_the_study_prompts():
    pop = dict(task="add1", questions=["q1", "q2"], prefills=["p1", "p2"],
               answers=np.array([1, 2]), response_len=4)
    other = dict(pop, questions=["q1", "q3"])
    assert MS._population_digest(pop) != MS._population_digest(other)
    assert MS._population_digest(pop) == MS._population_digest(dict(pop))


# --- readers that name the file and the field ------------------------------------------------------

def test_readers_name_the_file_and_the_field(tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match="t.csv is not a readable CSV"):
        C.read_csv(bad)
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="t.csv lacks the column 'config'"):
        C.read_csv(bad, ("a", "config"))
    j = tmp_path / "m.json"
    j.write_text("{not json")
    with pytest.raises(ValueError, match="m.json is not valid JSON"):
        C.read_json(j)
    j.write_text("[1]")
    with pytest.raises(ValueError, match="m.json must hold a JSON object"):
        C.read_json(j)
    j.write_text("{}")
    with pytest.raises(ValueError, match="m.json lacks the field 'task'"):
        C.read_json(j, ("task",))
    z = tmp_path / "r.npz"
    np.savez(z, key="k")
    with pytest.raises(ValueError, match="r.npz lacks the array 'rewards'"):
        C.load_npz(z, ("key", "rewards"))
    z.write_bytes(z.read_bytes()[:40])
    with pytest.raises(ValueError, match="r.npz is not a readable .npz"):
        C.load_npz(z, ("key",))


# --- cells: damaged, truncated or foreign ones are recomputed with a warning ----------------------

CFG = trl.StudyConfig(seeds=1, steps=3, budget=48, n_prompts=16, every=1)


def _trl_cell(cfg, arm, seed):
    return pd.DataFrame(dict(arm=arm, seed=seed, step=[1, 2, 3], reward=[0.1, 0.2, 0.3],
                             config=json.dumps(asdict(cfg), sort_keys=True), version="v"))


@pytest.mark.parametrize("damage, why", [
    (lambda df: df.iloc[:2], "truncated"), (lambda df: df.drop(columns="config"), "lacks"),
    (lambda df: df.assign(reward=["0.1", "x", "0.3"]), "damaged"),
    (lambda df: df.assign(config="{}"), "another configuration"),
    (lambda df: df.assign(seed=5), "truncated or damaged"), (None, "not a readable CSV")])
def test_a_bad_trl_cell_is_recomputed_with_a_warning(tmp_path, damage, why):
    """The rival (``len(df) == steps`` and the config, read by ``pd.read_csv``) reuses a
    truncated-then-padded cell or fails with a raw error; here each is recomputed, by name."""
    path = tmp_path / "cells" / "fixed-8-seed0.csv"
    path.parent.mkdir()
    good = _trl_cell(CFG, "fixed-8", 0)
    if damage is None:
        path.write_bytes(b"\x00\xff\xfe" * 50)
    else:
        damage(good).to_csv(path, index=False)
    calls = []

    def run_cell(cfg, arm, seed):
        calls.append((arm, seed))
        return _trl_cell(cfg, arm, seed)

    with pytest.warns(UserWarning, match=f"cell .*fixed-8-seed0.csv is recomputed: .*{why}"):
        frames = trl.run_cells([("fixed-8", 0)], CFG, 3, tmp_path, run_cell, "t", progress=False)
    assert calls == [("fixed-8", 0)] and len(frames[0]) == 3
    # the rewritten cell is reused silently
    again = trl.run_cells([("fixed-8", 0)], CFG, 3, tmp_path, run_cell, "t", progress=False)
    assert calls == [("fixed-8", 0)] and len(again[0]) == 3


def _alm_cell(rule="fixed", seed=0, n=5, budget=40, model="h", gstar=4, cfg_text="c"):
    return pd.DataFrame(dict(rule=rule, seed=seed, step=np.arange(n),
                             rollouts=np.linspace(0, budget, n), accuracy=0.5, G_star=gstar,
                             budget=budget, config=cfg_text, model_sha256=model))


@pytest.mark.parametrize("df, why", [
    (_alm_cell().iloc[:3], "do not reach the budget"), (_alm_cell(model="other"), "start policy"),
    (_alm_cell(gstar=8), "start policy or G"), (_alm_cell(cfg_text="d"), "another configuration"),
    (_alm_cell().drop(columns="model_sha256"), "lacks the column 'model_sha256'"),
    (_alm_cell().assign(accuracy=np.nan), "damaged")])
def test_a_bad_allocation_lm_cell_is_refused_with_its_reason(tmp_path, df, why):
    """A truncated run (the rival ``len(df) > 0`` takes it as finished, dropping its seed from
    the later budgets) or another start policy is refused with its reason."""
    path = tmp_path / "fixed-seed0.csv"
    df.to_csv(path, index=False)
    with pytest.raises(ValueError, match=why):
        alm.read_cell(path, "fixed", 0, "c", "h", 4, 40, 2)
    good = tmp_path / "good.csv"
    _alm_cell().to_csv(good, index=False)
    assert len(alm.read_cell(good, "fixed", 0, "c", "h", 4, 40, 2)) == 5
    with pytest.warns(UserWarning, match="recomputed"):
        assert C.reuse_or_recompute(path, lambda p: alm.read_cell(p, "fixed", 0, "c", "h", 4,
                                                                   40, 2)) is None


def test_the_start_policy_hash_follows_the_parameters():
    from types import SimpleNamespace

    p = SimpleNamespace(params={"w": np.zeros(3)})
    q = SimpleNamespace(params={"w": np.array([0.0, 0.0, 1e-30])})
    assert alm.policy_hash(p) != alm.policy_hash(q) and alm.policy_hash(p) == alm.policy_hash(p)


@pytest.mark.parametrize("field, value", [("steps", 2.0), ("lr", float("nan")),
                                          ("grid", (4, 2)), ("grid", (2, 2)), ("gstar", 1),
                                          ("min_change", 0.5)])
def test_allocation_lm_settings_checked(field, value):
    with pytest.raises(ValueError, match=field):
        alm.StudyConfig(**{field: value})


@pytest.mark.parametrize("field, value", [("steps", 2.5), ("learning_rate", float("nan")),
                                          ("min_change", 0.9)])
def test_trl_study_settings_checked(field, value):
    with pytest.raises(ValueError, match=field):
        trl.StudyConfig(**{field: value})


# --- the measured study's checkpoint and the study's files ----------------------------------------

def _work(tmp_path, K=3, groups=2, counts=None, sums_rows=3):
    w = tmp_path / "w"
    w.mkdir()
    pd.DataFrame([dict(G=2, j=j, batch=j % K, prompt=0, k=1, vhat=0.5, s11=1.0, s10=0.0,
                       s00=1.0, seconds=0.1) for j in range(groups)]).to_csv(w / "groups.csv",
                                                                             index=False)
    np.save(w / "sums.npy", np.zeros((sums_rows, 4), np.float32))
    counts = [1, 1, 0] if counts is None else counts
    (w / "state.json").write_text(json.dumps(dict(key="k", counts=counts)))
    return w


@pytest.mark.parametrize("change, match", [
    (dict(counts=[1, 1]), "disagree"), (dict(groups=3), "disagree"),
    (dict(sums_rows=2), "disagree"), (dict(counts="x"), "'counts' is not a list")])
def test_a_damaged_measured_checkpoint_is_refused_by_name(tmp_path, change, match):
    """The rival (reading the three files as they are) resumes groups whose sums are missing or
    counted twice; here the folder is refused by name."""
    w = _work(tmp_path, **change)
    with pytest.raises(ValueError, match=f"--work {w}.*{match}|{match}"):
        MS._checkpoint(w, 3)


def test_a_good_measured_checkpoint_is_resumed(tmp_path):
    done, sums, counts = MS._checkpoint(_work(tmp_path), 3)
    assert len(done) == 2 and sums.shape == (3, 4) and counts.tolist() == [1, 1, 0]
    w = tmp_path / "w"
    (w / "sums.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(ValueError, match="sums.npy is not readable"):
        MS._checkpoint(w, 3)
    (w / "state.json").write_text("{")
    with pytest.raises(ValueError, match="state.json is not valid JSON"):
        MS._checkpoint(w, 3)


def test_a_damaged_study_folder_names_the_file_and_field(tmp_path):
    from grpo_theory.studies.smollm2.measured_report import population

    for f in ("prompts.csv", "passrates.csv", "rollouts.npz"):
        (tmp_path / f).write_text("x\n1\n")
    (tmp_path / "meta.json").write_text(json.dumps(dict(task="add1")))
    with pytest.raises(ValueError, match="meta.json lacks the field 'config'"):
        population(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps(dict(task="add1", config={})))
    with pytest.raises(ValueError, match="'n_ref'"):
        population(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps(dict(task="add1", config=dict(
        n_ref=4, response_len=3))))
    with pytest.raises(ValueError, match="prompts.csv lacks the column 'prompt'"):
        population(tmp_path)
    pd.DataFrame(dict(prompt=[0], question=["What is 9 + 9?!"], score_sq=[1.0])).to_csv(
        tmp_path / "prompts.csv", index=False)
    pd.DataFrame(dict(task=["add1"], prompt=[0], rewards=["0101"])).to_csv(
        tmp_path / "passrates.csv", index=False)
    with pytest.raises(ValueError, match="is not of the task 'add1'"):
        population(tmp_path)


def test_saved_rollouts_of_another_key_or_truncated_are_not_reused(tmp_path):
    """Phase 2's rollouts: the rival (the key alone) reuses a file whose arrays were cut; here
    another key, a truncated array or a non-finite statistic is a reason to recompute."""
    cfg = S.StudyConfig(model="m", n_samples=3, response_len=2)
    m, n = 4, 3
    good = dict(key="k", rewards=np.ones((m, n)), sq_norms=np.ones((m, n)), mean_sq=np.ones(m),
                mean_dot=np.ones(m), responses=np.zeros((m * n, 2), int))
    path = tmp_path / "rollouts.npz"
    np.savez(path, **good)
    assert S._saved_rollouts(path, "k", m, cfg)["rewards"].shape == (m, n)
    with pytest.raises(ValueError, match="another configuration or model"):
        S._saved_rollouts(path, "other", m, cfg)
    for bad, match in ((dict(rewards=np.ones((m - 1, n))), "'rewards' has 9 values"),
                       (dict(responses=np.zeros((m * n, 1), int)), "'responses'"),
                       (dict(mean_sq=np.array([1.0, np.inf, 1.0, 1.0])), "non-finite")):
        np.savez(path, **dict(good, **bad))
        with pytest.raises(ValueError, match=match):
            S._saved_rollouts(path, "k", m, cfg)
    np.savez(path, **{k: v for k, v in good.items() if k != "mean_dot"})
    with pytest.raises(ValueError, match="lacks the array 'mean_dot'"):
        S._saved_rollouts(path, "k", m, cfg)
