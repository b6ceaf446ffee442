"""The docs' Python examples run as written. Mark a block runnable with the fence ```python runnable
(GitHub colours it as Python all the same); leave unmarked a block that needs what a test lacks
(a GPU, a file of yours).

The runnable blocks of each docs/*.md run in order, in one namespace per doc, in a folder
laid out as the repository root after the quickstart: configs/, and runs/ holding a short
quickstart run (the "newest run" the examples read).
"""

import re
import shutil
from pathlib import Path

import pytest
from conftest import ROOT

RUNNABLE = re.compile(r"^```python runnable\n(.*?)^```$", re.MULTILINE | re.DOTALL)
PYTHON = re.compile(r"^```python\b", re.MULTILINE)
DOCS = sorted((ROOT / "docs").glob("*.md"))
WITH_EXAMPLES = [doc for doc in DOCS if RUNNABLE.search(doc.read_text())]


def runnable_blocks(text: str) -> list[tuple[int, str]]:
    """The runnable blocks of a Markdown text: (line of the block's first code line, code)."""
    return [(text.count("\n", 0, match.start(1)) + 1, match.group(1)) for match in RUNNABLE.finditer(text)]


def test_only_blocks_marked_runnable_are_run():
    text = "# Doc\n\n```python runnable\nx = 1\n```\n\n```python\nnot run\n```\n\n```python runnable\ny = x\n```\n"
    assert runnable_blocks(text) == [(4, "x = 1\n"), (12, "y = x\n")]


def test_every_python_block_of_the_python_api_is_runnable():
    text = (ROOT / "docs" / "python-api.md").read_text()
    assert len(runnable_blocks(text)) == len(PYTHON.findall(text)) >= 4


@pytest.mark.parametrize("doc", WITH_EXAMPLES, ids=lambda path: path.name)
def test_the_runnable_blocks_run_in_order(doc, after_quickstart, tmp_path, monkeypatch):
    shutil.copytree(after_quickstart / "runs", tmp_path / "runs")  # the examples may train runs of their own
    (tmp_path / "configs").symlink_to(ROOT / "configs", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__main__"}
    for line, code in runnable_blocks(doc.read_text()):
        # Padded so that a traceback names the doc's own line numbers.
        exec(compile("\n" * (line - 1) + code, str(Path("docs") / doc.name), "exec"), namespace)
