"""The one-way architecture, checked on every test run.

import-linter (contracts in ``.importlinter``): each layer of ``grpo_theory`` (core -> optim ->
companions -> problems -> lm -> advisor -> experiments, with the utilities below them all)
imports only from the layers below it, and no package has an import cycle between its modules.
Imports inside functions count: import-linter reads every import statement. The studies
(``simulations/``, one folder each, installed as ``grpo_theory.studies``) sit above everything: no
library module imports them, none imports another, the runner finds them through entry points,
and no top-level ``simulations`` package is installed."""

import ast
import re
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

from grpo_theory.experiments import registry

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def test_import_contracts_hold():
    r = subprocess.run([str(LINT), "--config", str(ROOT / ".importlinter")], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in r.stdout


def test_a_broken_layer_is_caught(tmp_path):
    """The contracts can fail: a core module that imports the advisor breaks the layers; inside
    ``grpo_theory.lm``, the budget importing the checkpoints breaks the lm layers (one run)."""
    pkg = tmp_path / "grpo_theory"
    subprocess.run(["cp", "-r", str(ROOT / "grpo_theory"), str(pkg)], check=True)
    with open(pkg / "core" / "stats.py", "a") as fh:
        fh.write("\nfrom ..advisor import estimate  # noqa: E402,F401\n")
    with open(pkg / "lm" / "budget" / "options.py", "a") as fh:
        fh.write("\n\ndef _up():\n    from ..checkpoints import hf  # noqa: F401\n")
    r = subprocess.run([str(LINT), "--config", str(ROOT / ".importlinter")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    out = r.stdout[-3000:] + r.stderr[-2000:]
    assert r.returncode != 0 and "grpo_theory.core is not allowed to import" in r.stdout, out
    assert "grpo_theory.lm.budget is not allowed to import grpo_theory.lm.checkpoints" in (
        r.stdout), out


def written_more_than_once(sources: dict) -> list:
    """What the one-definition rules of ``grpo_theory.lm`` find in ``sources`` (path -> text):
    ``MODEL_DTYPES`` assigned outside ``lm/budget/options.py``, and a path tested for the
    ``.gguf`` suffix outside the loader's ``checkpoint_format``."""
    out = []
    for path, text in sources.items():
        if re.search(r"^MODEL_DTYPES\s*=", text, re.M) and not path.endswith(
                "lm/budget/options.py"):
            out.append(f"{path}: MODEL_DTYPES")
        if re.search(r"(endswith\(|suffix[^\n]*==)\s*\"\.gguf\"", text) and not path.endswith(
                "lm/checkpoints/load.py"):
            out.append(f"{path}: .gguf")
    return out


def test_model_dtypes_and_the_checkpoint_test_are_written_once():
    """``MODEL_DTYPES`` is defined once and "a directory or a .gguf file" is decided by one
    function (:func:`grpo_theory.lm.checkpoints.load.checkpoint_format`). Rival: the copies
    this rule replaced (a second tuple, a suffix test in the command line) are found."""
    sources = {str(p.relative_to(ROOT)): p.read_text()
               for p in (ROOT / "grpo_theory").rglob("*.py")}
    assert written_more_than_once(sources) == []
    copies = {"grpo_theory/lm/checkpoints/local.py": 'MODEL_DTYPES = ("float32", "bfloat16")\n',
              "grpo_theory/experiments/cli.py": 'ok = path.suffix.lower() == ".gguf"\n',
              "grpo_theory/lm/loaders.py": 'return os.fspath(path).lower().endswith(".gguf")\n'}
    assert len(written_more_than_once(copies)) == 3


def _imported_modules(path: Path, package: str) -> set[str]:
    """Absolute names of every module ``path`` imports (inside functions too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def test_the_library_never_imports_a_study():
    for path in (ROOT / "grpo_theory").rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        package = ".".join(rel.parts[:-1] if rel.name != "__init__" else rel.parts[:-1])
        bad = {m for m in _imported_modules(path, package)
               if m.split(".")[0] == "simulations" or m.startswith("grpo_theory.studies")}
        assert not bad, f"{path.relative_to(ROOT)} imports the study drivers {sorted(bad)}"


#: study folders run as a module (``python -m grpo_theory.studies.<name>``), not registered: the
#: real-model study needs a download that a fresh clone lacks; the TRL study needs the torch extra
#: and trains (minutes), so it is not part of ``reproduce``; the transformer allocation study
#: trains for every rule and seed (minutes)
STANDALONE = {"smollm2", "trl_scheduler", "allocation_lm"}


def study_layout_problems(root: Path, eps: set, standalone=STANDALONE) -> list:
    """What breaks the one-folder-per-study layout of ``root/simulations``: a module beside the
    folders (only ``__init__.py`` may sit there), a study folder that is not an entry point of
    ``grpo_theory.studies`` (unless it is standalone, then it must have a ``__main__.py``), an
    entry point of this package with no folder, and a study module importing another study."""
    sims = root / "simulations"
    folders = {p.parent.name for p in sims.glob("*/__init__.py")}
    problems = [f"{p.name}: a module beside the study folders"
                for p in sims.glob("*.py") if p.name != "__init__.py"]
    ours = {e.split(".")[2] for e in eps if e.startswith("grpo_theory.studies.")}
    problems += [f"{f}/: no entry point" for f in sorted(folders - ours - set(standalone))]
    problems += [f"{f}/: no __main__.py" for f in sorted(set(standalone) & folders)
                 if not (sims / f / "__main__.py").is_file()]
    problems += [f"grpo_theory.studies.{e}: no folder" for e in sorted(ours - folders)]
    for f in sorted(folders):
        for path in sorted((sims / f).rglob("*.py")):
            package = "grpo_theory.studies." + ".".join(path.relative_to(sims).parts[:-1])
            others = {m.split(".")[2] for m in _imported_modules(path, package)
                      if m.startswith("grpo_theory.studies.") and len(m.split(".")) > 2}
            problems += [f"{path.relative_to(root)} imports the study {o}"
                         for o in sorted(others - {f})]
    return problems


def test_studies_register_through_entry_points():
    """Every study folder in simulations/ is an entry point of ``grpo_theory.studies`` (so the
    runner, which imports no study by name, finds it) and imports no other study; every
    subpackage of ``grpo_theory`` and every study folder is in the packages that
    ``pyproject.toml`` installs."""
    eps = {ep.value for ep in entry_points(group=registry.GROUP)}
    assert study_layout_problems(ROOT, eps) == []
    folders = {p.parent.name for p in (ROOT / "simulations").glob("*/__init__.py")}
    assert set(registry.modules()) >= eps
    assert len(registry.experiments()) == len(folders - STANDALONE)
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    subpackages = {".".join(p.parent.relative_to(ROOT).parts)
                   for p in (ROOT / "grpo_theory").rglob("__init__.py")}
    studies = {"grpo_theory.studies." + ".".join(p.parent.relative_to(ROOT / "simulations").parts)
               for p in (ROOT / "simulations").glob("*/**/__init__.py")}
    assert studies >= {f"grpo_theory.studies.{f}" for f in folders}
    assert subpackages | studies | {"grpo_theory.studies"} == set(cfg["packages"])
    assert cfg["package-dir"] == {"grpo_theory.studies": "simulations"}


def test_a_broken_study_layout_is_caught(tmp_path):
    """The layout check fails on a flat driver, an unregistered folder, a standalone folder with
    no ``__main__.py``, an entry point without a folder and one study importing another."""
    sims = tmp_path / "simulations"
    for f in ("alpha", "beta", "solo"):
        (sims / f).mkdir(parents=True)
        (sims / f / "__init__.py").write_text("")
    (sims / "__init__.py").write_text("")
    (sims / "alpha" / "study.py").write_text("from grpo_theory.studies.beta import study\n")
    (sims / "flat.py").write_text("")
    eps = {"grpo_theory.studies.alpha", "grpo_theory.studies.gone"}
    assert sorted(study_layout_problems(tmp_path, eps, {"solo"})) == sorted([
        "flat.py: a module beside the study folders", "beta/: no entry point",
        "solo/: no __main__.py", "grpo_theory.studies.gone: no folder",
        "simulations/alpha/study.py imports the study beta"])
    (sims / "flat.py").unlink()
    (sims / "solo" / "__main__.py").write_text("")
    (sims / "alpha" / "study.py").write_text("from . import helpers\n")
    eps = {"grpo_theory.studies.alpha", "grpo_theory.studies.beta"}
    assert study_layout_problems(tmp_path, eps, {"solo"}) == []


def test_no_top_level_simulations_package_is_installed(tmp_path):
    """A regular (non-editable) install puts the drivers under grpo_theory.studies only."""
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    import zipfile

    (whl,) = tmp_path.glob("grpo_theory-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    assert "grpo_theory/studies/lm_rank/__init__.py" in names
    assert "grpo_theory/studies/smollm2/__main__.py" in names
    assert "grpo_theory/core/problem.py" in names
    assert not any(n.startswith("simulations/") for n in names)


def test_the_suite_is_dealt_out_a_module_at_a_time():
    """``make test`` keeps a module's tests on one xdist worker (``--dist loadscope`` on its
    pytest line; not in ``addopts``, which a run with ``-p no:xdist`` would refuse), so each
    module-scoped fixture (a whole quick study) is computed once; the rival, xdist's default
    ``load``, deals single tests out in turn and repeats the fixture on every worker that drew
    one of its tests."""
    import shlex

    line = [ln for ln in (ROOT / "Makefile").read_text().splitlines()
            if ln.startswith("\t") and "-m pytest" in ln and "not slow" in ln]
    assert len(line) == 1, line
    args = shlex.split(line[0])
    dist = [b for a, b in zip(args, args[1:]) if a == "--dist"]
    assert dist == ["loadscope"], args
    opts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--dist" not in shlex.split(opts["addopts"])  # -p no:xdist must still run
