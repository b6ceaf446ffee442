"""Looking vs causing on the quickstart model, over seeds: for each construction of the
sentences, Spearman's rank correlation across heads between the heads' attention scores
(on 200 held-out inputs) and the shares of the answer they restore when patched (200
minimal pairs), patched at every position, at the last one and at the deciding word.

    python scripts/looking_causing.py                  # seeds 0 1 2: the table of docs/looking-inside.md
    python scripts/looking_causing.py --seeds 0 --steps 300

Prints a Markdown table, each cell the seeds' values in order; `--keep DIR` keeps the runs.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import tinytf
from tinytf.cli.commands import first_held_out
from tinytf.inspect.compare import compare
from tinytf.inspect.patching import AT
from tinytf.run.load import load_run
from tinytf.tasks import CONSTRUCTIONS

ROOT = Path(__file__).resolve().parents[1]
PLACES = {"all": "patched at every position", "last": "at the last position", "deciding": "at the deciding word"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="cap train.steps (a quick look)")
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--keep", type=Path, default=None, help="train the runs in this folder, and keep them")
    args = parser.parse_args()

    rho: dict[str, dict[str, list[str]]] = {c: {at: [] for at in AT} for c in CONSTRUCTIONS["sentences"]}
    with tempfile.TemporaryDirectory() as temp:
        for seed in args.seeds:
            overrides = [f"seed={seed}", "train.device=cpu", *([f"train.steps={args.steps}"] if args.steps else [])]
            config = tinytf.load_config(ROOT / "configs/quickstart.yaml", overrides=overrides)
            run = load_run(tinytf.train(config, runs_dir=args.keep or temp, name=f"seed-{seed}").run_dir)
            held_out = first_held_out(run, None)[:200]
            for construction, row in rho.items():
                pairs = run.task.held_out_pairs(construction, args.pairs, seed=seed)
                found = compare(run.model, run.framing, pairs, held_out, construction).spearman["held_out"]
                for at in AT:
                    row[at].append("-" if found[at].rho is None else f"{found[at].rho:.2f}")
    seeds = " / ".join(map(str, args.seeds))
    print(f"| construction | {' | '.join(f'seeds {seeds}, {PLACES[at]}' for at in AT)} |")
    print("|---" * (len(AT) + 1) + "|")
    for construction, row in rho.items():
        print(f"| {construction} | {' | '.join(' / '.join(row[at]) for at in AT)} |")


if __name__ == "__main__":
    main()
