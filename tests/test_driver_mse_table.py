"""The core engine's reproduction driver runs, saves a tidy table and passes its own check."""

import pandas as pd

from grpo_theory.experiments import cli


def test_mse_table_quick(tmp_path):
    mods = cli.discover()
    mod = mods["mse-table"]
    mod.run(tmp_path, quick=True, seed=0, estimators=("grpo", "oracle"), group_sizes=(2, 8))
    df = pd.read_csv(tmp_path / "table.csv")
    assert len(df) == 4
    for col in ("seed", "version", "config", "estimator", "G", "exact_mse", "mc_mse"):
        assert col in df.columns
    rep = mod.report(tmp_path)
    assert rep["passed"] and "| 8 |" in rep["markdown"]
    # resume: a rerun skips finished cells and leaves them byte-identical
    before = {p.name: p.read_bytes() for p in (tmp_path / "cells-quick").iterdir()}
    mod.run(tmp_path, quick=True, seed=0, estimators=("grpo", "oracle"), group_sizes=(2, 8))
    after = {p.name: p.read_bytes() for p in (tmp_path / "cells-quick").iterdir()}
    assert before == after


def test_cli_list_names_every_experiment(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "mse-table" in out
