"""docs/check_site.py without a browser: the verdicts it gives on what a page shows, and the
docstring directives that docs/griffe_roles.py turns into code blocks. The browser run itself is
``make docs-check`` (not part of ``make test``)."""

import importlib.util
import re
from pathlib import Path

import markdown
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_site = _load("check_site")
roles = _load("griffe_roles")


def _prose(html):
    """The text of each paragraph and list item without its code, as the browser's PROSE."""
    html = re.sub(r"<pre>.*?</pre>|<code>.*?</code>", "", html, flags=re.S)
    return [re.sub(r"<[^>]+>", "", t) for t in re.findall(r"<(?:p|li)>(.*?)</(?:p|li)>", html,
                                                          re.S)]


def _render(text):
    return markdown.markdown(text, extensions=["pymdownx.superfences"])


GOOD = {"url": "file:///s/getting-started.html", "title": "Getting started - grpo-theory",
        "h1": "The two commands", "listing": False}


def test_page_verdicts():
    """A page is right only as an .html file with the link's title and a heading (rivals: a
    folder listing, a folder URL, another page's title, an empty body)."""
    ok = check_site.page_problem
    assert ok("Getting started", GOOD, "grpo-theory") is None
    assert ok("Home", dict(GOOD, url="file:///s/index.html", title="grpo-theory"),
              "grpo-theory") is None
    listing = dict(GOOD, url="file:///s/getting-started/", title="Index of /s/getting-started/",
                   h1="", listing=True)
    assert "folder listing" in ok("Getting started", listing, "grpo-theory")
    assert "not a file:// URL" in ok("Getting started", dict(GOOD, url="file:///s/x/"),
                                     "grpo-theory")
    assert "not a file:// URL" in ok("Getting started",
                                     dict(GOOD, url="http://h/getting-started.html"), "grpo-theory")
    assert "title" in ok("Getting started", dict(GOOD, title="Tests - grpo-theory"),
                         "grpo-theory")
    assert "no heading" in ok("Getting started", dict(GOOD, h1=""), "grpo-theory")
    for facts in (listing, dict(GOOD, h1="")):
        assert "\n" not in ok("Getting started", facts, "grpo-theory")


def test_prose_checks_on_rendered_markdown():
    """A list without a blank line before it, ``**``/``*`` emphasis and a reST directive left as
    text are caught on what Markdown renders; the rendered forms (and ``G*``, ``x * y``, a
    dash in a sentence) pass."""
    bad = _render("Intro:\n- a\n- b\n\nThe \\*\\*raw\\*\\* one.\n\n.. math:: x = 1\n\n"
                  "An \\*emphasis\\* left.")
    found = check_site.prose_problems("p.html", _prose(bad))
    assert [m.split(": ")[1] for m in found] == [
        "a Markdown list left as text (no blank line before it?)", "raw **strong** emphasis",
        "a raw reST directive", "raw *emphasis*"]
    good = _render("Intro:\n\n- a\n- b\n\nThe **bold** and *em* ones; G* and c* - x * y, "
                   "a - b.\n\n```\nx = 1\n  + 2\n```")
    assert check_site.prose_problems("p.html", _prose(good)) == []


def test_role_text_is_caught():
    """A role left in the rendered text (``:func:`` then its target) is reported, once each;
    a sentence that names a role (``the :func: role``) is not."""
    found = check_site.role_problems("r.html", "see :func:f and :class:~a.B; the :func: role")
    assert len(found) == 2 and found[0].startswith("r.html: raw role text ':func:f")


def test_site_title_and_arguments(tmp_path, capsys):
    assert check_site.site_title(ROOT / "mkdocs.yml") == "grpo-theory"
    (tmp_path / "mkdocs.yml").write_text("docs_dir: docs\n")
    with pytest.raises(ValueError, match="no site_name"):
        check_site.site_title(tmp_path / "mkdocs.yml")
    assert check_site.main([str(tmp_path)]) == 1
    assert "no index.html" in capsys.readouterr().out
    (tmp_path / "index.html").write_text("<title>x</title>")
    assert check_site.main([str(tmp_path), "--chromium", str(tmp_path / "none")]) == 1
    assert "--chromium: no executable" in capsys.readouterr().out


def test_directives_become_code_blocks():
    """``.. math::`` (with continuation lines, in a list item too) and ``.. code-block::``
    become fenced blocks that Markdown renders as code (rival: the directive left as it is,
    which renders as a paragraph of raw text)."""
    doc = ("Intro:\n\n.. math:: a = b\n              + c,\n\nso it is.\n\n"
           "* item\n\n  .. math:: w = 1,\n            v = 2,\n\n  whose.\n\n"
           ".. code-block:: toml\n\n    [a]\n      b = 1\n\nend")
    out = roles.directive_blocks(doc)
    assert "```\na = b\n    + c,\n```" in out
    assert "  ```\n  w = 1,\n  v = 2,\n  ```" in out
    assert "```toml\n[a]\n  b = 1\n```\n\nend" in out
    assert ".. " not in out
    assert check_site.prose_problems("p.html", _prose(_render(out))) == []
    raw = check_site.prose_problems("p.html", _prose(_render(doc)))
    assert any("reST directive" in m for m in raw)
    assert roles.directive_blocks("no directive: a.. b:: c\n") == "no directive: a.. b:: c\n"
