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
