"""Grokking, read from trained runs: when each memorised its training set and when it
generalised, and the figure of docs/grokking.md.

    tinytf train configs/grokking.yaml --name grokking                  # seed 0
    tinytf train configs/grokking.yaml --name grokking --set seed=1     # more seeds
    tinytf train configs/grokking.yaml --name no-decay --set train.weight_decay=0
    python scripts/grokking.py runs/grokking-* --control runs/no-decay-* --out docs/grokking.png

For each run, from its metrics.jsonl: s1, the first evaluation at which 99% of the training
set is answered right (`train_set` seq_acc), and the held-out accuracy then; s2, the first
at which 99% of the held-out set is. A run groks when held-out accuracy at s1 is under 50%
and s2 >= 5 x s1. With --check the exit status is 1 unless every run (controls aside) groks.

The figure: training-set and held-out accuracy against the step, on a log axis (controls
dashed); the weight norm; the Fourier spectrum of the first run's number embedding at s1
and at its last evaluation (tinytf/inspect/fourier.py).

With --attention, for each run's best checkpoint: how the query that predicts c (the task's
`operands` pattern) splits each head's attention between a and b over the whole held-out
set: the mean share on a, on b, and on the larger of the two (median and range over the
sums). This part loads the model, so it imports torch.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tinytf.cli.output import check_out, write_png
from tinytf.errors import UserError
from tinytf.run.folder import RunFolder
from tinytf.run.setup import read_saved_config

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TARGET = 0.99  # "reaches": this share of the set answered right
STILL_GUESSING = 0.5  # held-out accuracy under this at s1: the run has memorised, not generalised
DELAY = 5  # s2 at least this many times s1


@dataclass
class Run:
    folder: Path
    seed: int
    accuracy: dict[str, dict[int, float]]  # "train_set" / "val" -> step -> seq_acc
    weight_norm: dict[int, float]
    spectra: dict[int, list[float]]

    @staticmethod
    def read(folder: Path) -> Run:
        """The run in `folder`: a `UserError` for anything but a run of a task with a fixed training set."""
        run = RunFolder(folder)
        records = run.read_metrics()
        accuracy = {split: _accuracies(run, records, split) for split in ("train_set", "val")}
        if not accuracy["train_set"]:
            raise UserError(f"{folder}: no train_set metrics; is it a run of a task with a fixed training set?")
        if not accuracy["val"]:
            raise UserError(f"{folder}: no held-out (val) metrics yet")
        seed = read_saved_config(run.config).seed
        weight_norm = {r["step"]: r["weight_norm"] for r in records if r.get("split") == "train"}
        spectra = {r["step"]: r["norms"] for r in records if r.get("split") == "fourier"}
        return Run(folder, seed, accuracy, weight_norm, spectra)

    def first_reaching(self, split: str) -> int | None:
        return next((step for step, acc in sorted(self.accuracy[split].items()) if acc >= TARGET), None)

    @property
    def s1(self) -> int | None:
        return self.first_reaching("train_set")

    @property
    def s2(self) -> int | None:
        return self.first_reaching("val")

    def groks(self) -> bool:
        s1, s2 = self.s1, self.s2
        return s1 is not None and s2 is not None and self.accuracy["val"][s1] < STILL_GUESSING and s2 >= DELAY * s1


def _accuracies(run: RunFolder, records: list[dict], split: str) -> dict[int, float]:
    """step -> held-out (or training-set) exact match of the `split` records; a `UserError`
    naming the step of one that is not a number."""
    found = {}
    for record in records:
        if record.get("split") != split:
            continue
        value = record.get("seq_acc")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UserError(f"{run.metrics}: the {split} record of step {record['step']} has seq_acc {value!r}")
        found[record["step"]] = value
    return found


def table(runs: list[Run], controls: list[Run]) -> str:
    rows = [
        "| run | seed | s1 (train 99%) | held-out at s1 | s2 (held-out 99%) | s2 / s1 | groks |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for i, run in enumerate([*runs, *controls]):
        s1, s2 = run.s1, run.s2
        held_out = f"{run.accuracy['val'][s1]:.1%}" if s1 is not None else "-"
        ratio = f"{s2 / s1:.1f}" if s1 and s2 else "-"
        last = max(run.accuracy["val"])
        reached = str(s2) if s2 is not None else f"not by {last} ({run.accuracy['val'][last]:.1%})"
        name = run.folder.name + (" (control)" if i >= len(runs) else "")
        groks = "yes" if run.groks() else "no"
        rows.append(f"| {name} | {run.seed} | {s1 or '-'} | {held_out} | {reached} | {ratio} | {groks} |")
    return "\n".join(rows)


def inside(runs: list[Run], controls: list[Run]) -> str:
    """What the page says changes as each run groks: held-out accuracy 1,000 steps before s2,
    the training set's lowest accuracy after s1, the weight norm (at the first evaluation, at
    s1, its highest, at the last evaluation), the Fourier spectrum's top-5 share (at the first
    evaluation, at s1, at the last), the strongest frequencies at the last, and held-out
    accuracy over the run's second half. "-" where a run has no s1 or s2."""
    from tinytf.inspect.fourier import top_share  # (imports torch)

    rows = [
        "| run | held-out 1,000 steps before s2 | lowest training set after s1 | weight norm: first, s1, "
        "highest, last | top-5 share: first, s1, last | strongest frequencies, last | held-out, second half: "
        "median, best, evaluations under 95% |",
        "|---|---:|---:|---|---|---|---|",
    ]
    for run in [*runs, *controls]:
        val, train_set = run.accuracy["val"], run.accuracy["train_set"]
        s1, s2, last = run.s1, run.s2, max(val)
        before = _at_or_before(val, s2 - 1000) if s2 is not None else None
        after_s1 = [acc for step, acc in train_set.items() if s1 is not None and step > s1]
        norms = [_at_or_before(run.weight_norm, step) for step in (min(val), s1)]
        norms += [max(run.weight_norm.values(), default=None), _at_or_before(run.weight_norm, last)]
        spectra = [_at_or_before(run.spectra, step) for step in (min(val), s1, last)]
        shares = [top_share(spectrum) if spectrum else None for spectrum in spectra]
        strongest = sorted(range(len(spectra[-1] or [])), key=lambda k: -spectra[-1][k])[:5]
        half = sorted(acc for step, acc in val.items() if step > last / 2)
        late = f"{half[len(half) // 2]:.1%}, {half[-1]:.1%}, {sum(a < 0.95 for a in half)} of {len(half)}"
        cells = [
            run.folder.name,
            _percent(before),
            _percent(min(after_s1, default=None)),
            ", ".join(f"{n:.1f}" if n is not None else "-" for n in norms),
            ", ".join(_percent(share) for share in shares),
            ", ".join(map(str, strongest)) or "-",
            late,
        ]
        rows.append(f"| {' | '.join(cells)} |")
    return "\n".join(rows)


def _at_or_before(series: dict, step: int | None):
    """The value of `series` (step -> value) at the last step at or before `step`; None if none."""
    steps = [s for s in series if step is not None and s <= step]
    return series[max(steps)] if steps else None


def _percent(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "-"


def grokking_figure(runs: list[Run], controls: list[Run]) -> Figure:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(13, 3.8), layout="constrained")
    accuracy_ax, norm_ax, spectrum_ax = figure.subplots(1, 3)
    for i, run in enumerate([*runs, *controls]):
        control = i >= len(runs)
        style = "--" if control else "-"
        first_of_its_kind = i in (0, len(runs))  # one legend entry for the runs, one for the controls
        kind = "weight decay 0" if control else "weight decay on"
        for split, color, name in (("train_set", "tab:blue", "training set"), ("val", "tab:orange", "held-out")):
            steps = sorted(run.accuracy[split])
            accuracy = [run.accuracy[split][s] for s in steps]
            label = f"{name}, {kind}" if first_of_its_kind else None
            accuracy_ax.plot(steps, accuracy, style, color=color, alpha=0.7, lw=1, label=label)
        steps = sorted(run.weight_norm)
        norm_ax.plot(
            steps,
            [run.weight_norm[s] for s in steps],
            style,
            color="tab:grey" if control else "tab:green",
            alpha=0.7,
            lw=1,
            label=kind if first_of_its_kind else None,
        )
    seeds = ", ".join(str(run.seed) for run in runs)
    title = f"accuracy, seed{'s' * (len(runs) > 1)} {seeds}"
    accuracy_ax.set(xscale="log", xlabel="step", ylabel="accuracy (exact answer)", title=title)
    accuracy_ax.legend(fontsize=7)
    norm_ax.set(xscale="log", xlabel="step", ylabel="norm of all weights", title="weight norm")
    norm_ax.legend(fontsize=7)
    first = runs[0]
    for step, color in ((first.s1, "tab:blue"), (max(first.spectra, default=None), "tab:orange")):
        if step is None or step not in first.spectra:
            continue
        norms = first.spectra[step]
        spectrum_ax.bar(range(len(norms)), norms, color=color, alpha=0.6, label=f"step {step}")
    spectrum_ax.set(xlabel="frequency k", ylabel="embedding norm", title=f"Fourier spectrum, seed {first.seed}")
    if first.spectra:
        spectrum_ax.legend(fontsize=7)
    return figure


def operand_attention(folder: Path) -> str:
    """Each head's attention from the query that predicts c to a and to b, over the run's
    held-out set (its best checkpoint): mean share on a, on b, and the larger of the two per
    sum, its median and range."""
    import torch

    import tinytf
    from tinytf.data.heldout import TaskData
    from tinytf.model.names import act_name, head_name

    run = tinytf.load_run(folder)
    if "operands" not in run.task.alignment_patterns:
        raise UserError(f"{folder}: --attention reads a run of modular-add, not of {run.task.name}")
    held_out = TaskData(run.task, run.config.seed).held_out
    batch = run.framing.frame(held_out)
    with torch.no_grad():
        _, attention = run.model(**batch.model_inputs(), return_attention=True)
    stack, kind = run.framing.alignment_attention
    shares = []  # per example: (n_layers, H, 2), the attention on a and on b
    for i in range(len(held_out)):
        source, target = held_out.example(i)
        maps = [attention[act_name(stack, layer, kind)][i] for layer in range(len(getattr(run.model, stack).layers))]
        (query, a), (_, b) = run.framing.alignments(source, target, *maps[0].shape[-2:])["operands"].pairs
        shares.append(torch.stack([m[:, query, [a, b]] for m in maps]))
    shares = torch.stack(shares)  # (N, n_layers, H, 2)
    larger = shares.max(dim=-1).values  # (N, n_layers, H)
    lines = [
        f"{folder}: the query that predicts c, over {len(held_out):,} held-out sums",
        f"{'head':<{len(stack) + len(kind) + 6}}  on a  on b  on the larger: median (range)",
    ]
    for layer in range(shares.size(1)):
        for head in range(shares.size(2)):
            on_a, on_b = shares[:, layer, head].mean(dim=0).tolist()
            big = larger[:, layer, head]
            lines.append(
                f"{head_name(act_name(stack, layer, kind), head)}  {on_a:.2f}  {on_b:.2f}  "
                f"{big.median():.2f} ({big.min():.2f}-{big.max():.2f})"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders of configs/grokking.yaml")
    parser.add_argument("--control", nargs="*", type=Path, default=[], help="runs meant not to grok (weight decay 0)")
    parser.add_argument("--out", type=Path, help="draw the figure into this PNG")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every run groks")
    parser.add_argument("--inside", action="store_true", help="weight norm, spectrum, held-out accuracy over time")
    parser.add_argument("--attention", action="store_true", help="each head's attention on a and b (loads the model)")
    args = parser.parse_args(argv)
    try:
        check_out(args.out, "png", ("png",), "grokking.png")  # before anything is read
        runs, controls = [Run.read(f) for f in args.runs], [Run.read(f) for f in args.control]
    except UserError as err:  # ConfigError too: a config.yaml missing or unreadable
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(table(runs, controls))
    if args.inside:
        print(f"\n{inside(runs, controls)}")
    try:
        for run in runs if args.attention else []:
            print(f"\n{operand_attention(run.folder)}")
    except UserError as err:  # no best checkpoint yet, or not a run of modular-add
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.out is not None:
        try:
            write_png(args.out, grokking_figure(runs, controls), dpi=110)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"figure: {args.out}")
    return 1 if args.check and not all(run.groks() for run in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
