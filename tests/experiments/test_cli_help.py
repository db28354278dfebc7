"""``grpo-theory --help``: every default shown, and the top level's and ``advise``'s help fast
(no study, no JAX imported)."""

import argparse
import subprocess
import sys

import pytest

from grpo_theory.experiments import cli


def _subparsers(parser):
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def _undocumented_defaults(parser) -> list:
    fmt = parser._get_formatter()
    return [a.dest for a in parser._actions
            if a.option_strings and not any(a.default is v for v in (None, False))
            and a.default != argparse.SUPPRESS
            and "default" not in (fmt._get_help_string(a) or "")]


def test_every_default_is_in_the_help():
    """Every option with a default says it (rival: argparse's plain formatter, where --seed,
    --n-prompts, --budgets ... show none)."""
    parser = cli._parser(cli._experiments())
    subs = _subparsers(parser)
    for name in ("reproduce", "report", "advise", "lm-mse", "mse-table"):
        assert _undocumented_defaults(subs[name]) == [], name
    text = " ".join(subs["advise"].format_help().split())
    for needle in ("(default: 256,1024,4096)", "(default: 2,4,8,16,32,64)", "(default: 64)",
                   "(default: instruct)", "(default: full)", "(default: advice)"):
        assert needle in text
    plain = argparse.ArgumentParser()
    plain.add_argument("--seed", default=0, type=int)
    assert _undocumented_defaults(plain) == ["seed"]


def test_pad_embedding_choices_match_the_model_options():
    from grpo_theory.lm.budget.options import MODEL_DTYPES, PAD_EMBEDDINGS

    assert tuple(cli.PAD_EMBEDDING_CHOICES) == tuple(PAD_EMBEDDINGS)
    assert tuple(cli.DTYPE_CHOICES) == tuple(MODEL_DTYPES)


@pytest.mark.parametrize("argv", [["--help"], ["advise", "--help"]])
def test_help_imports_no_study_and_no_jax(argv):
    """The help answers without JAX, pandas or any study (rival: the parser built from the
    imported studies, which loads JAX: seconds before the first line)."""
    code = ("import sys\nfrom grpo_theory.experiments import cli\n"
            f"try:\n    cli.main({argv!r})\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "heavy = [m for m in ('jax', 'pandas', 'grpo_theory.studies') if m in sys.modules]\n"
            "print('HEAVY', heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout
    assert "usage: grpo-theory" in out.stdout
    text = " ".join(out.stdout.split())
    assert "lm-mse" in text if argv == ["--help"] else "(default: instruct)" in text
