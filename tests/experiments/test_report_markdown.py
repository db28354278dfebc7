"""REPORT.md as a reader opens it: every relative link resolves from the report's folder, and
a ``|`` in any summary cell stays inside its cell."""

import dataclasses
import re

from support import toy_experiment as toy

from grpo_theory.experiments import cli
from grpo_theory.experiments.checks import Section, check, md_cell, rebase_links

EXP = toy.EXPERIMENT
TARGET = re.compile(r"\]\(\s*([^)\s]+)")


def _relative_targets(text: str) -> list:
    return [t for t in TARGET.findall(text)
            if not re.match(r"^(#|/|[A-Za-z][A-Za-z0-9+.-]*:)", t)]


def _section() -> Section:
    md = ("Body. ![](fig.png)\n\n![alt text](sub/fig2.png \"a title\")\n\n"
          "[the table](table.csv), [up](#toy), [site](https://example.org/x.png), "
          "![inline](data:image/png;base64,AAAA)")
    return Section("Toy", md, [check("x", True, 1.0, kind="exact")])


def test_rebase_links_prefixes_relative_targets_only():
    got = rebase_links(_section().markdown, "toy")
    assert "![](toy/fig.png)" in got and '![alt text](toy/sub/fig2.png "a title")' in got
    assert "[the table](toy/table.csv)" in got
    for kept in ("[up](#toy)", "[site](https://example.org/x.png)",
                 "![inline](data:image/png;base64,AAAA)"):
        assert kept in got


def test_report_figures_resolve_from_the_report(tmp_path):
    """Every relative target of REPORT.md names a file under the report's folder (rival: the
    section's markdown pasted as is, whose ``fig.png`` lies in ``out/toy/``, not ``out/``)."""
    for rel in ("fig.png", "sub/fig2.png", "table.csv"):
        (tmp_path / "toy" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "toy" / rel).write_bytes(b"x")
    sec = _section()
    text = cli.write_report(tmp_path, {"toy": (EXP, sec, {})}).read_text()
    targets = _relative_targets(text)
    assert len(targets) == 3
    assert all((tmp_path / t).is_file() for t in targets), targets
    # the rival: the same markdown unrebased does not resolve from the report
    assert not all((tmp_path / t).is_file() for t in _relative_targets(sec.markdown))


def _cells(row: str) -> list:
    return row.replace("\\|", "").strip().strip("|").split("|")


def test_report_summary_row_escapes_pipes(tmp_path):
    """A claim with ``||`` and ``|x|`` keeps the summary row at five cells (rival: the claim
    pasted raw, which adds cells)."""
    exp = dataclasses.replace(EXP, claim="a || b, |x| <= 1")
    sec = Section("Toy", "body", [check("x", True, 1.0, kind="exact")])
    text = cli.write_report(tmp_path, {"toy": (exp, sec, {"setting": "q|uick", "seed": 0})})
    row = [ln for ln in text.read_text().splitlines() if ln.startswith("| [toy](#toy)")]
    assert len(row) == 1 and len(_cells(row[0])) == 5
    assert "a \\|\\| b, \\|x\\| <= 1" in row[0]
    raw = f"| [toy](#toy) | {exp.claim} | quick | 0 | PASS |"
    assert len(_cells(raw)) != 5
    assert md_cell("a\nb | c") == "a b \\| c"
