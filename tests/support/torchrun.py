"""Run a support script under ``torchrun`` with 2 CPU processes (gloo) for the multi-process
tests: the package and ``tests/`` on the path, one thread a process."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

TESTS = Path(__file__).resolve().parents[1]


def torchrun(script: str, out, scenarios, processes: int = 2, timeout: int = 600) -> dict:
    """``torchrun --standalone --nproc_per_node processes tests/support/<script> out
    *scenarios``; asserts that torchrun is installed beside this Python and that the run
    succeeds. Returns ``{(scenario, rank): torch.load(out / f"{scenario}_rank{rank}.pt")}``."""
    exe = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    # torch installs its torchrun script beside the interpreter: without it the install is broken
    assert exe is not None, "torchrun is not installed next to this Python"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent), str(TESTS)]),
               OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([exe, "--standalone", "--nproc_per_node", str(processes),
                           str(TESTS / "support" / script), str(out), *scenarios],
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {(s, r): torch.load(Path(out) / f"{s}_rank{r}.pt", weights_only=False)
            for s in scenarios for r in range(processes)}
