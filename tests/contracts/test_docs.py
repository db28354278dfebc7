"""The user's pages: the README's Python examples run as printed, and the documentation site
builds with ``mkdocs build --strict`` (every page in the nav, every link and figure resolved, the
API reference generated from the docstrings), navigates from disk (every relative link names a
file) and renders the docstrings' roles as links."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_python_examples_run(tmp_path):
    code = "\n".join(re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S))
    assert "gt.estimate_scaling_constants" in code and "gt.mc_mse" in code
    script = tmp_path / "readme_examples.py"
    script.write_text(code)
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "g_star" in r.stdout and "ScalingConstants(" in r.stdout


def test_docs_site_builds_strictly(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f",
                        str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")], cwd=ROOT,
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    site = tmp_path / "site"
    assert (site / "index.html").is_file()
    # the study pages carry the committed figures; the reference is generated from docstrings
    assert (site / "results-full" / "lm-rank" / "lm_rank.png").is_file()
    ref = (site / "reference" / "advisor.html").read_text()  # use_directory_urls: false
    assert "estimate_from_rollouts" in ref and "c1_warning" in ref
    pages = [p for p in site.rglob("*.html") if p.name != "404.html"]  # 404: absolute links
    # opened from disk: every relative link and image names a file (never a folder listing)
    broken = _broken_links(site, pages)
    assert not broken, broken[:10]
    # the docstrings' roles are rendered: none left as text, many as links
    raw = [(p.name, m) for p in pages for m in re.findall(ROLE_TEXT, p.read_text())]
    assert not raw, raw[:10]
    links = sum(p.read_text().count('class="autorefs autorefs-internal"')
                for p in (site / "reference").glob("*.html"))
    assert links > 300


ROLE_TEXT = r":(?:func|class|mod|meth|data|attr|exc):(?:<code>|`)"


def _broken_links(site, pages) -> list:
    """``(page, href)`` of every relative ``href``/``src`` that names no file of the site."""
    from urllib.parse import unquote, urlsplit

    bad = []
    for page in pages:
        for href in re.findall(r'(?:href|src)="([^"]+)"', page.read_text()):
            u = urlsplit(href)
            if u.scheme or u.netloc or not u.path:
                continue
            target = (page.parent / unquote(u.path)).resolve()
            if not target.is_file():
                bad.append((str(page.relative_to(site)), href))
    return bad


def test_broken_link_check_catches_folder_links(tmp_path):
    """The rival the site check excludes: directory URLs (``page/``), which a browser opening
    files from disk shows as folder listings."""
    (tmp_path / "page").mkdir()
    (tmp_path / "page" / "index.html").write_text("x")
    (tmp_path / "index.html").write_text('<a href="page/">p</a> <a href="page/index.html">q</a>'
                                         ' <a href="https://x.org/">r</a> <a href="#a">s</a>')
    assert _broken_links(tmp_path, [tmp_path / "index.html"]) == [("index.html", "page/")]


def test_roles_become_optional_cross_references():
    """docs/griffe_roles.py: ``~`` keeps the last name, a leading dot is relative, a bare name
    is looked up outwards, an unknown target is code (rival: the raw role text)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("griffe_roles", ROOT / "docs" /
                                                  "griffe_roles.py")
    roles = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(roles)
    known = {"pkg.mod.f": "pkg.mod.f", "pkg.sub.g": "pkg.sub.g", "pkg.mod.C.m": "pkg.mod.C.m",
             "pkg.Face": "pkg.impl.Face"}
    scopes = ["pkg.mod.C", "pkg.mod", "pkg"]
    out = roles.convert("a :func:`~pkg.mod.f`, :func:`.sub.g`, :meth:`m`, :class:`Face`, "
                        ":data:`nothing`, :func:`text <pkg.mod.f>`", scopes, known.get)
    assert ':' + 'func:' not in out and ':data:' not in out
    assert '<autoref identifier="pkg.mod.f" optional><code>f</code></autoref>' in out
    assert '<autoref identifier="pkg.sub.g" optional><code>sub.g</code></autoref>' in out
    assert '<autoref identifier="pkg.mod.C.m" optional><code>m</code></autoref>' in out
    assert '<autoref identifier="pkg.impl.Face" optional><code>Face</code></autoref>' in out
    assert "`nothing`" in out
    assert '<autoref identifier="pkg.mod.f" optional><code>text</code></autoref>' in out


def test_experiment_tables_list_every_experiment():
    """The README's and the experiments page's tables name every registered experiment, once
    (rival: a study added to the registry and not to the tables)."""
    from grpo_theory.experiments import registry

    names = sorted(registry.names())
    for page in (ROOT / "README.md", ROOT / "docs" / "experiments.md"):
        rows = re.findall(r"^\| `([a-z0-9-]+)` \|", page.read_text(), re.M)
        assert sorted(rows) == names, (page.name, set(names) ^ set(rows))
