"""The one-way architecture, checked on every test run.

import-linter (contracts in ``.importlinter``): each layer of ``grpo_theory`` (core -> optim ->
companions -> problems -> lm -> advisor -> experiments, with the utilities below them all)
imports only from the layers below it, and no package has an import cycle between its modules.
Imports inside functions count: import-linter reads every import statement. The study drivers
(``simulations/``, installed as ``grpo_theory.studies``) sit above everything: no library module
imports them, the runner finds them through entry points, and no top-level ``simulations``
package is installed."""

import ast
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
    assert "Contracts: 2 kept, 0 broken." in r.stdout


def test_a_broken_layer_is_caught(tmp_path):
    """The contract can fail: a core module that imports the advisor breaks it."""
    pkg = tmp_path / "grpo_theory"
    subprocess.run(["cp", "-r", str(ROOT / "grpo_theory"), str(pkg)], check=True)
    with open(pkg / "core" / "stats.py", "a") as fh:
        fh.write("\nfrom ..advisor import estimate  # noqa: E402,F401\n")
    r = subprocess.run([str(LINT), "--config", str(ROOT / ".importlinter")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert r.returncode != 0 and "grpo_theory.core is not allowed to import" in r.stdout, (
        r.stdout[-3000:] + r.stderr[-2000:])


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


def test_studies_register_through_entry_points():
    """Every driver in simulations/ is an entry point of ``grpo_theory.studies`` (so the runner,
    which imports no study by name, finds it), and every subpackage of ``grpo_theory`` is in the
    packages that ``pyproject.toml`` installs."""
    eps = {ep.value for ep in entry_points(group=registry.GROUP)}
    drivers = {f"grpo_theory.studies.{p.stem}" for p in (ROOT / "simulations").glob("*.py")
               if not p.stem.startswith("_")}
    # a study may also be a folder (a package under simulations/ with its own __init__.py)
    folders = {f"grpo_theory.studies.{p.parent.name}"
               for p in (ROOT / "simulations").glob("*/__init__.py")}
    drivers |= folders
    assert drivers == eps and set(registry.modules()) >= eps
    assert len(registry.experiments()) == len(drivers)
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    subpackages = {".".join(p.parent.relative_to(ROOT).parts)
                   for p in (ROOT / "grpo_theory").rglob("__init__.py")}
    assert subpackages | {"grpo_theory.studies"} | folders == set(cfg["packages"])
    assert cfg["package-dir"] == {"grpo_theory.studies": "simulations"}


def test_no_top_level_simulations_package_is_installed(tmp_path):
    """A regular (non-editable) install puts the drivers under grpo_theory.studies only."""
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    import zipfile

    (whl,) = tmp_path.glob("grpo_theory-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    assert "grpo_theory/studies/lm_rank.py" in names and "grpo_theory/core/problem.py" in names
    assert not any(n.startswith("simulations/") for n in names)
