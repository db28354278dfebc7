"""The core engine's reproduction driver runs on the runner, saves a tidy table and passes."""

import dataclasses

import pandas as pd

from grpo_theory.experiments import cli
from grpo_theory.experiments.runner import run_experiment
from grpo_theory.studies import mse_table


def test_mse_table_small_setting(tmp_path):
    s = dataclasses.replace(mse_table.SETTINGS["quick"], estimators=("grpo", "oracle"),
                            group_sizes=(2, 8))
    res = run_experiment(mse_table.EXPERIMENT, tmp_path, s, seed=0, figures=False,
                         progress=False)
    df = pd.read_csv(tmp_path / "mse-table" / "table.csv")
    assert len(df) == 4 and res.n_computed == 4
    for col in ("seed", "version", "config", "cell_hash", "estimator", "G", "exact_mse", "mc_mse"):
        assert col in df.columns
    assert res.verdict == "PASS" and "| 8 |" in res.section.markdown
    # the rival (GRPO with the oracle's exact MSE) lies beyond 4 se
    assert res.section.checks[0].has_power, res.section.checks[0].rival_se
    # resume: a rerun computes nothing and leaves the cell files byte-identical
    cells = sorted((tmp_path / "mse-table" / "cells").rglob("*.csv"))
    before = {p: p.read_bytes() for p in cells}
    again = run_experiment(mse_table.EXPERIMENT, tmp_path, s, seed=0, figures=False,
                           progress=False)
    assert again.n_computed == 0 and again.n_reused == 4
    assert {p: p.read_bytes() for p in cells} == before


def test_cli_list_names_every_experiment(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "mse-table" in out
