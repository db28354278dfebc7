"""The guides' Python blocks as a reader meets them: every block parses, and every block not
marked as a fragment runs as written, the blocks of a page in order in one fresh process.

A fragment (it needs something of the reader's: a TRL trainer, a cluster, a checkpoint) is
announced in the page and marked ``<!-- fragment -->`` before its fence; the complete example
it points to is tested elsewhere. The README's blocks are run by ``test_docs.py``."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- fragment -->"
FENCE = re.compile(r"```python\n(.*?)```", re.S)
#: pages whose complete blocks take more than a few seconds (a transformer's statistics,
#: 100,000 Monte Carlo repetitions, 64 training runs, exact noise scales): behind the marker
SLOW_PAGES = {"advisor.md", "noise-scale.md", "getting-started.md", "training-loop.md"}


def blocks(text: str) -> list:
    """``[(code, is_fragment)]`` of a page's Python blocks: a fragment has :data:`MARK`
    between the previous block and its fence."""
    out, last = [], 0
    for m in FENCE.finditer(text):
        out.append((m.group(1), MARK in text[last:m.start()]))
        last = m.end()
    return out


def _pages():
    return sorted(p for p in (ROOT / "docs").rglob("*.md") if FENCE.search(p.read_text()))


def test_every_python_block_parses():
    """Fragments too (rival: a block written ``GRPOConfig(a=1, ...)``, a syntax error)."""
    bad = []
    for page in _pages():
        for i, (code, _) in enumerate(blocks(page.read_text())):
            try:
                ast.parse(code)
            except SyntaxError as e:
                bad.append(f"{page.relative_to(ROOT)} block {i}: {e.msg} (line {e.lineno})")
    assert not bad, bad
    with pytest.raises(SyntaxError):
        ast.parse('GRPOConfig(loss_type="dr_grpo", ...)')


def test_fragments_are_told_apart():
    text = "a\n```python\nx = 1\n```\n" + MARK + "\n*A fragment.*\n\n```python\ny(z)\n```\n"
    assert blocks(text) == [("x = 1\n", False), ("y(z)\n", True)]


def _params():
    for page in _pages():
        if not any(not frag for _, frag in blocks(page.read_text())):
            continue
        marks = [pytest.mark.slow] if page.name in SLOW_PAGES else []
        yield pytest.param(page, id=str(page.relative_to(ROOT / "docs")), marks=marks)


@pytest.mark.parametrize("page", list(_params()))
def test_complete_blocks_run_as_written(page, tmp_path):
    code = "\n".join(c for c, frag in blocks(page.read_text()) if not frag)
    script = tmp_path / "blocks.py"
    script.write_text(code)
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
