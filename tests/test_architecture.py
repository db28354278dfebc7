"""The one-way architecture, checked by import-linter on every test run (contracts in
``.importlinter``): each layer of ``grpo_theory`` (core -> optim -> companions -> problems -> lm
-> advisor -> experiments, with the utilities below them all) imports only from the layers below
it, no package has an import cycle between its modules, and the library never imports a study
driver. Imports inside functions count: import-linter reads every import statement."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_hold():
    exe = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(exe), "--config", str(ROOT / ".importlinter")], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in r.stdout


def test_a_broken_layer_is_caught(tmp_path):
    """The contract can fail: a core module that imports the advisor breaks it."""
    pkg = tmp_path / "grpo_theory"
    subprocess.run(["cp", "-r", str(ROOT / "grpo_theory"), str(pkg)], check=True)
    (tmp_path / "simulations").mkdir()
    (tmp_path / "simulations" / "__init__.py").write_text("")
    with open(pkg / "core" / "stats.py", "a") as fh:
        fh.write("\nfrom ..advisor import estimate  # noqa: E402,F401\n")
    exe = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(exe), "--config", str(ROOT / ".importlinter")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert r.returncode != 0 and "grpo_theory.core is not allowed to import" in r.stdout, (
        r.stdout[-3000:] + r.stderr[-2000:])
