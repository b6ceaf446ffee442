"""Induction heads forming on a laptop: the loss on the repeat and the best heads' scores
over training, for configs/induction-decoder.yaml (2 attention-only layers) and
configs/induction-decoder-1layer.yaml (the same with one layer, which cannot form one).

    python scripts/induction_story.py                       # prints a table, draws docs/induction.png
    python scripts/induction_story.py --every 50 --out induction.png

Held-out loss and head scores are taken every `--every` steps (on the first 64 held-out
sequences, as TensorBoard's `heads/best/<pattern>` curves are). Each model trains to its
config's `train.steps` or `stop_at_accuracy`; the 1-layer one is cut at the step the
2-layer one stopped at, times 1.5, so that the two curves share an axis.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import tinytf
from tinytf.training.loggers import RecordingLogger

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    "2 layers": ROOT / "configs/induction-decoder.yaml",
    "1 layer": ROOT / "configs/induction-decoder-1layer.yaml",
}


def train_and_record(config_path: Path, every: int, steps: int | None = None) -> dict:
    overrides = [f"log.attention_every={every}", f"train.eval_every={every}", "train.device=cpu"]
    if steps is not None:
        overrides.append(f"train.steps={steps}")
    config = tinytf.load_config(config_path, overrides=overrides)
    log = RecordingLogger()
    with tempfile.TemporaryDirectory() as temp:
        start = time.perf_counter()
        result = tinytf.train(config, runs_dir=temp, loggers=[log])
        seconds = time.perf_counter() - start
    losses = {step: values["loss"] for step, split, values in log.of("metrics") if split == "val"}
    curves: dict[str, dict[int, float]] = {"induction": {}, "previous": {}}
    for step, report in log.of("heads"):
        for pattern in curves:
            best = report.best(pattern)
            curves[pattern][step] = best.scores[pattern] if best is not None else float("nan")
    final = log.of("heads")[-1][1]
    return {
        "losses": losses,
        "curves": curves,
        "final": final,
        "result": result,
        "seconds": seconds,
        "steps": result.step,
    }


def best_in_layer(report, pattern: str, layer: int) -> tuple[str, float]:
    head = report.best(pattern, layer=layer)
    return ("-", float("nan")) if head is None else (head.name, head.scores[pattern])


def draw(runs: dict[str, dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (loss_axis, score_axis) = plt.subplots(2, 1, figsize=(7, 5.5), sharex=True, layout="constrained")
    for (label, run), colour in zip(runs.items(), ("tab:blue", "tab:orange"), strict=True):
        steps = sorted(run["losses"])
        loss_axis.plot(steps, [run["losses"][s] for s in steps], color=colour, label=label)
        for pattern, style in (("induction", "-"), ("previous", ":")):
            curve = run["curves"][pattern]
            points = sorted(curve)
            score_axis.plot(points, [curve[s] for s in points], style, color=colour, label=f"{label}: best {pattern}")
    loss_axis.set_ylabel("held-out loss on the repeat (nats)")
    loss_axis.set_yscale("log")
    loss_axis.legend()
    loss_axis.set_title("Induction heads forming: a random sequence, then the same again")
    score_axis.set_ylabel("best head's score")
    score_axis.set_xlabel("training step")
    score_axis.set_ylim(0, 1.02)
    score_axis.legend(fontsize="small", loc="lower right")
    figure.savefig(out, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=50, help="steps between two measurements")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/induction.png")
    parser.add_argument("--steps", type=int, default=None, help="cap both runs' steps (a quick look)")
    args = parser.parse_args()

    runs = {"2 layers": train_and_record(CONFIGS["2 layers"], args.every, args.steps)}
    one_layer_steps = args.steps or int(runs["2 layers"]["steps"] * 1.5)
    runs["1 layer"] = train_and_record(CONFIGS["1 layer"], args.every, one_layer_steps)

    print(
        f"{'model':<9} {'steps':>6} {'time':>7} {'repeat loss':>12} {'seq_acc':>8}  "
        f"{'best previous (layer 0)':<30} {'best induction (last layer)':<30}"
    )
    for label, run in runs.items():
        final = run["final"]
        last_layer = max(h.layer for h in final.heads)
        previous = best_in_layer(final, "previous", 0)
        induction = best_in_layer(final, "induction", last_layer)
        loss = run["losses"][max(run["losses"])]
        print(
            f"{label:<9} {run['steps']:>6} {run['seconds']:>6.1f}s {loss:>12.4f} "
            f"{run['result'].final['seq_acc']:>8.3f}  {previous[0]:<22}{previous[1]:>6.2f}  "
            f"{induction[0]:<22}{induction[1]:>6.2f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    draw(runs, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
