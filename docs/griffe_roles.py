"""griffe extension for the API reference: the docstrings' Sphinx roles become links.

The docstrings cross-reference with ``:func:``, ``:class:``, ``:mod:``, ``:meth:``, ``:data:``,
``:attr:`` and ``:exc:`` roles (``~`` shows the last name only; a leading ``.`` is relative to
the object's module and its packages; a bare name is looked up from the object outwards, as
Sphinx does). mkdocstrings renders Markdown, where a role would show as raw text: each is
replaced by an optional autorefs cross-reference to the object's canonical path, which becomes
a link when the site renders that object and plain code otherwise (never a broken link). A
target that names no object is shown as code. A ``.. math::`` or ``.. code-block::`` directive
would show as raw text too: each becomes a fenced code block (a formula is shown as its source:
the site has no math renderer that works offline). Loaded by ``mkdocs.yml`` (the Python
handler's ``extensions``); :func:`convert` and :func:`directive_blocks` are the pure text
transformations, tested on their own.
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


DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)\.\. (?P<name>math|code-block|code|sourcecode)::"
                       r"[ \t]*(?P<arg>.*)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def directive_blocks(text: str) -> str:
    """``text`` with every ``.. math::`` and ``.. code-block::`` directive a fenced code block.

    Args:
        text: a docstring.

    Returns:
        The text where each directive (its line and the following lines indented deeper than
        it, blank lines between them included) is a fenced block at the directive's
        indentation, with a blank line either side: a formula's lines (its continuations
        dedented to the formula's first column), or the code under a ``code-block:: LANG``
        (dedented, fenced as ``LANG``).
    """
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        m = DIRECTIVE.match(lines[i])
        if m is None:
            out.append(lines[i])
            i += 1
            continue
        indent, math = m.group("indent"), m.group("name") == "math"
        j = i + 1
        while j < len(lines) and (_indent(lines[j]) > len(indent) if lines[j].strip() else any(
                nxt.strip() and _indent(nxt) > len(indent) for nxt in lines[j + 1:j + 2])):
            j += 1
        body = lines[i + 1:j]
        cut = min([_indent(b) for b in body if b.strip()] or [0])
        if math:  # continuations keep their indentation beyond the formula's first column
            cut = min(cut, m.start("arg"))
            block = ([m.group("arg")] if m.group("arg").strip() else []) + [b[cut:] for b in body]
            fence = "```"
        else:
            block, fence = [b[cut:] for b in body], "```" + m.group("arg").strip()
        while block and not block[0].strip():
            block.pop(0)
        while block and not block[-1].strip():
            block.pop()
        if out and out[-1].strip():
            out.append("")
        out += [indent + fence] + [(indent + b).rstrip() for b in block] + [indent + "```"]
        if j < len(lines) and lines[j].strip():
            out.append("")
        i = j
    return "\n".join(out)


def _scopes(obj) -> list:
    out, o = [], obj
    while o is not None:
        out.append(o.path)
        o = o.parent
    return out


class RoleLinks(griffe.Extension):
    """Rewrites every loaded object's docstring: :func:`convert`, then :func:`directive_blocks`."""

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
                obj.docstring.value = directive_blocks(convert(obj.docstring.value,
                                                               _scopes(obj), lookup))
            for member in obj.members.values():
                if not member.is_alias:
                    walk(member)

        walk(pkg)
