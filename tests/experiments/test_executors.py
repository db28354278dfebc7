"""Executors: a local Dask cluster gives the in-process tables, survives a killed worker, and
bad input (workers, scheduler, experiment name) fails fast with a clear message.

One local cluster of 2 worker processes is shared by the tests of this module. The workers
import ``support.toy_experiment`` by name: pytest puts ``tests/`` on ``sys.path`` (``pythonpath``
in pyproject.toml) and spawned worker processes inherit the parent's ``sys.path``.
"""

import dataclasses
import json
import os
import signal
import socket
import threading
import time

from support import toy_experiment as toy
import pandas as pd
import pytest

from grpo_theory.experiments import cli, executors, registry, runner
from grpo_theory.experiments.executors import DaskExecutor, open_executor
from grpo_theory.experiments.runner import collect, is_timing, run_experiment

pytest.importorskip("distributed")


def _run(exp, out, setting="quick", **kw):
    return run_experiment(exp, out, setting, seed=0, figures=False, progress=False,
                          verbose=False, **kw)


def _values(df: pd.DataFrame) -> pd.DataFrame:
    return df[[c for c in df.columns if not is_timing(c)]].reset_index(drop=True)


@pytest.fixture(scope="module")
def cluster():
    """One local Dask cluster (2 worker processes) for the whole module."""
    with open_executor(workers=2) as ex:
        assert isinstance(ex, DaskExecutor) and ex.n_workers == 2
        yield ex


@pytest.fixture
def toy_cli(monkeypatch):
    monkeypatch.setattr(registry, "entry_points", lambda group: [])
    monkeypatch.setenv(registry.EXTRA_ENV, "support.toy_experiment")


def test_cluster_table_equals_in_process_table(tmp_path, cluster):
    here = _run(toy.EXPERIMENT, tmp_path / "here")
    there = _run(toy.EXPERIMENT, tmp_path / "there", executor=cluster)
    assert there.n_computed == toy.SETTINGS["quick"].n_cells and there.verdict == "PASS"
    pd.testing.assert_frame_equal(_values(there.tables["table"]), _values(here.tables["table"]))
    m = json.loads((tmp_path / "there" / "toy" / "run.json").read_text())
    assert m["executor"] == "local dask cluster (2 workers)" and m["status"] == "complete"


def _kill_a_busy_worker(client, killed: list, stop: threading.Event) -> None:
    """SIGKILL the process of the first worker seen running a task."""
    while not stop.is_set():
        busy = [w for w, tasks in client.processing().items() if tasks]
        if busy:
            time.sleep(0.5)  # let the cell start sleeping
            pids = client.run(os.getpid, workers=busy[:1])
            for pid in pids.values():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            return
        time.sleep(0.05)


def test_killed_worker_run_completes_identically(tmp_path, cluster):
    exp = toy.SLOW_EXPERIMENT
    s = toy.SLOW_SETTINGS["quick"]
    killed, stop = [], threading.Event()
    killer = threading.Thread(target=_kill_a_busy_worker, args=(cluster.client, killed, stop))
    killer.start()
    try:
        res = _run(exp, tmp_path / "dask", executor=cluster)
    finally:
        stop.set()
        killer.join()
    assert len(killed) == 1
    assert res.tables.complete and res.n_computed == s.n_cells and res.verdict == "PASS"
    table = pd.read_csv(tmp_path / "dask" / exp.name / "table.csv")
    assert len(table) == s.n_cells * s.n_rows and not table.duplicated(["cell", "j"]).any()
    # the same cells without the sleep (the key depends on experiment, cell id and seed only)
    ref = _run(exp, tmp_path / "ref", dataclasses.replace(s, sleep=0.0))
    cols = list(toy.SCHEMA["table"]) + ["cell", "seed", "experiment"]
    pd.testing.assert_frame_equal(res.tables["table"][cols], ref.tables["table"][cols])


def test_concurrent_runs_into_one_folder_agree(tmp_path):
    exp = toy.SLOW_EXPERIMENT
    s = toy.Settings(n_cells=4, sleep=0.2)
    results, errors = [], []

    def one():
        try:
            results.append(_run(exp, tmp_path, s))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 2
    assert all(r.tables.complete and r.verdict == "PASS" for r in results)
    disk = collect(exp, tmp_path, s, warn=True)  # every cell file valid (no warning)
    assert disk.complete
    table = pd.read_csv(tmp_path / exp.name / "table.csv")
    assert len(table) == s.n_cells * s.n_rows and not table.duplicated(["cell", "j"]).any()
    for r in results:
        pd.testing.assert_frame_equal(_values(r.tables["table"]), _values(disk["table"]))
    assert not list((tmp_path / exp.name).rglob("*.tmp"))


@pytest.mark.parametrize("workers", [0, -1, "x", 1.5])
def test_open_executor_rejects_bad_workers(workers):
    with pytest.raises(ValueError, match="--workers must be a positive integer"):
        with open_executor(workers=workers):
            pass


def test_cli_workers_starts_a_local_cluster(tmp_path, monkeypatch, toy_cli):
    """``--workers 2`` (a string from the command line) reaches LocalCluster(n_workers=2)."""
    import distributed

    class Started(Exception):
        pass

    def fake_cluster(n_workers, **kw):
        raise Started(n_workers, kw["threads_per_worker"])

    monkeypatch.setattr(distributed, "LocalCluster", fake_cluster)
    monkeypatch.setenv("GRPO_THEORY_DEBUG", "1")  # re-raise instead of the one-line error
    with pytest.raises(Started) as started:
        cli.main(["toy", "--workers", "2", "--out", str(tmp_path), "--no-progress"])
    assert started.value.args == (2, 1)


@pytest.mark.parametrize("workers", ["0", "-1", "x", "1.5", ""])
def test_cli_rejects_bad_workers(tmp_path, workers, toy_cli, capsys):
    assert cli.main(["toy", "--workers", workers, "--out", str(tmp_path)]) == 2
    assert "--workers must be a positive integer" in capsys.readouterr().err
    assert not (tmp_path / "toy").exists()


def test_cli_rejects_unknown_experiment(tmp_path, toy_cli, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["no-such-experiment", "--out", str(tmp_path)])
    assert exc.value.code != 0
    assert "no-such-experiment" in capsys.readouterr().err


def test_unreachable_scheduler_fails_fast(tmp_path, monkeypatch, toy_cli, capsys):
    """Nobody listens at the address: a ValueError after the connect timeout, not a hang.

    The default timeout is at most 10 s; the test shortens it to 1 s to keep the suite fast.
    """
    assert executors.CONNECT_TIMEOUT <= 10
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="could not reach a Dask scheduler"):
        with open_executor(scheduler=address, connect_timeout=1):
            pass
    assert time.perf_counter() - t0 < 15.0
    monkeypatch.setattr(executors, "CONNECT_TIMEOUT", 1)
    t0 = time.perf_counter()
    code = cli.main(["toy", "--scheduler", address, "--out", str(tmp_path), "--no-progress"])
    assert code == 2 and time.perf_counter() - t0 < 15.0
    err = capsys.readouterr().err
    assert "could not reach a Dask scheduler" in err and address in err
    assert not (tmp_path / "toy").exists()


def test_interrupted_run_keeps_finished_cells_and_resumes(tmp_path, monkeypatch):
    n = toy.SETTINGS["quick"].n_cells
    real, calls = runner.compute_cell, []

    def interrupted(module, name, cell, seed, cache=None):
        calls.append(cell.id)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(module, name, cell, seed, cache)

    monkeypatch.setattr(runner, "compute_cell", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _run(toy.EXPERIMENT, tmp_path)
    exp_dir = tmp_path / "toy"
    assert len(list((exp_dir / "cells").rglob("*.csv"))) == 2
    assert set(pd.read_csv(exp_dir / "table.csv")["cell"]) == {"c0", "c1"}
    m = json.loads((exp_dir / "run.json").read_text())
    assert m["status"] == "partial" and m["n_missing"] == n - 2
    calls.clear()

    def counting(module, name, cell, seed, cache=None):
        calls.append(cell.id)
        return real(module, name, cell, seed, cache)

    monkeypatch.setattr(runner, "compute_cell", counting)
    res = _run(toy.EXPERIMENT, tmp_path)
    assert calls == [f"c{i}" for i in range(2, n)]
    assert res.n_computed == n - 2 and res.n_reused == 2 and res.verdict == "PASS"
    assert json.loads((exp_dir / "run.json").read_text())["status"] == "complete"
