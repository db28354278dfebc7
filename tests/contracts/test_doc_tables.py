"""The advisor guide's validation tables are the committed output of their command.

``docs/advisor.md``'s sections "Validation on the small transformer (answer-only format)",
"Enumerable bandits: estimates against exact values" and "The trace format: the advisor alone"
must hold the tables (every cell, every number) and the coverage lines of
``benchmarks/results/advisor_validation.md``, written by
``python benchmarks/advisor_validation.py``. Rival excluded: a number typed into the guide (or a
rerun committed without updating the guide), which makes the two differ in one cell.
"""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "advisor.md"
RESULTS = ROOT / "benchmarks" / "results" / "advisor_validation.md"
NUMBER = re.compile(r"-?(?:inf|\d+(?:\.\d*)?(?:e[-+]?\d+)?)")


def _titles() -> dict:
    spec = importlib.util.spec_from_file_location(
        "advisor_validation", ROOT / "benchmarks" / "advisor_validation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # its top level imports the standard library only
    return mod.TITLES


def section(text: str, title: str) -> list:
    """The lines under the heading ``title`` (any level) up to the next heading."""
    lines = text.splitlines()
    start = [i for i, ln in enumerate(lines) if ln.lstrip("#").strip() == title
             and ln.startswith("#")]
    assert len(start) == 1, f"heading {title!r} found {len(start)} times"
    out = []
    for ln in lines[start[0] + 1:]:
        if ln.startswith("#"):
            break
        out.append(ln)
    return out


def table(lines: list) -> list:
    """The rows (lists of stripped cells) of the first markdown table in ``lines``, header
    included, separator dropped."""
    rows = [ln for ln in lines if ln.startswith("|")]
    assert rows, "no table"
    return [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows
            if not set(r) <= set("|-: ")]


def numbers(cell: str) -> list:
    return [float(x) for x in NUMBER.findall(cell)]


def differences(doc_rows: list, res_rows: list) -> list:
    """Where two parsed tables differ: row count, a cell's numbers (as floats) or its text."""
    if len(doc_rows) != len(res_rows):
        return [f"{len(doc_rows)} rows in the guide, {len(res_rows)} in the results"]
    out = []
    for i, (d, r) in enumerate(zip(doc_rows, res_rows)):
        if len(d) != len(r):
            out.append(f"row {i}: {len(d)} cells vs {len(r)}")
            continue
        for j, (a, b) in enumerate(zip(d, r)):
            na, nb = numbers(a), numbers(b)
            if na != nb or NUMBER.sub("#", a) != NUMBER.sub("#", b):
                out.append(f"row {i} cell {j}: guide {a!r}, results {b!r}")
    return out


def coverage_lines(lines: list) -> list:
    return [ln for ln in lines if ln.startswith("Intervals holding the exact")]


@pytest.mark.parametrize("key", ["transformer", "bandits", "trace"])
def test_guide_tables_equal_the_results_file(key):
    title = _titles()[key]
    doc = section(GUIDE.read_text(), title)
    res = section(RESULTS.read_text(), title)
    assert differences(table(doc), table(res)) == []
    assert coverage_lines(doc) == coverage_lines(res)
    assert len(coverage_lines(res)) == (key != "trace")


def test_a_changed_number_is_caught():
    """The rival: one number of the guide's table typed differently (or a cell's text)."""
    res = table(section(RESULTS.read_text(), _titles()["transformer"]))
    assert len(res) >= 3 and differences(res, res) == []
    changed = [list(r) for r in res]
    cell = changed[2][3]
    first = NUMBER.search(cell)
    changed[2][3] = cell[:first.start()] + str(float(first.group()) + 0.001) + cell[first.end():]
    assert differences(changed, res) == [f"row 2 cell 3: guide {changed[2][3]!r}, results "
                                         f"{res[2][3]!r}"]
    changed = [list(r) for r in res]
    changed[2][0] = changed[2][0] + " (typed)"
    assert len(differences(changed, res)) == 1
    assert differences(res[:-1], res) != []
