"""Damaged inputs of the commands: ``report`` on a damaged ``run.json``, ``advise`` on prompts
files that are not UTF-8 or whose answers are not integers, ``.npz`` model files that are not
what they claim, a reward named from a folder holding a file named like a dependency; each one
line ``grpo-theory: error: ...`` naming the file (and the field or line)."""

import json

import pytest

from grpo_theory.experiments import cli

EXP = "mse-table"


def _one_line_error(capsys, argv, *needles, code=2):
    got = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert got == code, (argv, err)
    assert len(err) == 1 and err[0].startswith("grpo-theory: error: "), err
    for n in needles:
        assert n in err[0], (n, err[0])
    assert "a bug?" not in err[0]
    return err[0]


@pytest.mark.parametrize("content, needles", [
    ('{"setting": "quick", "se', ["not valid JSON", "line 1"]),
    ('[1, 2]', ["must hold a JSON object, got list"]),
    ('{"seed": 0}', ["field 'setting' is missing"]),
    ('{"setting": "quick"}', ["field 'seed' is missing"]),
    ('{"setting": 5, "seed": 0}', ["field 'setting' must be a string, got 5"]),
    ('{"setting": "quick", "seed": "0"}', ["field 'seed' must be an integer, got '0'"]),
    ('{"setting": "quick", "seed": true}', ["field 'seed' must be an integer, got True"]),
    ('{"setting": "quick+model-x", "seed": 0, "settings": [1]}',
     ["field 'settings' must be an object"]),
])
def test_report_on_a_damaged_run_json_names_the_file_and_field(tmp_path, capsys, content,
                                                                needles):
    (tmp_path / EXP).mkdir()
    path = tmp_path / EXP / "run.json"
    path.write_text(content)
    _one_line_error(capsys, ["report", "--out", str(tmp_path)], str(path), *needles)


def test_report_on_a_valid_run_json_without_cells_still_works(tmp_path, capsys):
    (tmp_path / EXP).mkdir()
    (tmp_path / EXP / "run.json").write_text(json.dumps({"setting": "quick", "seed": 0}))
    assert cli.main(["report", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "REPORT.md").exists()
    with pytest.raises(ValueError, match="not valid JSON"):  # the library raises it too
        (tmp_path / EXP / "run.json").write_text("{")
        from grpo_theory.experiments import last_run, registry
        last_run(registry.experiments()[EXP], tmp_path)


# --- advise: the prompts file, the model file, the reward, the figure -------------------------

@pytest.fixture(scope="module")
def files(tmp_path_factory):
    import jax

    from grpo_theory.lm.model import ModelConfig, init_params
    from grpo_theory.lm.warmup import save_checkpoint

    d = tmp_path_factory.mktemp("malformed")
    (d / "sums.jsonl").write_text("".join(json.dumps({"question": f"{a}+{a}", "answer": 2 * a})
                                          + "\n" for a in range(4)))
    cfg = dict(d_model=16, n_layers=1, n_heads=2)
    save_checkpoint(d / "tiny.npz", init_params(jax.random.PRNGKey(0), ModelConfig(**cfg)),
                    dict(config=cfg))
    return d


def _advise(files, tmp_path, *extra, prompts=None, model=None):
    return ["advise", "--prompts", str(prompts or files / "sums.jsonl"), "--model",
            str(model or files / "tiny.npz"), "--out", str(tmp_path / "o"), "--no-progress",
            "--n-prompts", "3", "--n-samples", "3", "--response-len", "2", "--budgets", "16",
            "--group-sizes", "2,4", *extra]


@pytest.mark.parametrize("line, needle", [
    (b'{"question": "1+1", "answer": 7.9}', "'answer' must be an integer"),
    (b'{"question": "1+1", "answer": "seven"}', "'answer' must be an integer"),
    (b'{"question": "1+1", "answer": true}', "'answer' must be an integer"),
    (b'{"question": "1+1", "answer": null}', "'answer' must be an integer"),
    (b'{"question": "1+\xff1", "answer": 2}', "not UTF-8 (byte 0xff at column 17)"),
])
def test_advise_refuses_a_bad_prompts_line_naming_file_and_line(files, tmp_path, capsys, line,
                                                                 needle):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(b'{"question": "2+2", "answer": 4}\n' + line + b"\n")
    _one_line_error(capsys, _advise(files, tmp_path, prompts=p), f"{p}:2: ", needle)
    assert not (tmp_path / "o").exists()


def test_integral_answers_are_read_as_integers_and_others_pass_to_a_given_reward(tmp_path):
    from grpo_theory.advisor import advise as A

    p = tmp_path / "p.jsonl"
    p.write_text('{"question": "a", "answer": 7.0}\n{"question": "b", "answer": " 8"}\n'
                 '{"question": "c", "answer": 7.9}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:3: 'answer' must be an integer .* 7.9"):
        A.read_prompts(p, integer_answers=True)
    assert [r["answer"] for r in A.read_prompts(p)] == [7.0, " 8", 7.9]  # a custom reward's
    rows = A.read_prompts(p.write_text('{"question": "a", "answer": 7.0}\n{"question": "b", '
                                       '"answer": " 8"}\n') and p, integer_answers=True)
    assert [r["answer"] for r in rows] == [7, 8] and type(rows[0]["answer"]) is int


def _npz(path, **arrays):
    import numpy as np

    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("make, needle", [
    (lambda p: p.write_bytes(b"not a zip at all") and p, "not a package .npz checkpoint"),
    (lambda p: p.write_bytes(b"PK\x03\x04truncated") and p, "not a package .npz checkpoint"),
    (lambda p: _npz(p, meta=json.dumps({"config": {"d_model": 16, "n_layers": 1,
                                                   "n_heads": 2}})), "has no array 'flat'"),
    (lambda p: _npz(p, flat=[1.0]), "has no array 'meta'"),
    (lambda p: _npz(p, flat=[1.0], meta="{not json"), "array 'meta' must hold a JSON object"),
    (lambda p: _npz(p, flat=[1.0], meta=json.dumps({"config": {"d_model": 16}})),
     "no warm-up config"),
    (lambda p: _npz(p, flat=[1.0, 2.0], meta=json.dumps(
        {"config": {"d_model": 16, "n_layers": 1, "n_heads": 2}})), "array 'flat' must be ("),
    (lambda p: _npz(p, flat=["a"], meta=json.dumps(
        {"config": {"d_model": 16, "n_layers": 1, "n_heads": 2}})), "array 'flat' must be ("),
])
def test_advise_refuses_an_npz_that_is_not_a_checkpoint(files, tmp_path, capsys, make, needle):
    p = make(tmp_path / "model.npz")
    _one_line_error(capsys, _advise(files, tmp_path, model=p), f"model {str(p)!r}", needle)


def test_advise_prints_the_result_when_the_figure_fails(files, tmp_path, capsys):
    """Every reward 0 (a reward file named by its path): the result is printed, the figure's
    failure is one warning line, the tables are written."""
    (tmp_path / "zero.py").write_text("def zero(text, answer):\n    return 0.0\n")
    code = cli.main(_advise(files, tmp_path, "--reward", f"{tmp_path / 'zero.py'}:zero"))
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "recommended G per budget" in cap.out
    warn = [ln for ln in cap.err.splitlines() if "warning" in ln.lower() and "figure" in ln]
    assert len(warn) == 1 and warn[0].startswith("grpo-theory: warning: the figure was not "
                                                 "drawn ("), cap.err
    assert not (tmp_path / "o" / "advice.png").exists()
    assert (tmp_path / "o" / "advice_constants.csv").exists()


def test_advise_survives_a_figure_error(files, tmp_path, capsys, monkeypatch):
    from grpo_theory.advisor import advise as A

    def broken(res, stem):
        raise ValueError("Axis limits cannot be NaN or Inf\nsecond line")

    monkeypatch.setattr(A, "_figure", broken)
    code = cli.main(_advise(files, tmp_path))
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "recommended G per budget" in cap.out
    assert ("grpo-theory: warning: the figure was not drawn (ValueError: Axis limits cannot be "
            "NaN or Inf second line)") in cap.err.splitlines()


# --- the reward's import ----------------------------------------------------------------------

SHADOW = "raise RuntimeError('a file of the current folder was imported')\n"
REWARD = ("import {name}\n\ndef reward(text, answer):\n"
          "    return float({name}.__file__ is not None and 'shadowdir' not in {name}.__file__)\n")


@pytest.mark.parametrize("name", ["json", "numpy", "tabnanny"])  # tabnanny: not yet imported
def test_a_reward_module_does_not_let_the_folder_shadow_a_dependency(tmp_path, monkeypatch,
                                                                     name):
    import importlib
    import sys

    from grpo_theory.advisor import advise as A

    d = tmp_path / "shadowdir"
    d.mkdir()
    (d / f"{name}.py").write_text(SHADOW)
    (d / "shadow_test_reward.py").write_text(REWARD.format(name=name))
    monkeypatch.chdir(d)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = list(sys.path)
    sys.modules.pop("tabnanny", None)
    for spec in ("shadow_test_reward:reward", "./shadow_test_reward.py:reward",
                 f"{d / 'shadow_test_reward.py'}:reward"):
        fn = A.load_reward(spec)
        assert fn("x", 1) == 1.0  # the installed module, not the folder's file
        assert sys.path == before  # the current folder never added
        real = importlib.import_module(name)
        assert "shadowdir" not in real.__file__
        sys.modules.pop("shadow_test_reward", None)
    with pytest.raises(ValueError, match=rf"module '{name}' has no attribute 'no_such_f'"):
        A.load_reward(f"{name}:no_such_f")  # the installed module, not the folder's file


def test_a_reward_file_that_fails_to_import_is_one_line(tmp_path):
    from grpo_theory.advisor import advise as A

    (tmp_path / "bad.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ValueError, match=r"reward '.*bad.py:f': importing .* failed "
                                         r"\(RuntimeError: boom\)"):
        A.load_reward(f"{tmp_path / 'bad.py'}:f")
    with pytest.raises(ValueError, match=r"file .*missing.py' does not exist"):
        A.load_reward(f"{tmp_path / 'missing.py'}:f")
