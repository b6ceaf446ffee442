"""What an attention image for TensorBoard costs to draw (`tinytf.viz.LayerImages`).

    python scripts/bench_images.py                      # 13 tokens, 4 heads
    python scripts/bench_images.py --tokens 25 --heads 8
    python scripts/bench_images.py --json images.json

Training logs the maps of a few fixed inputs, every layer's, every `log.attention_every`
steps. `LayerImages` draws a figure in full once per set of tick labels (the query and key
tokens) and keeps it as pixels; then it draws only the heatmaps and titles on those. This
times the three cases, medians of `--rounds` calls each, on random weights:
    new tokens     a set of labels it has not drawn: the whole figure, labels included
    next layer     the same tokens as the last map, another layer's weights and titles
    same map       the same layer again at a later step, new weights
The first is what the first attention log of a run pays per input and pair of query and
key tokens (encoder self, decoder self, cross); the other two are every later image.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from tinytf.attend import AttentionMap
from tinytf.viz import LayerImages


def random_map(rng: np.random.Generator, layer: int, tokens: list[str], heads: int) -> AttentionMap:
    weights = rng.random((heads, len(tokens), len(tokens)))  # (H, T_q, T_k)
    return AttentionMap("encoder", layer, "self", tokens, tokens, weights / weights.sum(-1, keepdims=True))


def seconds(images: LayerImages, attention: AttentionMap) -> float:
    start = time.perf_counter()
    images.render(attention)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=13)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON")
    args = parser.parse_args()
    for name in ("tokens", "heads", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    rng = np.random.default_rng(0)
    images = LayerImages()
    images.render(random_map(rng, 0, ["warm-up"], args.heads))  # imports matplotlib, loads the fonts
    times: dict[str, list[float]] = {"new tokens": [], "next layer": [], "same map": []}
    for round_ in range(args.rounds):
        tokens = ["<bos>", *(f"w{round_}.{i}" for i in range(args.tokens - 1))]  # labels not drawn before
        times["new tokens"].append(seconds(images, random_map(rng, 0, tokens, args.heads)))
        times["next layer"].append(seconds(images, random_map(rng, 1, tokens, args.heads)))
        times["same map"].append(seconds(images, random_map(rng, 1, tokens, args.heads)))
    results = {case: 1e3 * statistics.median(values) for case, values in times.items()}
    print(f"one layer's image, {args.heads} heads x {args.tokens} tokens, median of {args.rounds}:")
    for case, ms in results.items():
        print(f"  {case:11s} {ms:7.1f} ms")
    if args.json:
        args.json.write_text(json.dumps({"tokens": args.tokens, "heads": args.heads, "ms": results}, indent=1))


if __name__ == "__main__":
    main()
