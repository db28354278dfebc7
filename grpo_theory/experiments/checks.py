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


def _validate_kind(kind, excludes, rival_se=None) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    if not isinstance(excludes, str):
        raise ValueError(f"excludes must be a string; got {type(excludes).__name__}")
    if kind == "statistical" and not excludes.strip():
        raise ValueError("excludes is required (non-empty) for kind='statistical': name the "
                         "alternative the test excludes")
    if kind == "statistical" and rival_se is None:
        raise ValueError("rival_se is required for kind='statistical': state how far the rival "
                         "named in excludes lies from the measurement, in standard errors (NaN "
                         "when a number is missing)")


#: the distance (in standard errors) a statistical check's rival must lie beyond for the check to
#: have power, unless the check states its own bound
Z_POWER = 4.0


@dataclass(frozen=True)
class Check:
    """One verdict: ``passed`` is True/False, or None when the number it needs is missing.

    ``kind`` is one of :data:`KINDS`; ``excludes`` names the alternative a statistical check
    rules out (required for ``kind="statistical"``); ``rival_se`` is how far that rival lies from
    the measured value, in standard errors (the smallest over the rows the check covers), and
    ``z_tol`` the distance beyond which the test rejects: the check has power when
    ``rival_se > z_tol``."""

    name: str
    passed: bool | None
    detail: str = ""
    kind: str = "sanity"
    excludes: str = ""
    rival_se: float | None = None
    z_tol: float = Z_POWER

    def __post_init__(self):
        _validate_kind(self.kind, self.excludes, self.rival_se)

    @property
    def has_power(self) -> bool:
        """A statistical check whose named rival lies beyond its rejection bound (False for the
        other kinds, and for a statistical check that states no distance)."""
        return (self.kind == "statistical" and self.rival_se is not None
                and bool(np.isfinite(self.rival_se)) and abs(self.rival_se) > self.z_tol)

    @property
    def verdict(self) -> str:
        return {True: "PASS", False: "FAIL", None: "INCOMPLETE"}[self.passed]


def check(name: str, ok, *values, kind: str | None = None, excludes: str = "",
          detail: str = "", rival_se: float | None = None, z_tol: float = Z_POWER) -> Check:
    """A :class:`Check` that is INCOMPLETE (not PASS) when any of ``values`` is missing/non-finite.

    Args:
        name: what is checked (one line).
        ok: the comparison's result (bool or numpy bool; evaluated by the caller).
        values: the numbers the comparison used; any NaN/inf/None makes the check INCOMPLETE.
        kind: required, one of :data:`KINDS` (``"exact"``, ``"statistical"``, ``"sanity"``).
        excludes: the alternative the check rules out; required and non-empty for
            ``kind="statistical"``.
        detail: the measured numbers, for the report.
        rival_se: for a statistical check, the distance of the rival named in ``excludes``
            from the measurement, in standard errors (the smallest over the check's rows).
        z_tol: the distance beyond which the check's test rejects (default :data:`Z_POWER`).

    Raises:
        ValueError: ``kind`` is missing or not one of :data:`KINDS`, or a statistical check has
            no ``excludes`` or no ``rival_se``.
    """
    _validate_kind(kind, excludes, rival_se)
    r = None if rival_se is None else float(rival_se)
    for v in values:
        arr = np.asarray(v if v is not None else np.nan, dtype=float)
        if arr.size == 0 or not np.all(np.isfinite(arr)):
            return Check(name, None, detail or "missing or non-finite number", kind, excludes,
                         r, z_tol)
    return Check(name, bool(np.all(ok)), detail, kind, excludes, r, z_tol)


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
    """``"Checks by kind: N exact, M statistical (P with power), K sanity"``: P counts the
    statistical checks whose rival lies beyond their bound (:attr:`Check.has_power`)."""
    n = kind_counts(checks)
    power = sum(c.has_power for c in checks)
    parts = [f"{n[k]} {k}" + (f" ({power} with power)" if k == "statistical" else "")
             for k in KINDS]
    return "Checks by kind: " + ", ".join(parts)


def rival_cell(c: Check) -> str:
    """The rival's distance of a statistical check for the report (``"9.1 se"``), else ``""``."""
    if c.kind != "statistical" or c.rival_se is None:
        return ""
    return f"{abs(c.rival_se):.1f} se" if np.isfinite(c.rival_se) else "n/a"


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
                 "| check | kind | result | excludes | rival at | detail |",
                 "|---|---|---|---|---|---|"]
        lines += [f"| {md_cell(c.name)} | {c.kind} | {c.verdict} | {md_cell(c.excludes)} | "
                  f"{rival_cell(c)} | {md_cell(c.detail)} |" for c in self.checks]
        return "\n".join(lines)
