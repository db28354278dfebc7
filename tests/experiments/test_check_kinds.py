"""Every check of every study says what kind it is, with a literal the report can trust.

The studies' sources are parsed (not run): each ``check(...)`` call must pass ``kind=`` as one of
the literal strings of :data:`grpo_theory.experiments.checks.KINDS`, and a statistical one a
literal, non-empty ``excludes=`` and the rival's distance ``rival_se=``; a name never carries the
alternative ("excludes ...") itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from grpo_theory.experiments.checks import KINDS

ROOT = Path(__file__).resolve().parents[2] / "simulations"
FILES = sorted(ROOT.rglob("*.py"))


def _calls(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("check", "Check"):
            yield node


def _literal(node) -> str | None:
    """The string a literal (or a literal f-string without fields) spells, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _name_text(node) -> str:
    """The name argument's literal text (f-string fields left out)."""
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant))
    return _literal(node) or ""


ALL = [(p, c) for p in FILES for c in _calls(p)]


def test_the_studies_have_checks_to_look_at():
    assert len(ALL) >= 100, len(ALL)
    assert all(c.func.id == "check" for _, c in ALL), "build checks with check(..., kind=...)"


@pytest.mark.parametrize("path, call", ALL,
                         ids=[f"{p.relative_to(ROOT)}:{c.lineno}" for p, c in ALL])
def test_every_check_call_passes_a_literal_kind_and_excludes_when_statistical(path, call):
    kw = {k.arg: k.value for k in call.keywords}
    where = f"{path.relative_to(ROOT)}:{call.lineno}"
    assert "kind" in kw, f"{where}: check(...) without kind="
    kind = _literal(kw["kind"])
    assert kind in KINDS, f"{where}: kind must be a literal in {KINDS}"
    if kind == "statistical":
        exc = _literal(kw.get("excludes"))
        assert exc and exc.strip(), f"{where}: a statistical check needs a literal excludes="
        assert "rival_se" in kw, (f"{where}: a statistical check states how far its rival "
                                  "lies: rival_se= (in standard errors)")
    assert "excludes" not in _name_text(call.args[0]).lower(), \
        f"{where}: put the alternative in excludes=, not in the name"
