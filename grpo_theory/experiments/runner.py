"""One experiment runner: settings, cells, resume, validated storage, verdicts, report, figures.

An experiment (a driver in ``simulations/``, installed as ``grpo_theory.studies``) is a value of
:class:`Experiment`:

* ``settings``: ``{"quick": Settings(...), "full": Settings(...)}`` (frozen dataclasses);
* ``cells(settings) -> [Cell(id, config, kind)]``: the sweep, each cell's ``config`` a JSON-like
  dict holding everything the cell needs;
* ``cell(config, key) -> rows``: a pure function of the configuration and a JAX PRNG key;
* ``schema``: ``{kind: {column: dtype}}``, checked when a cell is written and when it is read;
* ``report(tables, settings) -> Section``: markdown and a list of :class:`Check` (PASS/FAIL);
* ``plot(tables, settings, out_dir)``: figures drawn from the tables only.

:func:`run_experiment` runs the cells that are not on disk yet (in-process or on a Dask
cluster, see :mod:`grpo_theory.experiments.executors`), writes each finished cell atomically
as it arrives, assembles one tidy table per kind, and returns the report section. Each cell's key
is ``fold_in(fold_in(PRNGKey(seed), h(experiment)), h(cell id))``, so the tables are identical
whatever the executor, the number of workers or the order in which cells finish.

One verdict vocabulary: ``PASS`` (every check passed), ``FAIL`` (a check failed) and
``INCOMPLETE`` (cells are missing, or a check had no finite number to look at): a missing number
is never a PASS.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd

from .. import __version__
from .._cache import cache_context
from .._validation import integer, seed_key
from .checks import Check, Section
from .progress import CellProgress
from .store import (CellSchemaError, CellStore, atomic_write_csv, atomic_write_text,
                    cell_text, check_out_dir)


def package_version() -> str:
    return __version__


@dataclass(frozen=True)
class Cell:
    """One unit of work: ``id`` (unique in the sweep), ``config`` (JSON-like), ``kind`` (table)."""

    id: str
    config: dict
    kind: str = "table"


class Tables(dict):
    """``{kind: DataFrame}`` of the finished cells (cell order), with completeness info.

    ``tables["table"]`` is the main table; a kind with no finished cell is an empty frame with
    the schema's columns. ``complete`` is True when every cell of the sweep is on disk;
    ``missing`` lists the ids of the cells that are not.
    """

    def __init__(self, data, missing=(), n_cells: int = 0):
        super().__init__(data)
        self.missing = list(missing)
        self.n_cells = n_cells

    @property
    def complete(self) -> bool:
        return not self.missing


@dataclass(frozen=True)
class Experiment:
    """A study: configuration, a pure cell function, checks and a figure (see module docs)."""

    name: str
    claim: str
    settings: Mapping[str, Any]
    cells: Callable[[Any], list]
    cell: Callable[[dict, Any], Any]
    schema: Mapping[str, Mapping[str, str]]
    report: Callable[[Tables, Any], Section]
    plot: Callable[[Tables, Any, Path], Any] | None = None
    order: int = 100

    @property
    def module(self) -> str:
        """The module that defines the cell function (imported by Dask workers)."""
        return self.cell.__module__

    def get_settings(self, setting):
        """The settings object of ``setting`` ("quick", "full") or ``setting`` itself."""
        if isinstance(setting, str):
            if setting not in self.settings:
                raise ValueError(f"setting must be one of {sorted(self.settings)} for "
                                 f"{self.name}, got {setting!r}")
            return self.settings[setting]
        return setting

    def cell_list(self, settings) -> list[Cell]:
        cells = list(self.cells(settings))
        ids = [c.id for c in cells]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"{self.name}: duplicate cell ids {dup[:5]}")
        bad = sorted({c.kind for c in cells} - set(self.schema))
        if bad:
            raise ValueError(f"{self.name}: cells of kind {bad} have no schema")
        return cells


def setting_name(exp: Experiment, setting) -> str:
    """The name recorded for a setting: its key in ``exp.settings``, ``<key>+model-<hash>`` for
    a named setting on another model (``dataclasses.replace(named, model=path)``, ``--model``)
    or ``custom-<hash>``."""
    if isinstance(setting, str):
        exp.get_settings(setting)
        return setting
    for k, v in exp.settings.items():
        if v == setting:
            return k
    model = getattr(setting, "model", None)
    if isinstance(model, str) and dataclasses.is_dataclass(setting):
        for k, v in exp.settings.items():
            if dataclasses.replace(setting, model=getattr(v, "model", None)) == v:
                return f"{k}+model-{hashlib.sha256(model.encode()).hexdigest()[:10]}"
    blob = repr(dataclasses.asdict(setting) if dataclasses.is_dataclass(setting) else setting)
    return "custom-" + hashlib.sha256(blob.encode()).hexdigest()[:10]


def _h32(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


def cell_key(experiment: str, cell_id: str, seed: int):
    """The cell's PRNG key: ``fold_in`` of the experiment and cell id into ``PRNGKey(seed)``.

    Distinct (experiment, cell, seed) give independent keys: seed 2 of one cell never repeats
    seed 0 of another (the old ``seed + G`` scheme did).
    """
    k = seed_key(seed)
    k = jax.random.fold_in(k, _h32(experiment))
    return jax.random.fold_in(k, _h32(cell_id))


def key_seed(key, n: int | None = None):
    """An integer seed in ``[0, 2**31)`` (or ``n`` of them) drawn from ``key``, for NumPy-style
    APIs that take ``seed=``."""
    bits = jax.random.bits(key, () if n is None else (n,), dtype=np.uint32)
    out = np.asarray(bits).astype(np.int64) >> 1
    return int(out) if n is None else [int(v) for v in out]


def compute_cell(module: str, name: str, cell: Cell, seed: int, cache=None):
    """Run one cell (in this process or on a Dask worker): ``(rows DataFrame, seconds)``.

    Imports ``module`` to find the experiment (so workers need only the installed package), runs
    the cell function with its derived key. Precision is the cell's own: a driver whose cell
    needs float64 says so at its ``def`` with :func:`float64`; the runner changes nothing.
    """
    exp = _find(importlib.import_module(module), name)
    t0 = time.perf_counter()
    with cache_context(cache):
        rows = exp.cell(dict(cell.config), cell_key(exp.name, cell.id, seed))
    dt = time.perf_counter() - t0
    if isinstance(rows, pd.DataFrame):
        df = rows.reset_index(drop=True)
    else:
        df = pd.DataFrame([rows] if isinstance(rows, dict) else list(rows))
    return df, dt


class InProcessExecutor:
    """Runs the cells one after another in this process (the default)."""

    n_workers = 1

    def describe(self) -> str:
        return "in-process"

    def map_many(self, work, seed: int, cache=None):
        """Run ``[(experiment, cell), ...]`` in order; yield ``(experiment, cell, rows, s)``."""
        for exp, c in work:
            rows, dt = compute_cell(exp.module, exp.name, c, seed, cache)
            yield exp, c, rows, dt


def _find(mod, name: str) -> Experiment:
    for v in vars(mod).values():
        if isinstance(v, Experiment) and v.name == name:
            return v
    raise ValueError(f"module {mod.__name__} defines no experiment named {name!r}")


@dataclass
class RunResult:
    """What :func:`run_experiment` returns: tables, report section, verdict and counts.

    ``seconds`` is the experiment's own wall clock, from the start of its first computed cell
    to the end of its last (0 when every cell was reused; with several experiments in flight
    at once it overlaps the others'); ``compute_seconds`` sums the computed cells' own times.
    """

    experiment: str
    setting: str
    seed: int
    tables: Tables
    section: Section
    n_cells: int
    n_computed: int
    n_reused: int
    seconds: float
    compute_seconds: float = 0.0

    @property
    def verdict(self) -> str:
        return self.section.verdict


def _manifest_path(exp_dir: Path) -> Path:
    return exp_dir / "run.json"


def _rescue(cell: Cell, df: pd.DataFrame, store: CellStore, err: OSError) -> str:
    """Keep a computed cell whose write failed: a valid cell file in a temporary folder."""
    rescue = Path(tempfile.gettempdir()) / "grpo-theory-rescue" / store.path(cell).relative_to(
        store.dir.parent)
    try:
        atomic_write_text(rescue, cell_text(df))
        where = f"saved to {rescue}; copy it to {store.path(cell)} to resume without recomputing"
    except OSError:
        where = "it could not be saved anywhere"
    return f"writing cell {cell.id!r} to {store.path(cell)} failed ({err}); the result is {where}"


def collect(exp: Experiment, out, setting="quick", seed: int = 0, warn: bool = True) -> Tables:
    """The tables of the valid cells on disk for (setting, seed); nothing is computed."""
    settings = exp.get_settings(setting)
    name = setting_name(exp, setting)
    store = CellStore(Path(out) / exp.name, exp.name, name, seed, exp.schema, package_version())
    cells = exp.cell_list(settings)
    return _assemble(exp, store, cells, {}, warn)


def _assemble(exp, store, cells, fresh: dict, warn: bool) -> Tables:
    frames: dict[str, list] = {k: [] for k in exp.schema}
    missing = []
    for c in cells:
        df = fresh.get(c.id)
        if df is None:
            df = store.read(c, warn=warn)
        if df is None:
            missing.append(c.id)
            continue
        frames[c.kind].append(df)
    tables = {}
    for kind, fs in frames.items():
        if fs:
            tables[kind] = pd.concat(fs, ignore_index=True)
        else:
            tables[kind] = pd.DataFrame(columns=list(exp.schema[kind]))
    return Tables(tables, missing, len(cells))


def _section(exp: Experiment, tables: Tables, settings) -> Section:
    if all(len(df) == 0 for df in tables.values()):
        return Section(exp.claim, "No finished cells yet.", [])
    try:
        sec = exp.report(tables, settings)
    except Exception as e:  # noqa: BLE001 - a partial table may lack what the report needs
        if tables.complete:  # a bug in the driver's report: say so, as a failed check
            return Section(exp.claim, f"The report could not be computed: "
                           f"{type(e).__name__}: {e}",
                           [Check("report computed from the tables", False,
                                  f"{type(e).__name__}")])
        sec = Section(exp.claim, f"(report needs the missing cells: {type(e).__name__}: {e})", [])
    if not tables.complete:
        note = (f"**Incomplete run**: {len(tables.missing)} of {tables.n_cells} cells are "
                "missing (rerun the same command to resume); the verdict is INCOMPLETE until "
                "they are computed.")
        sec = Section(sec.title, note + "\n\n" + sec.markdown,
                      list(sec.checks) + [Check("every cell computed", None,
                                                f"{len(tables.missing)} missing")])
    return sec


@dataclass
class _Run:
    """One experiment's run in progress (store, cells, manifest, fresh results, progress)."""

    exp: Experiment
    settings: Any
    name: str
    seed: int
    exp_dir: Path
    store: CellStore
    cells: list
    todo: list
    fresh: dict
    manifest: dict
    bar: Any
    compute_seconds: float = 0.0


def _prepare(exp, out: Path, setting, seed: int, executor, progress: bool, verbose: bool) -> _Run:
    settings = exp.get_settings(setting)
    name = setting_name(exp, setting)
    exp_dir = out / exp.name
    exp_dir.mkdir(parents=True, exist_ok=True)
    version = package_version()
    store = CellStore(exp_dir, exp.name, name, seed, exp.schema, version)
    cells = exp.cell_list(settings)
    manifest = dict(experiment=exp.name, setting=name, seed=seed, version=version,
                    n_cells=len(cells), executor=executor.describe(), status="running",
                    started=time.strftime("%Y-%m-%dT%H:%M:%S"))
    if dataclasses.is_dataclass(settings):
        manifest["settings"] = dataclasses.asdict(settings)
    atomic_write_text(_manifest_path(exp_dir), json.dumps(manifest, indent=1, default=str))
    have = {c.id: store.read(c) for c in cells}
    todo = [c for c in cells if have[c.id] is None]
    fresh = {cid: df for cid, df in have.items() if df is not None}
    header = f"== {exp.name} ({name}, seed {seed}): {exp.claim}" if verbose else None
    bar = CellProgress(exp.name, len(cells), skipped=len(cells) - len(todo),
                       workers=executor.n_workers, enabled=progress, header=header)
    return _Run(exp, settings, name, seed, exp_dir, store, cells, todo, fresh, manifest, bar)


def _store_cell(run: _Run, cell: Cell, rows: pd.DataFrame, dt: float) -> None:
    """Validate and write one finished cell (atomically); a failed write keeps a rescue copy."""
    try:
        df = run.store._frame(cell, rows.copy())
    except CellSchemaError as e:
        raise CellSchemaError(f"{e} (config {cell.config})") from None
    df["cell_seconds"] = dt
    try:
        atomic_write_text(run.store.path(cell), cell_text(df))
    except OSError as e:
        raise OSError(_rescue(cell, df, run.store, e)) from e
    run.fresh[cell.id] = run.store.read(cell, warn=False)
    run.compute_seconds += dt
    run.bar.update(cell.id, dt)


def _finish(run: _Run, figures: bool) -> RunResult:
    """Tables from the cells on disk, the manifest's final status, report section, figures."""
    run.bar.close()
    tables = _assemble(run.exp, run.store, run.cells, run.fresh, warn=False)
    for kind, df in tables.items():
        atomic_write_csv(run.exp_dir / f"{kind}.csv", df)
    run.manifest.update(status="complete" if tables.complete else "partial",
                        finished=time.strftime("%Y-%m-%dT%H:%M:%S"),
                        seconds=round(run.bar.elapsed, 3),
                        compute_seconds=round(run.compute_seconds, 3),
                        n_missing=len(tables.missing))
    atomic_write_text(_manifest_path(run.exp_dir),
                      json.dumps(run.manifest, indent=1, default=str))
    return tables


def _result(run: _Run, tables: Tables, figures: bool) -> RunResult:
    section = _section(run.exp, tables, run.settings)
    if figures and run.exp.plot is not None and tables.complete:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run.exp.plot(tables, run.settings, run.exp_dir)
    return RunResult(run.exp.name, run.name, run.seed, tables, section, len(run.cells),
                     len(run.todo), len(run.cells) - len(run.todo), run.bar.elapsed,
                     run.compute_seconds)


def run_experiments(experiments, out, setting="quick", seed: int = 0, executor=None,
                    figures: bool = True, progress: bool = True,
                    verbose: bool = True) -> dict[str, RunResult]:
    """Run several experiments through one executor; cells of all of them are in flight at once.

    Same arguments as :func:`run_experiment` (``experiments`` a list of :class:`Experiment`);
    returns ``{name: RunResult}``. On a cluster this keeps every worker busy across experiment
    boundaries; in-process it runs the cells in experiment order.
    """
    seed = integer("seed", seed)
    out = check_out_dir(out)
    executor = executor or InProcessExecutor()
    runs = [_prepare(e, out, setting, seed, executor, progress, verbose) for e in experiments]
    by_name = {r.exp.name: r for r in runs}
    work = [(r.exp, c) for r in runs for c in r.todo]
    done: dict[str, Tables] = {}
    left = {r.exp.name: len(r.todo) for r in runs}

    def finish_ready():  # in order, each run whose cells are all in (its bar closes, run.json)
        for r in runs:
            if r.exp.name not in done:
                if left[r.exp.name]:
                    return
                done[r.exp.name] = _finish(r, figures)

    try:
        finish_ready()
        for exp, cell, rows, dt in executor.map_many(work, seed=seed, cache=out / ".cache"):
            _store_cell(by_name[exp.name], cell, rows, dt)
            left[exp.name] -= 1
            finish_ready()
    finally:
        for r in runs:
            if r.exp.name not in done:
                done[r.exp.name] = _finish(r, figures)
    return {r.exp.name: _result(r, done[r.exp.name], figures) for r in runs}


def run_experiment(exp: Experiment, out, setting="quick", seed: int = 0, executor=None,
                   figures: bool = True, progress: bool = True, verbose: bool = True) -> RunResult:
    """Compute the missing cells of ``exp`` for (setting, seed), save tables, report, figures.

    Args:
        exp: the experiment.
        out: the output folder; the experiment writes to ``out/<exp.name>/``.
        setting: "quick", "full" or a settings object of the experiment's type.
        seed: the run's seed (part of every cell's identity and key).
        executor: ``None`` (in this process) or an executor from
            :func:`grpo_theory.experiments.executors.open_executor`.
        figures: draw the figures after the run.
        progress: show a progress bar (plain lines when stderr is not a terminal).
        verbose: print a header line naming the experiment, setting and seed.

    Returns:
        :class:`RunResult` with the tables, the report section and its verdict.
    """
    return run_experiments([exp], out, setting, seed, executor, figures, progress,
                           verbose)[exp.name]


def last_run(exp: Experiment, out) -> dict | None:
    """The manifest of the last run of ``exp`` under ``out`` (None if it never ran there)."""
    p = _manifest_path(Path(out) / exp.name)
    if not p.exists():
        return None
    try:
        m = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}); "
                         f"rerun the experiment to rewrite it") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{p}: cannot be read ({type(e).__name__}: {e})") from None
    return check_manifest(m, p)


def check_manifest(m, path) -> dict:
    """``m`` (the content of the ``run.json`` at ``path``) if its fields have their types: an
    object with "setting" (string) and "seed" (integer), "settings" an object or null; else a
    one-line ``ValueError`` naming the file and the field."""
    if not isinstance(m, dict):
        raise ValueError(f"{path}: must hold a JSON object, got {type(m).__name__}")
    for key, kind, what in (("setting", str, "a string"), ("seed", int, "an integer")):
        if key not in m:
            raise ValueError(f"{path}: field {key!r} is missing; rerun the experiment")
        if not isinstance(m[key], kind) or isinstance(m[key], bool):
            raise ValueError(f"{path}: field {key!r} must be {what}, got {m[key]!r}")
    if m.get("settings") is not None and not isinstance(m["settings"], dict):
        raise ValueError(f"{path}: field 'settings' must be an object, got {m['settings']!r}")
    return m


def report_section(exp: Experiment, out, figures: bool = False) -> tuple[Section, dict] | None:
    """The report section of the last run of ``exp`` under ``out``, from its validated cells."""
    m = last_run(exp, out)
    if m is None:
        return None
    setting = m["setting"]
    base, sep, _ = setting.partition("+model-")
    model = (m.get("settings") or {}).get("model") if sep else None
    if base in exp.settings and isinstance(model, str):  # a named setting on another model
        try:  # the checkpoint may have moved since: then the placeholder below
            settings = dataclasses.replace(exp.settings[base], model=model)
            ok = setting_name(exp, settings) == setting
            tables = collect(exp, out, settings, m["seed"]) if ok else None
        except ValueError:
            tables = None
        if tables is not None:
            if figures and exp.plot is not None and tables.complete:
                exp.plot(tables, settings, Path(out) / exp.name)
            return _section(exp, tables, settings), m
    if setting not in exp.settings:
        return Section(exp.claim, f"Run with a custom setting {setting!r}; the report is "
                       "produced by the code that ran it.", []), m
    settings = exp.get_settings(setting)
    tables = collect(exp, out, setting, m["seed"])
    if figures and exp.plot is not None and tables.complete:
        exp.plot(tables, settings, Path(out) / exp.name)
    return _section(exp, tables, settings), m


def is_timing(column: str) -> bool:
    """Timing columns (``cell_seconds``, ``*seconds``, ``*_per_s``) vary from run to run; every
    other column of a table is identical whatever the executor."""
    return column.endswith("seconds") or column.endswith("_per_s")
