"""The attention viewer in a real browser: Debian's Chromium, headless, driven by
Playwright (tests/headless.py). Each page is opened from disk in an offline context; every
test ends by checking that the page requested nothing but itself and logged no error.

Without Chromium or Playwright these tests skip, saying what to install; in CI (`CI` set)
they fail instead, so CI cannot pass without having looked at the page (tests/needs.py)."""

import itertools
import struct

import numpy as np
import pytest
from conftest import run_script, train_tiny_run
from headless import BrowserMissing, chromium, chromium_path, offline_page, screenshot
from needs import unavailable
from test_viewer import HOSTILE_TOKENS, made_head_report, made_report

from tinytf.inspect.viewer import MIN_LINE, WEIGHT_SCALE, attention_page

TOKENS = ["<bos>", "the", "cat", "sat", "on", "the", "mat"]
SOURCE = ["3", "1", "2", "0"]
TARGET = ["<bos>", "0", "1", "2"]


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module; without one, every test skips (fails in CI) saying what to install."""
    missing = None
    try:
        with chromium() as started:
            yield started
    except BrowserMissing as err:
        missing = err
    if missing is not None:
        unavailable(missing.missing, missing.install)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """The pages under test, written once: {name: (path, report)}."""
    folder = tmp_path_factory.mktemp("pages")
    decoder = made_report(TOKENS, layers=2, heads=3)
    reports = {
        "decoder": (decoder, made_head_report(decoder)),
        "seq2seq": (made_report(TARGET, source=SOURCE, layers=2, heads=2), None),
        "hostile": (made_report(["<bos>", *HOSTILE_TOKENS], source=HOSTILE_TOKENS[::-1], layers=1, heads=2), None),
        "wide": (made_report(TOKENS, layers=8, heads=16), None),
        "long": (made_report([f"w{i}" for i in range(256)], layers=2, heads=4), None),
    }
    written = {}
    for name, (report, heads) in reports.items():
        path = folder / f"{name}.html"
        path.write_text(attention_page(report, heads, facts={"input": name}), encoding="utf-8")
        written[name] = (path, report)
    return written


@pytest.fixture
def open_page(browser, pages):
    """Open a written page by name; afterwards, it must have asked for nothing but itself
    and logged no console error."""
    opened = []

    def opener(name, width=1400, height=900):
        path, report = pages[name]
        page = offline_page(browser, width, height)
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-ready]")
        opened.append((page, path.as_uri()))
        return page, report

    yield opener
    for page, uri in opened:
        assert page.requests == [uri], f"the page made requests: {page.requests}"
        assert page.errors == [], page.errors
        page.context.close()


def stored(weights):
    return np.rint(weights * WEIGHT_SCALE)  # the page's integers


def count_lines(page, selector="#head-view line"):
    return page.locator(selector).count()


def visible_lines(page):
    return page.evaluate(
        "[...document.querySelectorAll('#head-view line')].filter(l => getComputedStyle(l).display !== 'none')"
        ".map(l => [Number(l.dataset.head), Number(l.dataset.q), Number(l.dataset.k)])"
    )


def labels(page, side):
    return page.locator(f"#head-view g.token.{side} text").all_text_contents()


# ---- what is drawn


def test_one_line_per_weight_of_one_percent_or_more_and_one_cell_per_weight(open_page):
    page, report = open_page("decoder")
    first = report.maps[0]
    assert count_lines(page) == int((stored(first.weights) >= MIN_LINE).sum())
    assert labels(page, "query") == labels(page, "key") == TOKENS
    # The model view: a small heatmap per attention and head, one pixel per weight.
    thumbs = page.locator("#model-grid button.thumb canvas")
    assert thumbs.count() == sum(m.n_heads for m in report.maps) == 6
    sizes = page.evaluate("[...document.querySelectorAll('#model-grid canvas')].map(c => [c.width, c.height])")
    assert sizes == [[len(TOKENS), len(TOKENS)]] * 6
    # Clicking one opens it large: a cell per (query, key), its weight under the pointer.
    page.locator('#model-grid button.thumb[data-attention="decoder.1.self"][data-head="2"]').click()
    assert page.locator("#map-dialog").is_visible()
    assert page.locator("#map-view rect.cell").count() == len(TOKENS) ** 2
    assert page.locator("#map-view text.label").all_text_contents() == TOKENS + TOKENS
    page.locator('#map-view rect.cell[data-q="3"][data-k="1"]').hover()
    weight = report.maps[1].weights[2, 3, 1]
    assert page.locator("#map-info").text_content() == f"query 3 “sat” → key 1 “the”: {weight:.3f}"
    page.locator("#map-close").click()
    assert not page.locator("#map-dialog").is_visible()


def test_the_head_table_shows_each_head_s_label_and_scores(open_page):
    page, _ = open_page("decoder")
    rows = page.locator("#head-table tr")
    assert rows.nth(0).locator("th").all_text_contents() == ["head", "label", "self", "previous", "first", "entropy"]
    assert rows.nth(2).locator("td").all_text_contents() == ["head 1", "previous", "0.10", "0.50", "–", "1.50"]
    assert page.locator("#model-grid .caption").all_text_contents()[:3] == ["mixed", "previous", "previous"]


def test_unchecking_a_head_hides_its_lines(open_page):
    page, report = open_page("decoder")
    per_head = (stored(report.maps[0].weights) >= MIN_LINE).sum(axis=(1, 2))
    page.locator('#head-table input[data-head="1"]').uncheck()
    assert count_lines(page, '#head-view line[data-head="1"]') == 0
    assert count_lines(page) == per_head[0] + per_head[2]
    page.locator("#heads-none").click()
    assert count_lines(page) == 0
    page.locator('#head-table input[data-head="2"]').check()
    assert count_lines(page) == count_lines(page, '#head-view line[data-head="2"]') == per_head[2]
    page.locator("#heads-all").click()
    assert count_lines(page) == per_head.sum()


def test_hovering_a_token_leaves_only_its_lines_and_prints_its_top_keys(open_page):
    page, report = open_page("decoder")
    weights = stored(report.maps[0].weights)
    page.locator('#head-view g.token.query[data-index="4"]').hover()
    shown = visible_lines(page)
    assert shown and all(q == 4 for _, q, _ in shown)
    assert len(shown) == int((weights[:, 4, :] >= MIN_LINE).sum())
    info = page.locator("#token-info").text_content()
    top = int(np.argmax(report.maps[0].weights[0, 4]))
    assert info.startswith("query 4 “on” reads:") and f"{TOKENS[top]} {report.maps[0].weights[0, 4, top]:.3f}" in info
    page.locator('#head-view g.token.key[data-index="0"]').hover()  # a key: the queries that read it
    assert {k for _, _, k in visible_lines(page)} == {0}
    assert len(visible_lines(page)) == int((weights[:, :, 0] >= MIN_LINE).sum())
    page.mouse.move(1, 1)
    assert len(visible_lines(page)) == count_lines(page)


def test_choosing_an_attention_redraws_with_its_own_token_axes(open_page):
    page, _ = open_page("seq2seq")
    select = page.locator("#attention-select")
    assert select.locator("option").all_text_contents()[:1] == ["encoder.0.self  (source → source)"]
    assert labels(page, "query") == labels(page, "key") == SOURCE  # the encoder reads the source
    select.select_option(label="decoder.0.cross  (target → source)")
    assert labels(page, "query") == TARGET and labels(page, "key") == SOURCE
    headings = page.locator("#head-view text.heading").all_text_contents()
    assert headings == ["queries (target)", "keys (source)"]
    select.select_option(label="decoder.1.self  (target → target)")
    assert labels(page, "query") == labels(page, "key") == TARGET
    # The model view: the cross-attention's heatmaps are target x source.
    sizes = page.evaluate(
        "[...document.querySelectorAll('#model-grid tr[data-attention=\"decoder.1.cross\"] canvas')]"
        ".map(c => [c.width, c.height])"
    )
    assert sizes == [[len(SOURCE), len(TARGET)]] * 2


# ---- safe, offline, and holding up at size


def test_tokens_that_look_like_markup_stay_text(open_page):
    page, _ = open_page("hostile")
    assert page.evaluate("window.pwned") is None
    assert labels(page, "query") == HOSTILE_TOKENS[::-1]  # the encoder's source
    assert page.locator("#facts .tok").all_text_contents() == [*HOSTILE_TOKENS[::-1], "<bos>", *HOSTILE_TOKENS]
    assert page.locator("img, iframe").count() == 0


def test_the_network_recorder_sees_a_request_when_one_is_made(browser):
    # The check every test ends with would be blind if requests went unrecorded.
    page = offline_page(browser)
    page.goto("about:blank")
    page.evaluate("fetch('http://example.invalid/x').catch(() => null)")
    page.wait_for_timeout(100)
    assert "http://example.invalid/x" in page.requests
    page.context.close()


def test_sixteen_heads_by_eight_layers_render_without_overlap(open_page):
    page, report = open_page("wide")
    assert page.locator("#model-grid button.thumb").count() == 16 * 8
    assert page.locator("#head-table input[type=checkbox]").count() == 16
    colours = page.evaluate("[...document.querySelectorAll('#head-table .swatch')].map(s => s.style.background)")
    assert len(set(colours)) == 16
    boxes = [page.locator("#model-grid tr").nth(1).locator("button.thumb").nth(i).bounding_box() for i in range(16)]
    assert all(a["x"] + a["width"] <= b["x"] for a, b in itertools.pairwise(boxes))
    assert count_lines(page) == int((stored(report.maps[0].weights) >= MIN_LINE).sum())


def test_a_max_len_input_scrolls_instead_of_overlapping(open_page):
    page, _ = open_page("long")
    rows = page.evaluate(
        "[...document.querySelectorAll('#head-view g.token.query text')].map(t => t.getBBox())"
        ".map(b => [b.y, b.y + b.height])"
    )
    assert len(rows) == 256 and all(top >= bottom for (_, bottom), (top, _) in itertools.pairwise(rows))
    scroller = page.evaluate("(s => [s.scrollHeight, s.clientHeight])(document.getElementById('head-scroller'))")
    assert scroller[0] > scroller[1]  # the drawing scrolls inside its box
    page.locator('#model-grid button.thumb[data-head="0"]').first.click()
    assert page.locator("#map-view rect.cell").count() == 256 * 256


def test_a_screenshot_is_the_whole_page_as_png(browser, pages, tmp_path):
    # What scripts/viewer_screenshot.py saves as docs/attention-viewer.png.
    out = tmp_path / "shot.png"
    screenshot(browser, pages["decoder"][0], out, width=1200)
    header = out.read_bytes()[:24]
    width, height = struct.unpack(">II", header[16:24])
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and width == 1200 and height >= 500


def test_no_screenshot_is_taken_of_a_page_that_asks_the_network(browser, tmp_path):
    page_path, out = tmp_path / "calls-home.html", tmp_path / "shot.png"
    page_path.write_text("<body data-ready><script>fetch('http://example.invalid/x')</script></body>")
    with pytest.raises(RuntimeError, match=r"requests .*http://example\.invalid/x"):
        screenshot(browser, page_path, out)
    assert not out.exists()


@pytest.mark.slow
def test_the_screenshot_script_writes_a_run_s_page_and_saves_its_png(tmp_path):
    try:
        chromium_path()  # the script starts its own
    except BrowserMissing as err:
        unavailable(err.missing, err.install)
    run_dir = train_tiny_run(tmp_path)
    out = tmp_path / "viewer.png"
    done = run_script("scripts/viewer_screenshot.py", "--run", run_dir, "--text", "3 1 2", "--out", out)
    written, wrote = done.stdout.splitlines()
    assert written.endswith(" s (the whole command)") and wrote == f"wrote {out}"
    header = out.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24])[0] == 1600  # the script's WIDTH
