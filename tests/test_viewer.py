"""The attention viewer page as written (`attend --format html`): what it holds, how it
escapes user text, its size, and the command line around it. What it *does* in a browser
is tested in test_viewer_browser.py; `made_report` and `page_json` are shared with it."""

import base64
import hashlib
import html
import json
import re

import numpy as np
import pytest
import tomllib
from conftest import ROOT, assert_user_error, invoke, train_tiny_run

from tinytf.inspect.attend import AttentionMap, AttentionReport
from tinytf.inspect.heads import HeadReport, HeadScore, render_text
from tinytf.inspect.viewer import MIN_LINE, WEIGHT_SCALE, attention_page, page_data, stored_weights
from tinytf.run.setup import load_config

HOSTILE_TOKENS = [
    "</script><script>window.pwned=1</script>",
    "<img src=x onerror=window.pwned=2>",
    "<!--",
    "&amp;",
    '"quoted"',
    "line\nbreak",
    "\u2028",
]


def softmax_rows(logits, mask=None):
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def made_report(tokens, source=None, layers=2, heads=3, seed=0, sharp=3.0):
    """A hand-made AttentionReport shaped as tinytf's: a decoder (causal self-attention)
    over `tokens`, or an encoder-decoder when `source` is given (encoder self over the
    source, decoder self and cross). Weights: softmax of seeded random logits."""
    rng = np.random.default_rng(seed)
    maps = []

    def add(stack, layer, kind, queries, keys, causal):
        mask = np.tril(np.ones((len(queries), len(keys)), dtype=bool)) if causal else None
        weights = softmax_rows(sharp * rng.standard_normal((heads, len(queries), len(keys))), mask)
        maps.append(AttentionMap(stack, layer, kind, list(queries), list(keys), weights))

    for layer in range(layers):
        if source is not None:
            add("encoder", layer, "self", source, source, causal=False)
    for layer in range(layers):
        add("decoder", layer, "self", tokens, tokens, causal=True)
        if source is not None:
            add("decoder", layer, "cross", tokens, source, causal=False)
    return AttentionReport(list(tokens), None if source is None else list(source), None, maps)


def made_head_report(report):
    """Scores for every head of `report`: head h of each map scores 0.3 + 0.2 h on `previous`."""
    heads = [
        HeadScore(
            m.stack,
            m.layer,
            m.kind,
            m.first_head + h,
            {"self": 0.1, "previous": 0.3 + 0.2 * h, "first": None},
            entropy=0.5 + h,
        )
        for m in report.maps
        for h in range(m.n_heads)
    ]
    return HeadReport(inputs=1, patterns=["self", "previous", "first"], heads=heads)


def page_json(page):
    """The data element of a written page, parsed."""
    (text,) = re.findall(r'<script type="application/json" id="tinytf-data">(.*?)</script>', page, re.S)
    return json.loads(text)


def unstored(rows, keys):
    """The page's weights (integer rows without trailing zeros) back as floats (T_q, T_k)."""
    return np.array([row + [0] * (keys - len(row)) for row in rows], dtype=float) / WEIGHT_SCALE


# ---- what the page holds


def test_the_data_is_the_report_rounded_to_three_digits():
    report = made_report(["<bos>", "a", "b", "c", "a"], source=["x", "y", "z"])
    data = page_json(attention_page(report))
    assert [m["name"] for m in data["attention"]] == [m.name for m in report.maps]
    for stored, attention_map in zip(data["attention"], report.maps, strict=True):
        assert stored["query_tokens"] == attention_map.query_tokens and stored["key_tokens"] == attention_map.key_tokens
        weights = np.stack([unstored(rows, len(attention_map.key_tokens)) for rows in stored["weights"]])
        np.testing.assert_allclose(weights, np.round(attention_map.weights, 3), atol=1e-12)
    assert data["tokens"] == report.tokens and data["source_tokens"] == report.source_tokens


def test_rows_stop_at_their_last_non_zero_weight():
    weights = np.array([[[1.0, 0.0, 0.0], [0.4996, 0.5004, 0.0], [0.0004, 0.0, 0.0]]])
    assert stored_weights(weights) == [[[1000], [500, 500], []]]
    with pytest.raises(ValueError, match="finite"):
        stored_weights(np.full((1, 2, 2), np.nan))


def test_each_side_names_the_sequence_it_reads():
    seq2seq = page_data(made_report(["<bos>", "1", "2"], source=["2", "1"], layers=1))
    assert {m["name"]: (m["query_side"], m["key_side"]) for m in seq2seq["attention"]} == {
        "encoder.0.self": ("source", "source"),
        "decoder.0.self": ("target", "target"),
        "decoder.0.cross": ("target", "source"),
    }
    decoder = page_data(made_report(["<bos>", "a"], layers=1))
    assert [(m["query_side"], m["key_side"]) for m in decoder["attention"]] == [("tokens", "tokens")]


def test_head_scores_and_facts_are_on_the_page():
    report = made_report(["<bos>", "a", "b"], layers=2, heads=2)
    facts = {"input": "a b", "run": "runs/x", "checkpoint": "best (step 3)"}
    page = attention_page(report, made_head_report(report), title="T", facts=facts, heads_note="scored on this input")
    data = page_json(page)
    assert data["facts"] == [["input", "a b"], ["run", "runs/x"], ["checkpoint", "best (step 3)"]]
    assert data["heads"]["decoder.1.self.0"]["label"] == "mixed"  # previous 0.3: under the label's threshold
    scores = {"self": 0.1, "previous": 0.5, "first": None}
    assert data["heads"]["decoder.1.self.1"] == {"label": "previous", "scores": scores, "entropy": 1.5}
    assert data["patterns"] == ["self", "previous", "first"] and data["heads_note"] == "scored on this input"


def test_a_selected_head_keeps_its_model_index():
    report = made_report(["<bos>", "a", "b"], layers=2, heads=4).select(layer=1, head=2)
    data = page_json(attention_page(report, made_head_report(made_report(["<bos>", "a", "b"], layers=2, heads=4))))
    assert [(m["name"], m["first_head"], len(m["weights"])) for m in data["attention"]] == [("decoder.1.self", 2, 1)]
    assert list(data["heads"]) == ["decoder.1.self.2"]  # only the heads the page shows


# ---- one file, nothing from elsewhere, user text kept as text


def test_the_page_is_one_file_that_allows_only_its_own_style_and_script():
    page = attention_page(made_report(["<bos>", "a", "b"]))
    (csp,) = re.findall(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert "default-src 'none'" in csp and "unsafe" not in csp
    (style,) = re.findall(r"<style>(.*?)</style>", page, re.S)
    (script,) = re.findall(r"<script>(.*?)</script>", page, re.S)
    for inline in (style, script):
        digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in csp
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|@import|url\(", page.replace(script, ""))
    assert "{{" not in page


def test_tokens_cannot_break_out_of_the_data_element():
    report = made_report(["<bos>", *HOSTILE_TOKENS], source=HOSTILE_TOKENS[::-1], layers=1)
    page = attention_page(
        report, title="</title><script>window.pwned=3</script>", facts={"input": "</script>", "<b>": "&lt;"}
    )
    (data_text,) = re.findall(r'id="tinytf-data">(.*?)</script>', page, re.S)
    assert "<" not in data_text and ">" not in data_text and "&" not in data_text
    data = page_json(page)
    assert data["tokens"] == ["<bos>", *HOSTILE_TOKENS] and data["facts"] == [["input", "</script>"], ["<b>", "&lt;"]]
    assert page.count("<script") == 2 and "<title>&lt;/title&gt;&lt;script&gt;" in page


def test_a_page_for_the_quickstart_model_at_its_longest_input_stays_under_a_megabyte():
    # The quickstart's shape at its model.max_len, with weights as spread as an untrained
    # model's: the largest page it can write.
    model = load_config(ROOT / "configs" / "quickstart.yaml").model
    report = made_report([f"w{i}" for i in range(model.max_len)], layers=model.n_layers, heads=model.n_heads, sharp=1.0)
    size = len(attention_page(report).encode("utf-8"))
    assert size < 1_000_000, size


def test_the_page_assets_ship_with_the_package():
    # A non-editable install copies only the package data pyproject.toml names.
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    globs = package_data["tinytf.inspect"]
    folder = ROOT / "tinytf" / "inspect"
    assets = sorted(path.relative_to(folder) for path in (folder / "viewer_page").iterdir())
    assert {"page.html", "viewer.css", "viewer.js"} <= {path.name for path in assets}
    assert all(any(path.match(glob) for glob in globs) for path in assets), (assets, globs)


# ---- the command line


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny trained sort decoder (answers questions, so --target applies)."""
    folder = tmp_path_factory.mktemp("viewer")
    train_tiny_run(folder, train={"steps": 4, "eval_every": 4, "checkpoint_every": 4}, log={"attention_every": 100})
    return folder / "runs"


def test_attend_html_writes_the_next_free_attention_html(runs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = invoke("attend", "3 1 2", "--runs-dir", runs.resolve(), "--format", "html")
    second = invoke("attend", "3 1 2", "--runs-dir", runs.resolve(), "--format", "html")
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    assert first.stdout.splitlines() == [
        "wrote attention.html",
        f"open it in a browser (it needs no network): {(tmp_path / 'attention.html').as_uri()}",
    ]
    assert second.stdout.startswith("wrote attention-2.html\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["attention-2.html", "attention.html"]
    data = page_json((tmp_path / "attention.html").read_text(encoding="utf-8"))
    facts = dict(data["facts"])
    assert facts["input"] == "3 1 2" and facts["checkpoint"] == "best (step 4)" and facts["run"].startswith(str(runs))
    assert "answer" in facts  # a sort model answers
    assert set(data["heads"]) == {f"decoder.0.self.{h}" for h in range(2)} and "this input" in data["heads_note"]
    assert "sort" in data["patterns"]


def test_attend_html_with_a_target_says_why_it_has_no_head_scores(runs, tmp_path):
    out = tmp_path / "page.html"
    result = invoke("attend", "3 1 2", "--runs-dir", runs, "--format", "html", "--target", "1 2 3", "--out", out)
    assert result.exit_code == 0, result.output
    data = page_json(out.read_text(encoding="utf-8"))
    assert data["heads"] == {} and "--target" in data["heads_note"]
    assert dict(data["facts"])["target (--target)"] == "1 2 3"


def test_attend_html_shows_the_selected_layer_and_head(runs, tmp_path):
    out = tmp_path / "one.html"
    result = invoke("attend", "3 1 2", "--runs-dir", runs, "--format", "html", "--head", "1", "--out", out)
    assert result.exit_code == 0, result.output
    data = page_json(out.read_text(encoding="utf-8"))
    assert [(m["name"], m["first_head"], len(m["weights"])) for m in data["attention"]] == [("decoder.0.self", 1, 1)]


def test_attend_html_out_errors_are_one_line(runs, tmp_path):
    assert_user_error(
        invoke("attend", "1 2 3", "--runs-dir", runs, "--format", "html", "--out", tmp_path / "a.png"),
        "a .png name for --format html",
    )
    assert_user_error(
        invoke("attend", "1 2 3", "--runs-dir", runs, "--format", "html", "--out", tmp_path), "is a folder"
    )
    missing = tmp_path / "no" / "such" / "page.html"
    assert_user_error(invoke("attend", "1 2 3", "--runs-dir", runs, "--format", "html", "--out", missing), "no folder")
    assert sorted(tmp_path.iterdir()) == []


def test_attend_html_of_an_encoder_decoder_reads_source_and_target(tmp_path):
    run_dir = train_tiny_run(
        tmp_path,
        model={"arch": "encoder-decoder"},
        train={"steps": 2, "eval_every": 2, "checkpoint_every": 2},
        log={"attention_every": 100},
    )
    out = tmp_path / "seq2seq.html"
    assert invoke("attend", "3 1 2", "--run", run_dir, "--format", "html", "--out", out).exit_code == 0
    data = page_json(out.read_text(encoding="utf-8"))
    by_name = {m["name"]: m for m in data["attention"]}
    assert by_name["encoder.0.self"]["query_tokens"] == by_name["encoder.0.self"]["key_tokens"] == data["source_tokens"]
    assert by_name["decoder.0.cross"]["query_tokens"] == data["tokens"]
    assert by_name["decoder.0.cross"]["key_tokens"] == data["source_tokens"]
    assert "decoder.0.cross.0" in data["heads"]


def test_min_line_is_the_documented_one_percent():
    assert MIN_LINE / WEIGHT_SCALE == 0.01


# ---- in a notebook


def test_a_report_shows_itself_in_a_notebook_as_the_offline_viewer():
    report = made_report(["<bos>", *HOSTILE_TOKENS], layers=1)
    shown = report._repr_html_()
    (srcdoc,) = re.findall(r'<iframe srcdoc="([^"]*)" sandbox="allow-scripts" style="[^"]*"></iframe>', shown)
    assert shown.count("<") == 2  # the iframe's tags alone: the page inside is one escaped attribute
    assert html.unescape(srcdoc) == attention_page(report, title=f"Attention: {' '.join(report.tokens)}")
    assert page_json(html.unescape(srcdoc))["tokens"] == report.tokens


def test_a_head_report_shows_its_table_in_a_notebook():
    heads = made_head_report(made_report(["<bos>", "a", "<b>"]))
    shown = heads._repr_html_()
    assert shown.startswith("<pre") and shown.endswith("</pre>")
    assert html.unescape(re.sub(r"^<pre[^>]*>|</pre>$", "", shown)) == render_text(heads)
