"""The ``grpo-theory`` command: run, resume and report the experiments, here or on a Dask cluster.

    grpo-theory list                              every experiment and the claim it checks
    grpo-theory NAME [--full] [--seed S]          one experiment (quick setting by default)
    grpo-theory lm-mse --model PATH               lm-mse / lm-groupsize / lm-rank on a Hugging Face
                                                  checkpoint
    grpo-theory reproduce [--full]                every experiment, figures and REPORT.md
    grpo-theory report [--figures]                REPORT.md from the cells on disk
    grpo-theory advise --prompts FILE.jsonl       which group size G to use for a model
    grpo-theory rewards LOG.jsonl                 what per-response rewards alone determine

``--workers N`` runs the cells on a local Dask cluster of N processes; ``--scheduler ADDRESS``
(or ``$GRPO_THEORY_SCHEDULER``) on an existing cluster. Tables are identical either way.

Exit codes: 0 when every verdict is PASS, 1 when a run's verdict is FAIL or INCOMPLETE, 2 for
an error: one line ``grpo-theory: error: ...`` on stderr (bad input, a missing file, a folder
with no results for ``report``, a model that does not fit in memory); ``GRPO_THEORY_DEBUG=1``
re-raises the exception with its traceback instead. ``--help`` shows every default; the top
level's, ``advise``'s and ``rewards``' import no study and no JAX (they answer at once).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import warnings
from pathlib import Path

from .checks import kind_counts_line, md_cell, rebase_links

# the heavy modules (JAX, pandas, the studies) are imported where they are used, so that
# `grpo-theory --help` and `grpo-theory advise --help` answer at once


#: the ``--pad-embedding`` choices (:data:`grpo_theory.lm.budget.options.PAD_EMBEDDINGS`, written out
#: so that the parser imports no JAX; a test checks they agree)
PAD_EMBEDDING_CHOICES = ("frozen", "trained")
#: the ``--dtype`` choices (:data:`grpo_theory.lm.budget.options.MODEL_DTYPES`, written out so
#: that ``--help`` needs no JAX; a test keeps the two equal)
DTYPE_CHOICES = ("float32", "bfloat16")


def _experiments() -> dict:
    """``{name: Experiment}`` of every registered study (imports them)."""
    from .registry import experiments

    return experiments()


def _experiment_names() -> dict:
    """``{name: None}`` of the registered studies without importing the package's own (their
    entry points' names; the modules of ``$GRPO_THEORY_EXPERIMENTS`` are imported)."""
    from .registry import names

    return dict.fromkeys(names())


def write_report(out: Path, sections: dict, timings: dict | None = None,
                 absent=()) -> Path:
    """Write ``out/REPORT.md`` from ``{name: (experiment, Section, manifest)}``; ``absent``
    names the experiments with no results in ``out``. Each section's relative links (its
    figures, in ``out/<name>/``) are rebased to resolve from the report; table cells have
    ``|`` escaped."""
    from .runner import package_version
    from .store import atomic_write_text

    lines = ["# grpo-theory reproduction report", "",
             f"Package version {package_version()}. Each section is produced from the validated "
             "cells under this folder; PASS means every check of the section passed, FAIL that "
             "one failed, INCOMPLETE that cells or numbers are missing.", "",
             kind_counts_line([c for _, sec, _ in sections.values() for c in sec.checks])
             + " (all sections; exact: an identity between separately coded routes; "
             "statistical: a test that excludes the named alternative, with power when that "
             "rival lies beyond the test's bound, its distance in the column 'rival at'; "
             "sanity: holds by construction, a bound, or a run that finished).", "",
             "| experiment | claim | setting | seed | result |", "|---|---|---|---|---|"]
    body = []
    for name, (exp, sec, m) in sections.items():
        t = f" ({timings[name]:.0f} s of cells)" if timings and timings.get(name) else ""
        lines.append(f"| [{name}](#{name}) | {md_cell(exp.claim)} | "
                     f"{md_cell(m.get('setting', '?'))} | {md_cell(m.get('seed', '?'))} | "
                     f"{sec.verdict}{t} |")
        body += ["", f'<a id="{name}"></a>', f"## {sec.title} — {sec.verdict}", "",
                 rebase_links(sec.markdown.rstrip(), exp.name), "", sec.checks_markdown()]
    if absent:
        lines += ["", f"No results in this folder for: {', '.join(absent)}."]
    path = Path(out) / "REPORT.md"
    atomic_write_text(path, "\n".join(lines + body).rstrip() + "\n")
    return path


def _error(msg: str, code: int = 2) -> int:
    print(f"grpo-theory: error: {msg}", file=sys.stderr)
    return code


#: set to 1 to get the traceback of a failure instead of the one-line error
DEBUG_ENV = "GRPO_THEORY_DEBUG"
EPILOG = (f"Exit code 0: every verdict PASS; 1: a verdict FAIL or INCOMPLETE; 2: an error, "
          f"printed as one line 'grpo-theory: error: ...' ({DEBUG_ENV}=1 re-raises it with "
          f"its traceback, for developers).")


def error_line(exc: BaseException) -> str:
    """The one-line message of a failed run: the message of a ``ValueError`` / ``TypeError``
    / ``OSError``, a hint naming ``--memory-budget`` / ``--chunk`` for an out-of-memory error
    (XLA's ``RESOURCE_EXHAUSTED`` or a ``MemoryError``), else the exception's type and message;
    line breaks joined."""
    from ..lm.budget import HINT, is_out_of_memory

    if is_out_of_memory(exc):
        msg = f"out of memory ({type(exc).__name__}): {HINT}"
    elif isinstance(exc, (ValueError, TypeError)):
        msg = str(exc)
    elif isinstance(exc, OSError):
        msg = (f"{exc.strerror}: {exc.filename!r}" if exc.strerror and exc.filename
               else str(exc) or type(exc).__name__)
    else:
        msg = (f"{type(exc).__name__}: {exc} (a bug? {DEBUG_ENV}=1 shows the traceback)")
    return " ".join(msg.split()) or type(exc).__name__


def main(argv=None) -> int:
    """Entry point of ``grpo-theory`` (exit 0 = every verdict PASS; 1 = a verdict FAIL or
    INCOMPLETE; 2 = an error, printed as one line unless ``GRPO_THEORY_DEBUG=1``)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("grpo-theory: interrupted; the finished cells are on disk and the same command "
              "resumes from them", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - every failure is one line for a user
        if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            raise
        return _error(error_line(e))


def _show(value) -> str:
    """A default as a user types it: ``256,1024,4096`` for a tuple."""
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default, unless the help already states it or the
    option has none (``None``, a flag off by default)."""

    def _get_help_string(self, action):
        text = action.help or ""
        d = action.default
        if (not action.option_strings or "default" in text or d is None or d is False
                or d is argparse.SUPPRESS):
            return text
        return f"{text} (default: {_show(d).replace('%', '%%')})".lstrip()


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose help shows the defaults (:class:`_HelpFormatter`), its
    subcommands' too."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


def _parser(exps: dict) -> argparse.ArgumentParser:
    """The command's parser; ``exps`` is ``{name: Experiment}``, or ``{name: None}`` for a
    parser that imports no study (each experiment's claim and model options then absent)."""
    parser = _Parser(prog="grpo-theory", description=__doc__.splitlines()[0], epilog=EPILOG)
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND",
                                parser_class=_Parser)
    sub.add_parser("list", help="name every experiment with the claim it checks")

    def common(p):
        g = p.add_mutually_exclusive_group()
        g.add_argument("--quick", dest="quick", action="store_true", default=True,
                       help="small setting (default)")
        g.add_argument("--full", dest="quick", action="store_false", help="the real study")
        p.add_argument("--out", default="results", type=Path, help="output folder")
        p.add_argument("--seed", default=0, type=int, help="the run's seed")
        p.add_argument("--no-figures", action="store_true", help="skip drawing figures")
        p.add_argument("--no-progress", action="store_true", help="no progress bar or lines")
        ex = p.add_mutually_exclusive_group()
        ex.add_argument("--workers", type=str, default=None,
                        help="run cells on a local Dask cluster with N worker processes")
        ex.add_argument("--scheduler", default=None,
                        help="address of an existing Dask scheduler (default "
                             "$GRPO_THEORY_SCHEDULER)")

    common(sub.add_parser("reproduce", help="run every experiment, draw figures, write REPORT.md"))
    rep = sub.add_parser("report", help="rewrite REPORT.md (and figures) from the saved cells")
    rep.add_argument("--out", default="results", type=Path,
                     help="the folder of the runs to report")
    rep.add_argument("--figures", action="store_true", help="redraw figures from the tables")
    _advise_parser(sub)
    from .rewards_cli import add_parser as _rewards_parser

    _rewards_parser(sub)
    for name, exp in exps.items():
        if exp is None:  # the name only: no study imported
            sub.add_parser(name, help="run this experiment (`grpo-theory list`: its claim)")
            continue
        p = sub.add_parser(name, help=exp.claim, epilog=EPILOG)
        common(p)
        p.add_argument("--model", default=None, metavar="PATH",
                       help="a Hugging Face checkpoint directory or a .gguf file (experiments "
                            f"with a model setting only: "
                            f"{', '.join(_model_experiments(exps)) or 'none'}); its prompts are "
                            "the task's question in the checkpoint's chat template when it has "
                            "one, else plain text")
        if _takes_model(exp):
            _model_options(p)
    return parser


#: CLI option -> Settings field of a study's model route (given only with --model)
MODEL_OPTIONS = {"memory_budget": "model_memory_budget", "chunk": "model_chunk",
                 "dtype": "model_dtype", "pad_id": "model_pad_id"}


def _model_options(p) -> None:
    """``--memory-budget``, ``--chunk``, ``--dtype``, ``--pad-id`` (Hugging Face models)."""
    p.add_argument("--memory-budget", default=None, metavar="SIZE",
                   help="memory the per-sample scores may use, e.g. 4GB, 512MiB, '0.5 GiB' "
                        "(default: half the memory available when the run starts); sets "
                        "--chunk when that is not given")
    p.add_argument("--chunk", type=int, default=None,
                   help="per-sample scores held at once, each the size of the model "
                        "(default: the largest that fits in --memory-budget)")
    p.add_argument("--dtype", choices=DTYPE_CHOICES, default=None,
                   help="the Hugging Face model's parameter and compute dtype (default "
                        "float32; bfloat16 halves the model's memory)")
    p.add_argument("--pad-id", type=int, default=None,
                   help="token id that left-pads prompts and fills responses after EOS "
                        "(default: the checkpoint's pad token, else its first EOS id)")


def _model_overrides(args) -> dict:
    """The Settings fields given by the model options (``--memory-budget`` parsed to bytes;
    a ``ValueError`` naming the option for a bad value)."""
    out = {}
    for opt, field in MODEL_OPTIONS.items():
        v = getattr(args, opt, None)
        if v is None:
            continue
        if opt == "memory_budget":
            from ..lm import parse_memory

            v = parse_memory(v)
        elif opt == "chunk" and v < 1:
            raise ValueError(f"--chunk must be an integer >= 1, got {v}")
        elif opt == "pad_id" and v < 0:
            raise ValueError(f"--pad-id must be a token id >= 0, got {v}")
        out[field] = v
    return out


def _takes_model(exp) -> bool:
    """Whether the experiment's Settings have a ``model`` field (``--model`` applies)."""
    s = next(iter(exp.settings.values()), None)
    return dataclasses.is_dataclass(s) and "model" in {f.name for f in dataclasses.fields(s)}


def _model_experiments(exps: dict) -> list:
    return [n for n, e in exps.items() if e is not None and _takes_model(e)]


def _model_setting(exps: dict, name: str, setting: str, model: str, overrides=None):
    """``dataclasses.replace(settings, model=<absolute path>, **overrides)`` (``overrides``:
    the model options' Settings fields); a ``ValueError`` when the experiment has no model
    setting or the path is neither a directory nor a .gguf file (before any cell runs)."""
    exp = exps[name]
    if not _takes_model(exp):
        raise ValueError(f"--model is accepted only by experiments with a model setting "
                         f"({', '.join(_model_experiments(exps)) or 'none'}); {name} has none")
    path = Path(model).expanduser().resolve()
    from ..lm.checkpoints import checkpoint_format

    if checkpoint_format(path) is None:
        raise ValueError(f"--model {model!r}: {str(path)!r} is neither a directory nor a .gguf "
                         "file; give a local Hugging Face checkpoint directory (config.json, "
                         "tokenizer.json, *.safetensors) or a llama.cpp .gguf file; nothing is "
                         "downloaded")
    return dataclasses.replace(exp.get_settings(setting), model=str(path), **(overrides or {}))


def _int_list(text: str) -> tuple:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")


def _advise_parser(sub) -> None:
    p = sub.add_parser("advise", help="estimate c1, c2, c3, G* of a model from its rollouts and "
                       "recommend the group size G per budget (not an experiment)",
                       description="Estimate c1, c2, c3 and G* of a model from n responses to "
                       "each of m prompts and recommend the group size G per budget. A Hugging "
                       "Face checkpoint with a chat template gets each question as a user "
                       "message in that template (the assistant's turn opened), as the lm-* "
                       "studies do; --no-chat-template sends the raw question text. The "
                       "printed result says which. Phases (loading, sampling, per-sample "
                       "scores, pass 2 over the prompts) show progress on stderr.",
                       epilog=EPILOG)
    p.add_argument("--prompts", required=True, type=Path,
                   help='JSONL file, one {"question": ..., "answer": ...} per line')
    p.add_argument("--model", default="instruct",
                   help="base | instruct | icl (the package's warm-up checkpoints), a package "
                        ".npz checkpoint, a Hugging Face checkpoint directory or a .gguf file")
    p.add_argument("--reward", default=None,
                   help="path/to/file.py:function or module:function with reward(text, "
                        "answer) -> float (default: the integer-answer reward of "
                        "grpo_theory.lm.task; every answer must then be an integer)")
    p.add_argument("--n-prompts", type=int, default=64, help="prompts m read from --prompts")
    p.add_argument("--n-samples", type=int, default=16, help="responses n sampled per prompt")
    p.add_argument("--budgets", type=_int_list, default=(256, 1024, 4096),
                   help="budgets N = B G (responses per step) to recommend a G for")
    p.add_argument("--group-sizes", type=_int_list, default=(2, 4, 8, 16, 32, 64),
                   help="group sizes G of the per-G table")
    p.add_argument("--format", dest="fmt", choices=("answer", "trace"), default="answer",
                   help="the package model's response format (ignored for Hugging Face models)")
    p.add_argument("--response-len", type=int, default=None,
                   help="tokens per response (default: 5 answer / 16 trace; 32 for Hugging Face)")
    p.add_argument("--warmup", choices=("full", "quick"), default="full",
                   help="warm-up configuration of base|instruct|icl, trained on first use and "
                        "then cached (full: about 23 min on 2 CPU cores; quick: about 1 min)")
    p.add_argument("--out", default="advice", type=Path, help="output folder")
    p.add_argument("--seed", default=0, type=int, help="the sampling seed")
    p.add_argument("--no-figures", action="store_true", help="skip the figure")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or lines")
    p.add_argument("--no-chat-template", action="store_true",
                   help="send the raw question text to a Hugging Face checkpoint (default: "
                        "the checkpoint's chat template when it has one)")
    _model_options(p)
    p.add_argument("--pad-embedding", choices=PAD_EMBEDDING_CHOICES, default=None,
                   help="gradient of a checkpoint's pad-token input-embedding row: frozen "
                        "(default: none through the lookup, as transformers' "
                        "padding_idx=pad_token_id trains) or trained (the exact gradient)")


def _advise_options(args):
    """The one :class:`~grpo_theory.lm.budget.options.ModelOptions` of ``advise`` from
    ``--memory-budget`` (a size, :func:`~grpo_theory.lm.budget.memory.parse_memory`), ``--chunk``,
    ``--dtype``, ``--pad-id`` and ``--pad-embedding`` (a ``ValueError`` naming the option for
    a bad value)."""
    from ..lm import ModelOptions

    try:
        return ModelOptions(memory_budget=args.memory_budget, chunk=args.chunk,
                            dtype=args.dtype, pad_id=args.pad_id,
                            pad_embedding=args.pad_embedding)
    except ValueError as e:
        msg = str(e)
        for f in ("chunk", "pad_id", "dtype"):
            if msg.startswith(f + " "):
                msg = "--" + f.replace("_", "-") + msg[len(f):]
        raise ValueError(msg) from None


def _advise(args) -> int:
    from ..advisor import FigureWarning
    from ..advisor.advise import advise

    options = _advise_options(args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FigureWarning)
        # the report below prints the c1 warning itself
        warnings.filterwarnings("ignore", message="WARNING: c1 is not resolved")
        res = advise(args.prompts, args.model, args.reward, n_prompts=args.n_prompts,
                     n_samples=args.n_samples, budgets=args.budgets,
                     group_sizes=args.group_sizes, out=args.out, seed=args.seed, fmt=args.fmt,
                     response_len=args.response_len, progress=not args.no_progress,
                     warmup=args.warmup, figure=not args.no_figures, options=options,
                     chat_template=not args.no_chat_template)
    print(res.text(), flush=True)  # the result first, then what went wrong around it
    for w in caught:
        if issubclass(w.category, FigureWarning):
            print(f"grpo-theory: warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return 0


def _command(argv) -> str | None:
    """The command word of ``argv`` (its first token that is not an option), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def _main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # the top level's --help and `advise` need no study: their names only (nothing imported)
    light = _command(argv) in (None, "advise", "rewards")
    exps = _experiment_names() if light else _experiments()
    args = _parser(exps).parse_args(argv)
    if args.cmd == "list":
        width = max(len(n) for n in exps)
        for name, exp in exps.items():
            print(f"{name:<{width}}  {exp.claim}")
        return 0
    if args.cmd == "report":
        return _report(args.out, exps, args.figures)
    if args.cmd == "advise":
        return _advise(args)
    if args.cmd == "rewards":
        from .rewards_cli import run as _rewards

        return _rewards(args)

    chosen = exps if args.cmd == "reproduce" else {args.cmd: exps[args.cmd]}
    setting = "quick" if args.quick else "full"
    overrides = _model_overrides(args)
    if getattr(args, "model", None) is not None:
        setting = _model_setting(exps, args.cmd, setting, args.model, overrides)
        chosen[args.cmd].cell_list(setting)  # the checkpoint's checks, before any cell runs
    elif overrides:
        given = ", ".join("--" + o.replace("_", "-") for o in MODEL_OPTIONS
                          if getattr(args, o, None) is not None)
        raise ValueError(f"{given} apply to a Hugging Face model only: give --model PATH")
    from .executors import open_executor
    from .runner import run_experiments
    from .store import check_out_dir

    check_out_dir(args.out)
    t0 = time.time()
    with open_executor(workers=args.workers, scheduler=args.scheduler) as ex:
        sections = run_experiments(list(chosen.values()), args.out, setting, args.seed,
                                   executor=ex, figures=not args.no_figures,
                                   progress=not args.no_progress)
    timings = {}
    for name, res in sections.items():
        timings[name] = res.compute_seconds
        print(f"== {name}: {res.verdict} ({res.n_computed} cells computed in "
              f"{res.compute_seconds:.1f} s of cell time, {res.n_reused} reused)",
              file=sys.stderr, flush=True)
    print(f"== wall clock {time.time() - t0:.1f}s", file=sys.stderr, flush=True)
    # the report covers every experiment with results in the folder, not only this run's
    code = _report(args.out, exps, figures=False, timings=timings, quiet=True)
    bad = [n for n, r in sections.items() if r.verdict != "PASS"]
    if bad:
        print(f"not PASS: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad or code else 0


def _report(out: Path, exps: dict, figures: bool, timings=None, quiet: bool = False) -> int:
    from .runner import report_section

    sections, absent = {}, []
    for name, exp in exps.items():
        got = report_section(exp, out, figures=figures)
        if got is None:
            absent.append(name)
        else:
            sections[name] = (exp, got[0], got[1])
    if not sections:
        return _error(f"no results under {str(out)!r} (none of: {', '.join(exps)}); run "
                      "`grpo-theory reproduce` or `grpo-theory NAME` first")
    path = write_report(out, sections, timings, absent)
    if absent and not quiet:
        print(f"no results for: {', '.join(absent)}", file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
