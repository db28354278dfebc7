"""The ``grpo-theory`` command: one subcommand per experiment driver in ``simulations/``.

A driver is a module ``simulations/<file>.py`` that defines

* ``NAME`` (the subcommand), ``CLAIM`` (one line: what it checks), ``ORDER`` (report position);
* ``run(out_dir: Path, quick: bool, seed: int) -> None``: computes and saves its tables
  (resumable, cell by cell, see :mod:`grpo_theory.results`);
* ``plot(out_dir: Path) -> None``: draws figures from the saved tables only;
* ``report(out_dir: Path) -> dict``: ``{"title", "markdown", "passed"}`` for ``REPORT.md``.

Drivers are discovered, so adding one needs no change here.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time
from pathlib import Path

from .results import atomic_write_text, package_version


def discover() -> dict:
    import simulations

    found = {}
    for info in pkgutil.iter_modules(simulations.__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"simulations.{info.name}")
        if all(hasattr(mod, a) for a in ("NAME", "CLAIM", "run", "plot", "report")):
            found[mod.NAME] = mod
    return dict(sorted(found.items(), key=lambda kv: (getattr(kv[1], "ORDER", 100), kv[0])))


def _exp_dir(out: Path, mod) -> Path:
    return out / mod.NAME


def run_one(mod, out: Path, quick: bool, seed: int, figures: bool = True) -> float:
    t0 = time.time()
    print(f"== {mod.NAME} ({'quick' if quick else 'full'}): {mod.CLAIM}", flush=True)
    exp = _exp_dir(out, mod)
    exp.mkdir(parents=True, exist_ok=True)
    mod.run(exp, quick=quick, seed=seed)
    if figures:
        mod.plot(exp)
    dt = time.time() - t0
    print(f"== {mod.NAME} done in {dt:.1f}s", flush=True)
    return dt


def write_report(out: Path, experiments: dict, timings: dict | None = None) -> Path:
    lines = [
        "# grpo-theory reproduction report",
        "",
        f"Package version {package_version()}. Each section is produced from the saved tables "
        "under this folder by `grpo-theory report`; PASS/FAIL compares the measured numbers "
        "with the theory's prediction.",
        "",
        "| experiment | claim | result |",
        "|---|---|---|",
    ]
    sections = []
    for name, mod in experiments.items():
        exp = _exp_dir(out, mod)
        if not exp.exists():
            continue
        sec = mod.report(exp)
        verdict = "PASS" if sec["passed"] else "FAIL"
        t = f" ({timings[name]:.0f}s)" if timings and name in timings else ""
        lines.append(f"| [{name}](#{name}) | {mod.CLAIM} | {verdict}{t} |")
        sections += ["", f"<a id=\"{name}\"></a>", f"## {sec['title']} — {verdict}", "",
                     sec["markdown"].rstrip()]
    path = out / "REPORT.md"
    atomic_write_text(path, "\n".join(lines + sections) + "\n")
    return path


def main(argv=None) -> int:
    """Entry point of ``grpo-theory``; the drivers run in float64 (scoped to this call)."""
    import jax

    with jax.enable_x64(True):
        return _main(argv)


def _main(argv=None) -> int:
    experiments = discover()
    parser = argparse.ArgumentParser(prog="grpo-theory", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="name every experiment with the claim it checks")

    def common(p):
        g = p.add_mutually_exclusive_group()
        g.add_argument("--quick", dest="quick", action="store_true", default=True,
                       help="small setting (default)")
        g.add_argument("--full", dest="quick", action="store_false", help="the real study")
        p.add_argument("--out", default="results", type=Path, help="output folder")
        p.add_argument("--seed", default=0, type=int)
        p.add_argument("--no-figures", action="store_true", help="skip drawing figures")

    common(sub.add_parser("reproduce", help="run every experiment, draw figures, write REPORT.md"))
    rep = sub.add_parser("report", help="rewrite REPORT.md (and figures) from saved tables")
    rep.add_argument("--out", default="results", type=Path)
    rep.add_argument("--figures", action="store_true", help="redraw figures from the tables")
    for name, mod in experiments.items():
        common(sub.add_parser(name, help=mod.CLAIM))
    args = parser.parse_args(argv)

    if args.cmd == "list":
        width = max(len(n) for n in experiments) if experiments else 0
        for name, mod in experiments.items():
            print(f"{name:<{width}}  {mod.CLAIM}")
        return 0
    if args.cmd == "report":
        if args.figures:
            for mod in experiments.values():
                if _exp_dir(args.out, mod).exists():
                    mod.plot(_exp_dir(args.out, mod))
        print(write_report(args.out, experiments))
        return 0
    if args.cmd == "reproduce":
        timings = {}
        for name, mod in experiments.items():
            timings[name] = run_one(mod, args.out, args.quick, args.seed, not args.no_figures)
        path = write_report(args.out, experiments, timings)
        print(f"report: {path}")
        text = path.read_text()
        return 1 if "| FAIL" in text else 0
    mod = experiments[args.cmd]
    run_one(mod, args.out, args.quick, args.seed, not args.no_figures)
    write_report(args.out, experiments)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
