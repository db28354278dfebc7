"""griffe extension for the API reference: the docstrings' Sphinx roles become links.

The docstrings cross-reference with ``:func:``, ``:class:``, ``:mod:``, ``:meth:``, ``:data:``,
``:attr:`` and ``:exc:`` roles (``~`` shows the last name only; a leading ``.`` is relative to
the object's module and its packages; a bare name is looked up from the object outwards, as
Sphinx does). mkdocstrings renders Markdown, where a role would show as raw text: each is
replaced by an optional autorefs cross-reference to the object's canonical path, which becomes
a link when the site renders that object and plain code otherwise (never a broken link). A
target that names no object is shown as code. Loaded by ``mkdocs.yml`` (the Python handler's
``extensions``); :func:`convert` is the pure text transformation, tested on its own.
"""

from __future__ import annotations

import html
import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|data|attr|exc|obj|const):"
                  r"`(?:(?P<text>[^`<]*?)\s*<(?P<target>[^`>]+)>|(?P<plain>[^`]+))`")


def _candidates(target: str, scopes: list) -> list:
    """Dotted paths ``target`` may name, from the innermost scope outwards."""
    if target.startswith("."):
        rel = target.lstrip(".")
        return [f"{s}.{rel}" for s in scopes]
    return [target] + [f"{s}.{target}" for s in scopes]


def convert(text: str, scopes: list, lookup) -> str:
    """``text`` with every role replaced by an optional cross-reference (or code).

    Args:
        text: a docstring.
        scopes: the enclosing paths to resolve relative names in, innermost first (the object,
            its parents, its module, the module's packages).
        lookup: ``lookup(path) -> canonical path or None``.

    Returns:
        The text with ``<autoref identifier="..." optional><code>title</code></autoref>`` for
        each role whose target resolves, else ```title```.
    """

    def sub(m):
        target = (m.group("target") or m.group("plain")).strip()
        short = target.startswith("~")
        target = target.lstrip("~")
        title = m.group("text") or (target.rsplit(".", 1)[-1] if short else target.lstrip("."))
        for path in _candidates(target.rstrip("()"), scopes):
            canonical = lookup(path)
            if canonical is not None:
                return (f'<autoref identifier="{html.escape(canonical)}" optional>'
                        f"<code>{html.escape(title)}</code></autoref>")
        return f"`{title}`"

    return ROLE.sub(sub, text)


def _scopes(obj) -> list:
    out, o = [], obj
    while o is not None:
        out.append(o.path)
        o = o.parent
    return out


class RoleLinks(griffe.Extension):
    """Rewrites every loaded object's docstring with :func:`convert`."""

    def on_package(self, *, pkg, loader, **kwargs) -> None:
        coll = loader.modules_collection

        def lookup(path):
            try:
                found = coll[path]
                return found.final_target.path if found.is_alias else found.path
            except Exception:  # noqa: BLE001 - any unresolvable path is "no object"
                return None

        def walk(obj):
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = convert(obj.docstring.value, _scopes(obj), lookup)
            for member in obj.members.values():
                if not member.is_alias:
                    walk(member)

        walk(pkg)
