"""The runner and its store: results you can trust (validated cells, keys, resume, verdicts).

Every test runs the test-only experiment ``toy`` of ``tests/support/toy_experiment.py`` (five
cells of four rows each, ``value ~ N(i, 1)``) in this process.
"""

import dataclasses
import io
import itertools
import json
import os
import shutil
import stat

from support import toy_experiment as toy
import numpy as np
import pandas as pd
import pytest

from grpo_theory.experiments import cli, registry, runner, store
from grpo_theory.experiments.progress import CellProgress
from grpo_theory.experiments.runner import (Cell, cell_key, collect, is_timing, report_section,
                                            run_experiment)
from grpo_theory.experiments.checks import Check, Section, check, kind_counts

EXP = toy.EXPERIMENT
N = toy.SETTINGS["quick"].n_cells


def _run(out, setting="quick", seed=0, exp=EXP, **kw):
    return run_experiment(exp, out, setting, seed=seed, figures=False, progress=False,
                          verbose=False, **kw)


def _values(df: pd.DataFrame) -> pd.DataFrame:
    """Every column except the timing ones (those differ from run to run)."""
    return df[[c for c in df.columns if not is_timing(c)]].reset_index(drop=True)


def _cell_files(out, setting="quick", seed=0) -> dict:
    """``{cell id: path}`` of the cell files of ``toy`` for (setting, seed)."""
    files = (out / EXP.name / "cells" / setting / f"seed{seed}").glob("*.csv")
    return {p.name.rsplit("-", 1)[0]: p for p in files}


@pytest.fixture
def computed(monkeypatch):
    """The ids of the cells computed from now on (in this process)."""
    ids = []
    real = runner.compute_cell

    def counting(module, name, cell, seed, cache=None):
        ids.append(cell.id)
        return real(module, name, cell, seed, cache)

    monkeypatch.setattr(runner, "compute_cell", counting)
    return ids


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The table of an undisturbed run (seed 0, quick)."""
    res = _run(tmp_path_factory.mktemp("clean"))
    assert res.verdict == "PASS" and res.n_computed == N
    return _values(res.tables["table"])


def _assert_incomplete_report(path) -> str:
    """REPORT.md gives toy the verdict INCOMPLETE, in its summary row and its heading."""
    text = path.read_text()
    row = [ln for ln in text.splitlines() if ln.startswith("| [toy](#toy)")]
    assert len(row) == 1 and row[0].endswith("| INCOMPLETE |")
    assert "— INCOMPLETE" in text and "— PASS" not in text
    return text


@pytest.fixture
def toy_cli(monkeypatch):
    """The CLI sees only the test experiments (``toy`` and ``toy-slow``)."""
    monkeypatch.setattr(registry, "entry_points", lambda group: [])
    monkeypatch.setenv(registry.EXTRA_ENV, "support.toy_experiment")


# --------------------------------------------------------------------------- damaged cell files


def _truncate(p):
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])


def _garble(p):
    p.write_bytes(np.random.default_rng(0).bytes(len(p.read_bytes())))


def _edit(fn, resign=True):
    """Edit a cell file's rows; ``resign`` writes a valid checksum so the deeper checks (schema,
    identity, row count) are what must catch it."""
    def damage(p):
        df = pd.read_csv(io.StringIO(store.verified_body(p)), dtype={"cell_hash": str})
        df = fn(df)
        p.write_text(store.cell_text(df) if resign else df.to_csv(index=False))
    return damage


def _edit_number_in_place(p):
    """Change one digit of a value to another finite number, keeping the old checksum line."""
    text = p.read_text()
    lines = text.split("\n")
    header = lines[0].split(",")
    row = lines[1].split(",")
    i = header.index("value")
    row[i] = str(float(row[i]) + 1.0)
    lines[1] = ",".join(row)
    p.write_text("\n".join(lines))


DAMAGE = {
    "truncated": _truncate,
    "emptied": lambda p: p.write_bytes(b""),
    "garbled": _garble,
    "column removed": _edit(lambda df: df.drop(columns="value")),
    "value edited to NaN": _edit(lambda df: df.assign(value=df["value"].where(df["j"] != 1))),
    "rows deleted": _edit(lambda df: df.iloc[:2]),
    "rows deleted, no checksum": _edit(lambda df: df.iloc[:2], resign=False),
    "value edited to another finite number": _edit_number_in_place,
    "seed column edited": _edit(lambda df: df.assign(seed=df["seed"] + 1)),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_cell_file_is_detected_and_recomputed(tmp_path, damage, clean, computed,
                                                      toy_cli, capsys):
    _run(tmp_path)
    victim = _cell_files(tmp_path)["c2"]
    DAMAGE[damage](victim)
    # read-only uses of the folder see the damage and never PASS from it
    with pytest.warns(UserWarning, match=victim.name):
        sec, _ = report_section(EXP, tmp_path)
    assert sec.verdict == "INCOMPLETE"
    with pytest.warns(UserWarning, match=victim.name):
        assert cli.main(["report", "--out", str(tmp_path)]) == 0
    _assert_incomplete_report(tmp_path / "REPORT.md")
    # a run recomputes exactly the damaged cell; the table equals the clean one
    computed.clear()
    with pytest.warns(UserWarning, match=victim.name):
        res = _run(tmp_path)
    assert computed == ["c2"] and res.n_reused == N - 1 and res.verdict == "PASS"
    pd.testing.assert_frame_equal(_values(res.tables["table"]), clean)
    on_disk = pd.read_csv(tmp_path / EXP.name / "table.csv")
    assert len(on_disk) == len(clean) and not on_disk.duplicated(["cell", "j"]).any()


def test_text_columns_survive_the_round_trip(tmp_path, monkeypatch):
    """A hash or label that looks like a number ("0123e4...", "007") is read back as text."""
    monkeypatch.setattr(store, "cell_hash", lambda *a: "0123e45678901234")
    st = store.CellStore(tmp_path, "toy", "quick", 0, toy.SCHEMA, "0.0.0")
    cell = Cell("01", dict(i=1, n_rows=2))
    rows = toy.cell(cell.config, cell_key("toy", "01", 0)).assign(label="007")
    st.write(cell, rows)
    back = st.read(cell)
    assert back is not None and list(back["label"]) == ["007", "007"]
    assert set(back["cell_hash"]) == {"0123e45678901234"} and set(back["cell"]) == {"01"}


# --------------------------------------------------------------------------- seeds and settings


def test_seed_and_setting_never_reuse_other_cells(tmp_path, computed):
    s0 = _run(tmp_path, seed=0)
    computed.clear()
    s1 = _run(tmp_path, seed=1)
    assert sorted(computed) == [f"c{i}" for i in range(N)]
    assert s1.n_computed == N and s1.n_reused == 0
    t1 = _values(s1.tables["table"])
    assert set(t1["seed"]) == {1}
    assert set(pd.read_csv(tmp_path / EXP.name / "table.csv")["seed"]) == {1}
    assert not np.allclose(t1["value"], s0.tables["table"]["value"])
    # a different setting whose cells have the same configurations still computes its own
    computed.clear()
    small = _run(tmp_path, toy.Settings(n_cells=3), seed=1)
    assert small.n_reused == 0 and sorted(computed) == ["c0", "c1", "c2"]
    assert small.setting.startswith("custom-") and set(small.tables["table"]["seed"]) == {1}
    # delete some seed-1 cells and put a seed-0 file in place of another: the rerun computes
    # those, with seed 1, and nothing mixes
    for cid in ("c1", "c3"):
        _cell_files(tmp_path, seed=1)[cid].unlink()
    impostor = _cell_files(tmp_path, seed=1)["c4"]
    shutil.copy(_cell_files(tmp_path, seed=0)["c4"], impostor)
    computed.clear()
    with pytest.warns(UserWarning, match=impostor.name):
        again = _run(tmp_path, seed=1)
    assert sorted(computed) == ["c1", "c3", "c4"]
    pd.testing.assert_frame_equal(_values(again.tables["table"]), t1)
    disk = pd.read_csv(tmp_path / EXP.name / "table.csv")
    assert set(disk["seed"]) == {1} and set(disk["setting"]) == {"quick"} and len(disk) == len(t1)


def test_cell_keys_are_distinct_and_deterministic():
    exps, cells, seeds = ("toy", "mse-table"), ("A", "B", "c0", "grpo_G2", "grpo_G4"), (0, 1, 2)
    grid = list(itertools.product(exps, cells, seeds))
    keys = {g: tuple(np.asarray(cell_key(*g)).ravel().tolist()) for g in grid}
    assert len(set(keys.values())) == len(grid)
    for e in exps:  # the old ``seed + G`` pattern repeated seed 0 of another cell
        assert keys[(e, "A", 2)] != keys[(e, "B", 0)]
        assert keys[(e, "grpo_G2", 2)] != keys[(e, "grpo_G4", 0)]
    assert all(np.array_equal(np.asarray(cell_key(*g)), np.asarray(cell_key(*g)))
               for g in grid[:4])


# --------------------------------------------------------------------------- bad --out


def _unwritable(tmp_path):
    """A folder this process cannot write to, or (as root, who writes anywhere) a path under a
    file."""
    d = tmp_path / "read-only"
    d.mkdir()
    d.chmod(0o500)
    try:
        (d / "probe").touch()
    except OSError:
        return d
    (d / "probe").unlink()
    d.chmod(0o700)
    (tmp_path / "plain-file").write_text("x")
    return tmp_path / "plain-file" / "out"


@pytest.mark.parametrize("kind", ["file", "unwritable"])
def test_bad_out_is_refused_before_any_cell(tmp_path, kind, computed, toy_cli, capsys):
    if kind == "file":
        out, msg = tmp_path / "results.txt", "is a file"
        out.write_text("not a folder")
    else:
        out, msg = _unwritable(tmp_path), "not a writable folder"
    try:
        with pytest.raises(ValueError, match=msg):
            _run(out)
        assert cli.main(["toy", "--out", str(out), "--no-progress"]) == 2
        assert msg in capsys.readouterr().err
        assert computed == []
    finally:
        for p in tmp_path.iterdir():
            if p.is_dir():
                p.chmod(0o700)


# --------------------------------------------------------------------------- failed writes


def test_failed_cell_write_is_rescued_and_accepted(tmp_path, monkeypatch, computed, clean):
    monkeypatch.setattr(runner.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    out = tmp_path / "out"
    real = runner.atomic_write_text

    def failing(path, text):
        if str(path).startswith(str(out)) and path.name.startswith("c1-"):
            raise OSError(28, "No space left on device")
        return real(path, text)

    monkeypatch.setattr(runner, "atomic_write_text", failing)
    with pytest.raises(OSError, match="saved to") as err:
        _run(out)
    rescued = [p for p in (tmp_path / "tmp").rglob("*.csv")]
    assert len(rescued) == 1 and str(rescued[0]) in str(err.value)
    target = out / EXP.name / "cells" / "quick" / "seed0" / rescued[0].name
    assert str(target) in str(err.value) and not target.exists()
    monkeypatch.setattr(runner, "atomic_write_text", real)
    shutil.copy(rescued[0], target)
    computed.clear()
    res = _run(out)
    assert "c1" not in computed and res.n_reused >= 2 and res.verdict == "PASS"
    pd.testing.assert_frame_equal(_values(res.tables["table"]), clean)


# --------------------------------------------------------------------------- report command


def test_cli_run_writes_a_passing_report(tmp_path, toy_cli, capsys):
    assert cli.main(["toy", "--out", str(tmp_path), "--no-progress", "--no-figures"]) == 0
    assert "== toy: PASS (5 cells computed in " in capsys.readouterr().err
    row = [ln for ln in (tmp_path / "REPORT.md").read_text().splitlines()
           if ln.startswith("| [toy](#toy)")]
    assert len(row) == 1 and "| quick | 0 | PASS" in row[0]
    assert cli.main(["toy", "--out", str(tmp_path), "--no-progress", "--no-figures"]) == 0
    assert "(0 cells computed in 0.0 s of cell time, 5 reused" in capsys.readouterr().err


def test_report_on_empty_folder_fails_clearly(tmp_path, toy_cli, capsys):
    assert cli.main(["report", "--out", str(tmp_path)]) == 2  # an error, as documented
    err = capsys.readouterr().err
    assert "no results" in err and "toy" in err
    assert not (tmp_path / "REPORT.md").exists()


def test_report_after_interrupted_run_is_incomplete(tmp_path, monkeypatch, toy_cli, capsys):
    real, calls = runner.compute_cell, []

    def interrupted(module, name, cell, seed, cache=None):
        calls.append(cell.id)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(module, name, cell, seed, cache)

    monkeypatch.setattr(runner, "compute_cell", interrupted)
    assert cli.main(["toy", "--out", str(tmp_path), "--no-progress"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert cli.main(["report", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "no results for: toy-slow" in err
    text = _assert_incomplete_report(tmp_path / "REPORT.md")
    assert "3 of 5 cells are missing" in text
    assert "No results in this folder for: toy-slow." in text


# --------------------------------------------------------------------------- permissions


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_files_follow_the_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        assert store.file_mode() == mode and os.umask(mask) == mask  # read, not changed
        _run(tmp_path)
    finally:
        os.umask(old)
    files = [p for p in (tmp_path / EXP.name).rglob("*") if p.is_file()]
    assert len(files) == N + 2  # the cells, table.csv and run.json
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {mode}


# --------------------------------------------------------------------------- verdicts


def test_check_is_incomplete_without_finite_numbers():
    assert check("a", True, 1.0, [2.0, 3.0], kind="exact").verdict == "PASS"
    assert check("a", False, 1.0, kind="sanity").verdict == "FAIL"
    for bad in (np.nan, np.inf, None, [1.0, np.nan], []):
        assert check("a", True, 1.0, bad, kind="sanity").verdict == "INCOMPLETE"
    assert check("a", True, float("nan"), kind="sanity", detail="d").detail == "d"
    c = check("a", True, 1.0, kind="statistical", excludes="the rival", detail="d",
              rival_se=5.0)
    assert (c.kind, c.excludes, c.verdict) == ("statistical", "the rival", "PASS")
    assert check("a", True, np.nan, kind="statistical", excludes="r",
                 rival_se=np.nan).kind == "statistical"


@pytest.mark.parametrize("kwargs, word", [
    (dict(), "kind"), (dict(kind="exactly"), "kind"), (dict(kind=None), "kind"),
    (dict(kind="statistical"), "excludes"), (dict(kind="statistical", excludes="  "), "excludes"),
    (dict(kind="sanity", excludes=None), "excludes"),
    (dict(kind="statistical", excludes="the rival law"), "rival_se")])
def test_check_refuses_a_bad_kind_or_a_statistical_check_without_excludes(kwargs, word):
    """A statistical row must name its rival and say how far it lies (rival: a row labelled
    statistical that states neither)."""
    with pytest.raises(ValueError, match=word):
        check("a", True, 1.0, **kwargs)
    with pytest.raises(ValueError, match=word):  # a missing number does not skip the rule
        check("a", True, np.nan, **kwargs)
    if "kind" in kwargs:
        with pytest.raises(ValueError, match=word):
            Check("a", True, "", kwargs["kind"], kwargs.get("excludes", ""))


def test_section_verdict_rules():
    ok, fail, none = Check("a", True), Check("b", False), Check("c", None)
    assert Section("t", "", []).verdict == "INCOMPLETE"  # no checks: nothing was verified
    assert Section("t", "", [ok, ok]).verdict == "PASS"
    assert Section("t", "", [ok, fail]).verdict == "FAIL"
    assert Section("t", "", [ok, none]).verdict == "INCOMPLETE"
    assert Section("t", "", [fail, none]).verdict == "FAIL"  # a failed check is definite
    assert "| b | sanity | FAIL |  |  |  |" in Section("t", "", [ok, fail]).checks_markdown()


def test_check_table_has_kind_and_excludes_columns_and_escapes_pipes():
    checks = [check("abs |z| <= 4", True, 1.0, kind="statistical",
                    excludes="a rival | law", detail="largest |z| 1.0", rival_se=-9.14),
              check("identity", True, 0.0, kind="exact", detail="0.0e+00"),
              check("ran", False, 1.0, kind="sanity")]
    md = Section("t", "", checks).checks_markdown().splitlines()
    assert md[0] == "Checks by kind: 1 exact, 1 statistical (1 with power), 1 sanity"
    assert md[2] == "| check | kind | result | excludes | rival at | detail |"
    assert md[3] == "|---|---|---|---|---|---|"
    assert md[4] == ("| abs \\|z\\| <= 4 | statistical | PASS | a rival \\| law | 9.1 se | "
                     "largest \\|z\\| 1.0 |")
    assert md[5] == "| identity | exact | PASS |  |  | 0.0e+00 |"
    assert md[6] == "| ran | sanity | FAIL |  |  |  |"
    for row in md[4:]:  # six cells once the escaped pipes are set aside
        assert len(row.replace("\\|", "").split("|")) == 8
    assert kind_counts(checks) == {"exact": 1, "statistical": 1, "sanity": 1}


def test_report_counts_checks_by_kind_per_study_and_in_total(tmp_path):
    a = Section("A", "body", [check("x", True, 1.0, kind="exact"),
                              check("y", True, 1.0, kind="statistical", excludes="r",
                                    rival_se=2.0)])
    b = Section("B", "body", [check("z", True, 1.0, kind="sanity"),
                              check("w", True, 1.0, kind="exact")])
    text = cli.write_report(tmp_path, {"a": (EXP, a, {}), "b": (EXP, b, {})}).read_text()
    head = text.split("| experiment |")[0]
    # the statistical check's rival lies 2 se away, inside the bound of 4: no power
    assert "Checks by kind: 2 exact, 1 statistical (0 with power), 1 sanity" in head
    assert text.count("Checks by kind: 1 exact, 1 statistical (0 with power), 0 sanity") == 1
    assert text.count("Checks by kind: 1 exact, 0 statistical (0 with power), 1 sanity") == 1
    assert text.count("| check | kind | result | excludes | rival at | detail |") == 2


def test_power_needs_a_rival_beyond_the_bound():
    far = check("t", True, 1.0, kind="statistical", excludes="r", rival_se=5.0)
    near = check("t", True, 1.0, kind="statistical", excludes="r", rival_se=3.0)
    own = check("t", True, 1.0, kind="statistical", excludes="r", rival_se=3.0, z_tol=2.0)
    assert far.has_power and not near.has_power and own.has_power
    assert not check("t", True, 1.0, kind="exact").has_power


def test_report_that_raises_on_partial_table_is_incomplete(tmp_path):
    def fragile(tables, s):
        raise RuntimeError("needs every cell")

    exp = dataclasses.replace(EXP, report=fragile)
    res = _run(tmp_path, exp=exp)  # complete table: a bug in the report is a failed check
    assert res.verdict == "FAIL" and "needs every cell" in res.section.markdown
    _cell_files(tmp_path)["c0"].unlink()
    sec, manifest = report_section(exp, tmp_path)
    assert sec.verdict == "INCOMPLETE" and "needs every cell" in sec.markdown
    assert manifest["status"] == "complete"  # the run itself finished; the report did not
    # toy's own report raises KeyError without the last cell: INCOMPLETE, never PASS
    _run(tmp_path)
    _cell_files(tmp_path)[f"c{N - 1}"].unlink()
    assert collect(EXP, tmp_path).missing == [f"c{N - 1}"]
    sec, _ = report_section(EXP, tmp_path)
    assert sec.verdict == "INCOMPLETE" and "KeyError" in sec.markdown


# --------------------------------------------------------------------------- progress


def test_progress_plain_lines_off_a_terminal():
    buf = io.StringIO()
    bar = CellProgress("toy", total=5, skipped=2, workers=2, stream=buf)
    bar.update("c2", 0.5)
    bar.update("c3", 0.25)
    bar.close()
    text = buf.getvalue()
    assert "5 cells, 2 reused from disk, 3 to compute on 2 workers" in text
    assert "3/5 c2" in text and "4/5 c3" in text and "4/5 cells on disk" in text
    assert "\r" not in text and bar.bar is None


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_on_a_terminal():
    buf = _Terminal()
    bar = CellProgress("toy", total=5, skipped=2, workers=3, stream=buf)
    assert bar.bar is None and buf.getvalue() == ""  # drawn when its first cell is in
    bar.update("c2", 0.5)
    assert bar.bar is not None
    bar.close()
    text = buf.getvalue()
    assert "\r" in text and "3/5" in text and "reused=2" in text and "workers=3" in text
    assert "toy" in text


def test_progress_disabled_writes_nothing():
    buf = io.StringIO()
    bar = CellProgress("toy", total=2, stream=buf, enabled=False)
    bar.update("c0", 0.1)
    bar.close()
    assert buf.getvalue() == "" and bar.done == 1


def test_run_json_records_the_run(tmp_path):
    _run(tmp_path, seed=3)
    m = json.loads((tmp_path / EXP.name / "run.json").read_text())
    assert m["status"] == "complete" and m["seed"] == 3 and m["setting"] == "quick"
    assert m["n_cells"] == N and m["n_missing"] == 0 and m["executor"] == "in-process"
