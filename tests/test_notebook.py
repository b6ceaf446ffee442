"""The example notebook runs as a user would run it, in a Jupyter kernel (nbclient), in a
folder laid out as after the quickstart, with no network; its outputs are the reports'
own views, and rendered to HTML (nbconvert) and opened in Chromium, the attention viewer
draws inside it and the tables show."""

import shutil

import nbformat
import pytest
from conftest import ROOT
from headless import BrowserMissing, chromium, offline_page
from nbclient import NotebookClient
from nbconvert import HTMLExporter
from needs import unavailable

NOTEBOOK = ROOT / "examples" / "attention.ipynb"


@pytest.fixture(scope="module")
def executed(after_quickstart, tmp_path_factory):
    """The example notebook, run cell by cell in a fresh kernel in a copy of the quickstart folder."""
    folder = tmp_path_factory.mktemp("notebook")
    shutil.copytree(after_quickstart / "runs", folder / "runs")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    ).execute()
    return notebook


def html_outputs(notebook):
    return [
        output["data"]["text/html"]
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if "text/html" in output.get("data", {})
    ]


def test_the_example_notebook_is_saved_without_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(
        not cell.get("outputs") and not cell.get("execution_count")
        for cell in notebook.cells
        if cell.cell_type == "code"
    )


def test_the_example_notebook_shows_the_viewer_the_head_table_and_the_patching_grid(executed):
    errors = [
        output for cell in executed.cells for output in cell.get("outputs", []) if output["output_type"] == "error"
    ]
    assert errors == []
    viewer, heads, patched = html_outputs(executed)
    assert viewer.startswith("<iframe srcdoc=") and "tinytf-data" in viewer
    assert heads.startswith("<pre") and "previous" in heads
    assert "<table" in patched and "restored: z patched" in patched


def test_the_rendered_notebook_draws_the_viewer_offline_in_chromium(executed, tmp_path):
    body, _ = HTMLExporter(template_name="basic").from_notebook_node(executed)  # no page scripts of its own
    page_path = tmp_path / "notebook.html"
    page_path.write_text(f"<!doctype html><html><head><meta charset='utf-8'></head><body>{body}</body></html>")
    missing = None
    try:
        with chromium() as browser:
            page = offline_page(browser)
            page.goto(page_path.as_uri())
            frame = page.frame_locator("iframe")
            frame.locator("body[data-ready]").wait_for()
            assert frame.locator("#head-view line").count() > 0  # the head view drew its lines
            assert frame.locator("#head-view g.token.query text").all_text_contents()[:3] == ["<bos>", "the", "cat"]
            assert page.locator("table td").count() > 0 and page.locator("pre").count() > 0
            assert [url for url in page.requests if not url.startswith(("file:", "about:"))] == []
            assert page.errors == []
    except BrowserMissing as err:
        missing = err
    if missing is not None:
        unavailable(missing.missing, missing.install)
