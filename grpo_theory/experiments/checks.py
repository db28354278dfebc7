"""Checks and report sections: the verdict vocabulary of every experiment.

A :class:`Check` is one verdict (``PASS``, ``FAIL`` or ``INCOMPLETE`` when the number it needs is
missing), of a kind in :data:`KINDS` (``exact``, ``statistical`` with the alternative it
``excludes``, ``sanity``); :func:`check` makes one from a comparison and the numbers it used; a
:class:`Section` is a report section whose verdict its checks decide; :func:`md_cell` and
:func:`rebase_links` make a section's markdown fit the report it is pasted into. Re-exported by
:mod:`grpo_theory.experiments.runner` and the subpackage's face.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np


VERDICTS = ("PASS", "FAIL", "INCOMPLETE")
"""The verdicts of a check: it held, it failed, or it had no finite number to look at."""


KINDS = ("exact", "statistical", "sanity")
"""The kinds of a check: ``exact`` (an identity between separately coded routes, to float
tolerance), ``statistical`` (a test with a stated alternative, which it names in ``excludes``),
``sanity`` (holds by construction, a bound, a run that finished; decides no rival)."""


def _validate_kind(kind, excludes) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    if not isinstance(excludes, str):
        raise ValueError(f"excludes must be a string; got {type(excludes).__name__}")
    if kind == "statistical" and not excludes.strip():
        raise ValueError("excludes is required (non-empty) for kind='statistical': name the "
                         "alternative the test excludes")


@dataclass(frozen=True)
class Check:
    """One verdict: ``passed`` is True/False, or None when the number it needs is missing.

    ``kind`` is one of :data:`KINDS`; ``excludes`` names the alternative a statistical check
    rules out (required for ``kind="statistical"``)."""

    name: str
    passed: bool | None
    detail: str = ""
    kind: str = "sanity"
    excludes: str = ""

    def __post_init__(self):
        _validate_kind(self.kind, self.excludes)

    @property
    def verdict(self) -> str:
        return {True: "PASS", False: "FAIL", None: "INCOMPLETE"}[self.passed]


def check(name: str, ok, *values, kind: str | None = None, excludes: str = "",
          detail: str = "") -> Check:
    """A :class:`Check` that is INCOMPLETE (not PASS) when any of ``values`` is missing/non-finite.

    Args:
        name: what is checked (one line).
        ok: the comparison's result (bool or numpy bool; evaluated by the caller).
        values: the numbers the comparison used; any NaN/inf/None makes the check INCOMPLETE.
        kind: required, one of :data:`KINDS` (``"exact"``, ``"statistical"``, ``"sanity"``).
        excludes: the alternative the check rules out; required and non-empty for
            ``kind="statistical"``.
        detail: the measured numbers, for the report.

    Raises:
        ValueError: ``kind`` is missing or not one of :data:`KINDS`, or a statistical check has
            no ``excludes``.
    """
    _validate_kind(kind, excludes)
    for v in values:
        arr = np.asarray(v if v is not None else np.nan, dtype=float)
        if arr.size == 0 or not np.all(np.isfinite(arr)):
            return Check(name, None, detail or "missing or non-finite number", kind, excludes)
    return Check(name, bool(np.all(ok)), detail, kind, excludes)


def md_cell(text) -> str:
    """``text`` as one markdown table cell: ``|`` escaped, line breaks folded."""
    return " ".join(str(text).replace("|", "\\|").split())


#: a markdown link or image target: ``](target)`` or ``](target "title")``
_LINK = re.compile(r"(\]\()(\s*)([^)\s]+)")
#: targets left alone: in-page anchors, absolute paths and URLs with a scheme (http:, data:)
_ABSOLUTE = re.compile(r"^(#|/|[A-Za-z][A-Za-z0-9+.-]*:)")


def rebase_links(markdown: str, folder: str) -> str:
    """``markdown`` with every relative link and image target prefixed by ``folder/``.

    A section's figures are written next to its tables (``<out>/<experiment>/fig.png``) and
    its markdown names them ``![](fig.png)``; pasted into ``<out>/REPORT.md`` the links must
    read ``![](<experiment>/fig.png)``. Anchors (``#x``), absolute paths and URLs are kept.

    Args:
        markdown: the section's markdown.
        folder: the section's folder relative to the report (no trailing slash).

    Returns:
        The markdown with the relative targets rebased.
    """
    folder = folder.strip("/")
    if not folder:
        raise ValueError("folder must be a non-empty relative path")

    def sub(m):
        target = m.group(3)
        if _ABSOLUTE.match(target):
            return m.group(0)
        return f"{m.group(1)}{m.group(2)}{folder}/{target}"

    return _LINK.sub(sub, markdown)


def kind_counts(checks) -> dict:
    """``{kind: number of checks}`` over :data:`KINDS` (every kind present, zero allowed)."""
    out = {k: 0 for k in KINDS}
    for c in checks:
        out[c.kind] += 1
    return out


def kind_counts_line(checks) -> str:
    """``"Checks by kind: N exact, M statistical, K sanity"``."""
    n = kind_counts(checks)
    return "Checks by kind: " + ", ".join(f"{n[k]} {k}" for k in KINDS)


@dataclass
class Section:
    """A report section: title, markdown body and the checks behind its verdict."""

    title: str
    markdown: str
    checks: list = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """FAIL if any check failed; else INCOMPLETE if a check had no number (or there are no
        checks); else PASS."""
        if any(c.passed is False for c in self.checks):
            return "FAIL"
        if not self.checks or any(c.passed is None for c in self.checks):
            return "INCOMPLETE"
        return "PASS"

    def checks_markdown(self) -> str:
        if not self.checks:
            return ""
        lines = [kind_counts_line(self.checks), "",
                 "| check | kind | result | excludes | detail |", "|---|---|---|---|---|"]
        lines += [f"| {md_cell(c.name)} | {c.kind} | {c.verdict} | {md_cell(c.excludes)} | "
                  f"{md_cell(c.detail)} |" for c in self.checks]
        return "\n".join(lines)
