"""docs/attention-viewer.png, the attention viewer's screenshot, taken by the browser the
tests use; and the size of the pages the shipped configs can write.

    python scripts/viewer_screenshot.py                      # trains the quickstart first (about 25 s)
    python scripts/viewer_screenshot.py --run runs/quickstart-...
    python scripts/viewer_screenshot.py --sizes configs/quickstart.yaml configs/double-histogram-encoder-decoder.yaml

The screenshot: writes the page with `tinytf attend TEXT --format html` (timed), opens it
from disk in headless Chromium (tests/headless.py: Debian's Chromium through Playwright,
offline, as the browser tests open pages) and saves docs/attention-viewer.png.

--sizes: for each config, an untrained model (its weights spread more evenly than a
trained one's, so its pages are the largest) reads the longest input it accepts (at most
model.max_len tokens); prints the page's size and the time to make it as `attend` does
(attention report, head scores, page), loading the run aside.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Chromium's offline launch lives with the browser tests, which open pages the same way.
sys.path.insert(0, str(ROOT / "tests"))

from headless import chromium, screenshot  # noqa: E402  (tests/ is not a package)

WIDTH = 1600  # wide enough for the quickstart's head table and drawing side by side


def tinytf(*args: str, cwd: Path | None = None) -> str:
    result = subprocess.run([sys.executable, "-m", "tinytf", *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"tinytf {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


def longest_input(framing, max_len: int) -> str:
    """The longest text `framing` accepts for a model of `max_len`: random task symbols."""
    import random

    from tinytf.errors import UserError
    from tinytf.tasks.vocab import SPECIALS

    vocab = framing.vocab
    symbols = [token for token in vocab.tokens if token not in SPECIALS]
    rng = random.Random(0)
    for n in range(max_len, 0, -1):
        text = vocab.join(rng.choice(symbols) for _ in range(n))
        try:
            framing.typed_input(text, max_len)
        except UserError:
            continue
        return text
    raise ValueError("no input fits")


def page_sizes(configs: list[Path]) -> None:
    import torch

    import tinytf
    from tinytf.data.framing import get_framing
    from tinytf.inspect.attend import attention_report
    from tinytf.inspect.heads import head_scores
    from tinytf.inspect.viewer import attention_page
    from tinytf.tasks import get_task

    torch.manual_seed(0)
    for path in configs:
        config = tinytf.load_config(path)
        task = get_task(config.task)
        model = tinytf.build_model(config).eval()
        framing = get_framing(task, config.model.arch)
        text = longest_input(framing, config.model.max_len)
        start = time.perf_counter()
        report = attention_report(model, framing, text)
        page = attention_page(report, head_scores(model, framing, text=text), facts={"input": text})
        seconds = time.perf_counter() - start
        weights = sum(m.weights.size for m in report.maps)
        tokens = len(report.source_tokens or report.tokens)
        print(
            f"{path}: {config.model.n_layers} layers x {config.model.n_heads} heads, {len(report.maps)} attentions, "
            f"input of {tokens} tokens, {weights:,} weights: {len(page.encode()):,} bytes "
            f"in {seconds:.2f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a trained run (default: train the quickstart in a temporary folder)")
    parser.add_argument("--text", default="the cat sat on the mat")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "attention-viewer.png")
    parser.add_argument("--sizes", type=Path, nargs="+", metavar="CONFIG", help="measure pages instead (see above)")
    args = parser.parse_args()
    if args.sizes:
        page_sizes(args.sizes)
        return

    with tempfile.TemporaryDirectory() as temp:
        temp = Path(temp)
        run, cwd = args.run, None
        if run is None:  # trained in temp/runs, and named as the page shows it: runs/quickstart-...
            tinytf("train", str(ROOT / "configs" / "quickstart.yaml"), cwd=temp)
            (run,) = (path.relative_to(temp) for path in (temp / "runs").iterdir())
            cwd = temp
        page_path = temp / "attention.html"
        start = time.perf_counter()
        tinytf("attend", args.text, "--run", str(run), "--format", "html", "--out", str(page_path), cwd=cwd)
        seconds = time.perf_counter() - start
        print(f"{page_path.stat().st_size:,} bytes, written in {seconds:.2f} s (the whole command)")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with chromium() as browser:
            screenshot(browser, page_path, args.out, width=WIDTH)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
