"""The built documentation site checked in a real browser, opened from disk.

Opens the pages of a built site (``make docs`` -> ``site/``) with ``file://`` URLs in headless
Chromium (driven by Playwright, with the system's Chromium: no browser download) and checks what
a reader sees:

* the home page loads with the site's title; clicking each link of the navigation lands on an
  HTML page (the URL ends in ``.html``; never a folder listing) whose title is the link's,
  whose body has a heading and whose images (the study pages' figures) load;
* on an API reference page, a cross-reference made from a docstring role is a link, and
  clicking it reaches a page holding the target's anchor;
* no raw ``:func:``/``:class:``/... role text is visible on the reference pages, and no page
  shows unrendered markup (a list left inside a paragraph, ``**`` or ``*`` around words, a
  ``.. math::`` directive);
* PNG screenshots of a few pages (home, a guide, an API page, a study page at its first
  figure) go to ``--out`` with a note of the command, the date and the Chromium version.

Each problem is printed on one line and the exit status is 1. ``make docs-check`` builds the
site, installs Chromium (Debian's package) and Playwright where missing, and runs this::

    python docs/check_site.py site --out benchmarks/results/docs
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
# the pages photographed: home, a guide, an API page, a study page (site paths)
SCREENSHOTS = {"home.png": "index.html", "guide.png": "architecture.html",
               "api.png": "reference/advisor.html", "study.png": "studies/lm-rank.html"}
API_PAGE = "reference/advisor.html"
VIEWPORT = {"width": 1280, "height": 800}

ROLE_TEXT = re.compile(r":(?:py:)?(?:func|class|mod|meth|data|attr|exc|obj|const):(?=\S)")
# a Markdown list item left as a line of a paragraph (a list without a blank line before it)
LIST_LINE = re.compile(r"\n[ \t]*(?:[-*+]|\d+[.)])[ \t]+\S")
# emphasis left as text: **word(s)** or *word(s)* (not G*, x * y, or a footnote star)
STRONG_TEXT = re.compile(r"(?<![\w*])\*\*(?=\S)[^*\n]+?(?<=\S)\*\*(?![\w*])")
EM_TEXT = re.compile(r"(?<![\w*])\*(?=[A-Za-z])[^*\n]+?(?<=[A-Za-z.,)])\*(?![\w*])")
# a reST directive left as text (``.. math::``, ``.. note::``): Markdown has no directives
DIRECTIVE_TEXT = re.compile(r"(?:^|\s)\.\. [a-z-]+::")

# JavaScript run in the page: the navigation's page links (numbered), and a page's facts
NAV_LINKS = """() => [...document.querySelectorAll('nav.md-nav--primary a.md-nav__link[href]')]
  .filter(a => !a.closest('.md-nav--secondary') && !a.getAttribute('href').startsWith('#'))
  .map((a, i) => { a.dataset.checkNav = i; return a.textContent.trim(); })"""
PAGE_FACTS = """() => {
  const article = document.querySelector('article');
  const h1 = article && article.querySelector('h1');
  const body = document.body ? document.body.innerText : '';
  return {url: location.href, title: document.title, h1: h1 ? h1.textContent.trim() : '',
          listing: body.trimStart().startsWith('Index of ') || !!document.querySelector(
            '#parentDirLinkBox, tbody#tbody')};
}"""
# the text a reader sees as prose: paragraphs and list items, without code
PROSE = """() => [...document.querySelectorAll('article p, article li')].map(el => {
  const c = el.cloneNode(true);
  c.querySelectorAll('code, pre, kbd, script, style, .arithmatex, ul, ol').forEach(x => x.remove());
  return c.textContent;
})"""
BROKEN_IMAGES = """() => [...document.querySelectorAll('article img')]
  .filter(img => !img.complete || img.naturalWidth === 0).map(img => img.getAttribute('src'))"""
ROLE_LINKS = """() => [...document.querySelectorAll(
  '.doc-contents a.autorefs-internal')].filter(a => a.firstElementChild &&
  a.firstElementChild.tagName === 'CODE' && a.children.length === 1)
  .map(a => a.getAttribute('href'))"""
ANCHOR = """() => ({url: location.href, found: location.hash.length > 1 &&
  !!document.getElementById(decodeURIComponent(location.hash.slice(1)))})"""


def site_title(mkdocs_yml: Path) -> str:
    """The ``site_name`` of an mkdocs configuration file.

    Args:
        mkdocs_yml: the configuration file.

    Returns:
        The site's name, as the home page's title shows it.
    """
    m = re.search(r"^site_name:\s*(.+?)\s*$", mkdocs_yml.read_text(), re.M)
    if m is None:
        raise ValueError(f"{mkdocs_yml}: no site_name line")
    return m.group(1).strip("'\"")


def page_problem(label: str, facts: dict, title: str) -> str | None:
    """What is wrong with the page a navigation link landed on, or None.

    Args:
        label: the link's text (the page's title in the navigation).
        facts: ``url``, ``title``, ``h1`` and ``listing`` of the page (``PAGE_FACTS``).
        title: the site's title; the home page's title is this, another page's is
            ``"<label> - <title>"``.

    Returns:
        A one-line message, or None for a page that is right.
    """
    url = facts["url"]
    where = f"navigation link {label!r} -> {url}"
    if facts["listing"] or facts["title"].startswith("Index of "):
        return f"{where}: a folder listing, not a page (directory URLs do not open from disk)"
    u = urlsplit(url)
    if u.scheme != "file" or not unquote(u.path).endswith(".html"):
        return f"{where}: not a file:// URL of an .html page"
    if facts["title"] not in (title, f"{label} - {title}"):
        return f"{where}: title {facts['title']!r}, expected {label!r} - {title!r}"
    if not facts["h1"]:
        return f"{where}: the page has no heading (no h1 in its article)"
    return None


def prose_problems(page: str, texts: list) -> list:
    """Unrendered Markdown in a page's prose (paragraphs and list items without their code).

    Args:
        page: the page's site path, for the message.
        texts: the text of each paragraph or list item, as ``PROSE`` returns it.

    Returns:
        One-line messages: a list left inside a paragraph, ``**``/``*`` emphasis or a reST
        directive as text.
    """
    out = []
    for text in texts:
        for rx, what in ((LIST_LINE, "a Markdown list left as text (no blank line before it?)"),
                         (STRONG_TEXT, "raw **strong** emphasis"), (EM_TEXT, "raw *emphasis*"),
                         (DIRECTIVE_TEXT, "a raw reST directive")):
            m = rx.search(text)
            if m is not None:
                snippet = " ".join(text[max(0, m.start() - 30):m.end() + 30].split())
                out.append(f"{page}: {what}: {snippet!r}")
    return out


def role_problems(page: str, text: str) -> list:
    """Raw docstring roles (``:func:`` and the like) in a page's visible text.

    Args:
        page: the page's site path, for the message.
        text: the page's rendered text.

    Returns:
        One one-line message per role left as text.
    """
    return [f"{page}: raw role text {' '.join(text[m.start():m.end() + 40].split())!r}"
            for m in ROLE_TEXT.finditer(text)]


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _uri(site: Path, page: str) -> str:
    return (site / page).resolve().as_uri()


def check(site: Path, out: Path | None, chromium: str = CHROMIUM, title: str | None = None,
          api_page: str = API_PAGE) -> tuple:
    """Every check on a built site, in headless Chromium.

    Args:
        site: the built site's folder (with ``index.html``).
        out: the folder the screenshots and their note go to (None: no screenshots).
        chromium: the Chromium executable.
        title: the site's title (default: ``site_name`` of the repository's ``mkdocs.yml``).
        api_page: the reference page whose cross-reference is clicked.

    Returns:
        ``(problems, version, n_pages)``: one-line messages, Chromium's version, pages checked.
    """
    from playwright.sync_api import Error, sync_playwright

    title = title or site_title(ROOT / "mkdocs.yml")
    problems: list = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport=VIEWPORT)
        home = _uri(site, "index.html")
        page.goto(home)
        if page.title() != title:
            problems.append(f"index.html: title {page.title()!r}, expected {title!r}")
        labels = page.evaluate(NAV_LINKS)
        if not labels:
            problems.append("index.html: no navigation links")
        visited = {}
        for i, label in enumerate(labels):
            page.goto(home)
            page.evaluate(NAV_LINKS)  # numbers the links again (data-check-nav)
            try:
                page.locator(f"[data-check-nav='{i}']").click(timeout=10_000)
                page.wait_for_load_state()
            except Error as e:
                problems.append(f"navigation link {label!r}: {_first_line(e)}")
                continue
            facts = page.evaluate(PAGE_FACTS)
            bad = page_problem(label, facts, title)
            if bad:
                problems.append(bad)
                continue
            rel = Path(unquote(urlsplit(facts["url"]).path)).resolve().relative_to(site.resolve())
            visited[rel.as_posix()] = label
            problems += prose_problems(rel.as_posix(), page.evaluate(PROSE))
            problems += [f"{rel.as_posix()}: image {src} did not load"
                         for src in page.evaluate(BROKEN_IMAGES)]
            if rel.parts[0] == "reference":
                problems += role_problems(rel.as_posix(), page.inner_text("article"))
        if labels and not any(v.startswith("reference/") for v in visited):
            problems.append("no API reference page reached from the navigation")
        try:
            problems += _cross_reference(page, site, api_page)
        except Error as e:
            problems.append(f"{api_page}: cross-reference: {_first_line(e)}")
        version = browser.version
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            for name, rel in SCREENSHOTS.items():
                if not (site / rel).is_file():
                    problems.append(f"{rel}: no such page to photograph")
                    continue
                page.goto(_uri(site, rel))
                if rel.startswith("studies/") and page.locator("article img").count():
                    page.locator("article img").first.scroll_into_view_if_needed()
                _save_small(page.screenshot(), out / name)
        browser.close()
    return problems, version, len(visited)


def _cross_reference(page, site: Path, api_page: str) -> list:
    """Click a docstring role's link on ``api_page``; its target's anchor must be there."""
    if not (site / api_page).is_file():
        return [f"{api_page}: no such page"]
    page.goto(_uri(site, api_page))
    hrefs = page.evaluate(ROLE_LINKS)
    if not hrefs:
        return [f"{api_page}: no cross-reference link from a docstring role"]
    # prefer one to another page: it tests the relative path as well as the anchor
    href = next((h for h in hrefs if not h.startswith("#")), hrefs[0])
    page.locator(f".doc-contents a.autorefs-internal[href='{href}']").first.click(timeout=10_000)
    page.wait_for_load_state()
    got = page.evaluate(ANCHOR)
    if not got["found"]:
        return [f"{api_page}: cross-reference {href!r} -> {got['url']}: no element with the "
                "target's anchor id there"]
    if not urlsplit(got["url"]).path.endswith(".html"):
        return [f"{api_page}: cross-reference {href!r} -> {got['url']}: not an .html page"]
    return []


def _save_small(png: bytes, path: Path) -> None:
    """A screenshot as a 128-colour PNG (about a third of the size; the text stays sharp)."""
    import io

    from PIL import Image

    Image.open(io.BytesIO(png)).convert("RGB").quantize(128).save(path, optimize=True)


def write_note(out: Path, argv: list, version: str, n_pages: int, problems: list) -> None:
    """``out/check_site.md``: the command, the date, the browser's version and the outcome."""
    from importlib.metadata import version as package_version

    shots = ", ".join(f"`{n}` ({p})" for n, p in SCREENSHOTS.items())
    result = "passed" if not problems else f"{len(problems)} problem(s):\n\n" + "\n".join(
        f"* {p}" for p in problems)
    out.joinpath("check_site.md").write_text(
        "# The documentation site in headless Chromium\n\n"
        f"Command: `python docs/check_site.py {' '.join(argv)}` (`make docs-check`).\n\n"
        f"Date: {datetime.date.today().isoformat()}. Chromium {version} (headless), driven by "
        f"Playwright {package_version('playwright')}; pages opened from disk with file:// "
        f"URLs, viewport {VIEWPORT['width']}x{VIEWPORT['height']}.\n\n"
        f"Checked: {n_pages} navigation links followed from the home page (each an .html page "
        f"with its title, a heading and loaded images); a docstring cross-reference on "
        f"`{API_PAGE}` clicked to its anchor; no raw roles on the reference pages; no "
        f"unrendered lists, emphasis or reST directives.\n\n"
        f"Screenshots: {shots}.\n\n"
        f"Result: {result}\n")


def main(argv: list | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("site", type=Path, help="the built site's folder (make docs -> site)")
    ap.add_argument("--out", type=Path, default=None,
                    help="folder for the screenshots and their note (default: none taken)")
    ap.add_argument("--chromium", default=CHROMIUM, help="the Chromium executable")
    args = ap.parse_args(argv)
    if not (args.site / "index.html").is_file():
        print(f"site: no index.html in {args.site} (build it with make docs)")
        return 1
    if not Path(args.chromium).is_file():
        print(f"--chromium: no executable {args.chromium} (apt-get install -y chromium)")
        return 1
    problems, version, n = check(args.site, args.out, args.chromium)
    if args.out is not None:
        write_note(args.out, argv, version, n, problems)
    for p in problems:
        print(p)
    print(f"check_site: Chromium {version}, {n} pages from the navigation, "
          f"{'OK' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
