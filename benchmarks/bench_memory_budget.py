"""The peak resident memory of ``grpo-theory advise --memory-budget`` run as a user runs it.

Each budget runs the command in its own child process (``--no-figures``; progress lines on
stderr). A thread polls the child's ``VmRSS`` (``/proc/<pid>/status``) every 20 ms and files
each reading under the phase of the last progress line (loading, sampling, the ghost-norm pass,
the dots pass, ...); the child's peak is ``ru_maxrss`` of ``os.wait4`` (the kernel's count, not
the poll's). The chunk is read from the command's report.

    python benchmarks/bench_memory_budget.py                    # SmolLM2-135M (make smollm2)
    python benchmarks/bench_memory_budget.py --model DIR --budgets 2GB 4GB --out NAME

Writes ``benchmarks/results/<out>.md`` and ``.json`` (machine, load average, the exact
commands).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SMOLLM2 = Path.home() / ".cache" / "grpo-theory" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
#: a few integer questions (the default reward's answers are integers)
PROMPTS = [{"question": f"What is {a} + {b}? Answer with the number only.", "answer": a + b}
           for a, b in ((2, 3), (7, 5), (12, 9), (4, 4), (21, 13), (8, 6), (15, 27), (3, 9))]
#: the progress lines' phases (``advise: sampling responses 1/1 (3.2s)``)
PHASE = re.compile(r"^advise: (loading|sampling|per-sample scores|pass 2|dots|[a-z-]+ scores)")
MIB = 2**20


def _parse_bytes(text: str) -> int:
    sys.path.insert(0, str(ROOT.parent))
    from grpo_theory.lm.budget.memory import parse_memory

    return parse_memory(text)


def _vmrss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _shown(command: str, tmp: str, model: str) -> str:
    """The command as the results show it: ``$TMP`` for the temporary folder, ``~`` for the
    home folder, ``$MODEL_DIR`` for a model's folder elsewhere."""
    command = command.replace(tmp, "$TMP").replace(str(Path.home()), "~")
    parent = str(Path(model).resolve().parent)
    return command if parent.startswith(str(Path.home())) else command.replace(parent,
                                                                               "$MODEL_DIR")


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def run_child(cmd: list[str], poll_s: float = 0.02) -> dict:
    """Run ``cmd``; its peak resident bytes (``ru_maxrss`` of ``os.wait4``), the highest
    ``VmRSS`` polled in each phase (by its last progress line on stderr), its stdout and the
    tail of its stderr."""
    t0 = time.time()
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True, bufsize=1)
        phase, phases, err = ["start"], {}, []
        done = threading.Event()

        def poll():
            while not done.is_set():
                rss = _vmrss(p.pid)
                if rss:
                    phases[phase[0]] = max(phases.get(phase[0], 0), rss)
                time.sleep(poll_s)

        th = threading.Thread(target=poll, daemon=True)
        th.start()
        for line in p.stderr:
            err.append(line.rstrip())
            m = PHASE.match(line)
            if m:
                phase[0] = m.group(1)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        done.set()
        th.join()
        out.seek(0)
        stdout = out.read()
    m = re.search(r"(\d+) responses per block", stdout)
    return dict(rc=p.returncode, seconds=round(time.time() - t0, 1),
                peak_bytes=int(usage.ru_maxrss) * 1024, phase_peak_bytes=phases,
                chunk=int(m.group(1)) if m else None, stdout=stdout, stderr_tail=err[-3:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(SMOLLM2))
    ap.add_argument("--budgets", nargs="+", default=["2GB", "3GB", "4GB", "6GB"])
    ap.add_argument("--n-prompts", type=int, default=6)
    ap.add_argument("--n-samples", type=int, default=4)
    ap.add_argument("--out", default="memory_budget")
    ap.add_argument("--note", default="", help="a sentence added to the results (which code)")
    a = ap.parse_args(argv)
    exe = shutil.which("grpo-theory", path=str(Path(sys.executable).parent)) or "grpo-theory"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        prompts.write_text("".join(json.dumps(r) + "\n" for r in PROMPTS))
        for budget in a.budgets:
            cmd = [exe, "advise", "--model", a.model, "--prompts", str(prompts),
                   "--n-prompts", str(a.n_prompts), "--n-samples", str(a.n_samples),
                   "--memory-budget", budget, "--no-figures", "--out", str(Path(tmp) / "out")]
            load = os.getloadavg()[0]
            r = run_child(cmd)
            r.update(budget=budget, budget_bytes=_parse_bytes(budget), load_before=load,
                     command=_shown(" ".join(["grpo-theory"] + cmd[1:]), tmp, a.model))
            r["peak_over_budget"] = round(r["peak_bytes"] / r["budget_bytes"], 3)
            print(f"{budget}: rc {r['rc']}, chunk {r['chunk']}, peak "
                  f"{r['peak_bytes'] / MIB:.0f} MiB ({r['peak_over_budget']}x), phases "
                  + ", ".join(f"{k} {v / MIB:.0f}" for k, v in r["phase_peak_bytes"].items()),
                  flush=True)
            if r["rc"]:
                print("   " + " | ".join(r["stderr_tail"]), flush=True)
            rows.append(r)
    write(a, rows)
    return 0


def write(a, rows) -> None:
    machine = dict(machine=platform.machine(), cpu=_cpu(), cpus=os.cpu_count(),
                   memory_gib=round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
                                    / 2**30, 1),
                   python=platform.python_version(), model=Path(a.model).name)
    res = ROOT / "results"
    res.mkdir(exist_ok=True)
    (res / f"{a.out}.json").write_text(json.dumps(
        dict(machine, note=a.note, rows=[{k: v for k, v in r.items() if k != "stdout"} for r in rows]),
        indent=1) + "\n")
    phases = []
    for r in rows:
        phases += [k for k in r["phase_peak_bytes"] if k not in phases]
    lines = [f"# The peak memory of `advise` under `--memory-budget`", "",
             f"Machine: {machine['machine']} {machine['cpu']}, {machine['cpus']} CPUs "
             f"(shared), {machine['memory_gib']} GiB, Python "
             f"{machine['python']}; model `{machine['model']}`; "
             f"`python benchmarks/bench_memory_budget.py "
             f"{_shown(' '.join(sys.argv[1:]), '$TMP', a.model)}`".replace(" `", "`")
             + ". Each budget is one child process; "
             "peak = its `ru_maxrss`; per phase the highest `VmRSS` polled every 20 ms while "
             "that phase's progress line was the last one. Memory in MiB (budgets in the "
             "command's units: GB = 10^9 bytes)." + (f" {a.note}" if a.note else ""), "",
             "| budget | chunk | peak | peak / budget | " + " | ".join(phases)
             + " | seconds | load before | exit |",
             "|---|---|---|---|" + "---|" * len(phases) + "---|---|---|"]
    for r in rows:
        lines.append(f"| {r['budget']} ({r['budget_bytes'] / MIB:.0f}) | {r['chunk'] or '-'} | "
                     f"{r['peak_bytes'] / MIB:.0f} | {r['peak_over_budget']:.2f} | "
                     + " | ".join(f"{r['phase_peak_bytes'][k] / MIB:.0f}"
                                  if k in r["phase_peak_bytes"] else "-" for k in phases)
                     + f" | {r['seconds']} | {r['load_before']:.2f} | {r['rc']} |")
    lines += ["", "Commands (`$TMP` a temporary folder holding the prompts file):", ""]
    lines += [f"    {r['command']}" for r in rows]
    errs = [r for r in rows if r["rc"]]
    if errs:
        lines += ["", "Errors:", ""] + [f"* {r['budget']}: `{r['stderr_tail'][-1]}`"
                                         for r in errs]
    (res / f"{a.out}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
