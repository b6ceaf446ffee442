"""Where training reports go. The training loop never prints: it calls these.

`Logger` is the interface (every method a no-op, so an implementation overrides only
what it cares about). Implementations: `MetricsFileLogger` (metrics.jsonl),
`TensorBoardLogger` (scalars, attention images, text samples, hparams) and
`ProgressBarLogger` (a tqdm bar on the terminal, used by the CLI).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tinytf.attend import AttentionReport
    from tinytf.config import Config


class Logger:
    def start(self, run_dir: Path, config: Config, start_step: int) -> None:
        """Training begins (or resumes) at `start_step` in `run_dir`."""

    def step(self, step: int) -> None:
        """Step `step` is done. Called every step: keep it cheap."""

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        """`split` is "train" or "val"; values: loss, token_acc, seq_acc, lr, tokens_per_s..."""

    def attention(self, step: int, sample: str, report: AttentionReport) -> None:
        """The attention maps of a fixed sample input at this step."""

    def text(self, step: int, tag: str, markdown: str) -> None:
        """A text sample, e.g. predictions next to targets."""

    def finish(self, step: int, config: Config, final: dict[str, float]) -> None:
        """Training ended (completed, stopped early or interrupted) with these metrics."""


class MetricsFileLogger(Logger):
    """Appends one JSON object per logged point to `metrics.jsonl`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        with open(self.path, "a", encoding="utf-8") as file:
            file.write(json.dumps({"step": step, "split": split, **values}) + "\n")


class TensorBoardLogger(Logger):
    """Scalars as `<split>/<metric>`, attention maps as images under
    `attention/<sample>/<stack>.<layer>.<kind>`, predictions as text, config as hparams."""

    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        from tinytf.viz import LayerImages  # matplotlib itself loads only when a figure is drawn

        self.writer = SummaryWriter(log_dir=str(log_dir))
        self.images = LayerImages()

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(f"{split}/{key}", value, step)

    def attention(self, step: int, sample: str, report: AttentionReport) -> None:
        for attention_map in report.maps:
            tag = f"attention/{sample}/{attention_map.name}"
            self.writer.add_image(tag, self.images.render(tag, attention_map), step, dataformats="HWC")

    def text(self, step: int, tag: str, markdown: str) -> None:
        self.writer.add_text(tag, markdown, step)

    def finish(self, step: int, config: Config, final: dict[str, float]) -> None:
        from torch.utils.tensorboard.summary import hparams

        # Written into this run's own event file (SummaryWriter.add_hparams would make a sub-run).
        metrics = {f"hparam/{key}": value for key, value in final.items()}
        experiment, session_start, session_end = hparams(_flatten(config.to_dict()), metrics)
        for summary in (experiment, session_start, session_end):
            self.writer.file_writer.add_summary(summary)
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()
        self.writer.close()


class ProgressBarLogger(Logger):
    """A tqdm progress bar showing step, loss, accuracy and tokens/s."""

    def __init__(self, total_steps: int) -> None:
        self.total_steps = total_steps
        self.bar = None
        self.postfix: dict[str, str] = {}

    def start(self, run_dir: Path, config: Config, start_step: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=self.total_steps, initial=start_step, unit="step", dynamic_ncols=True, desc=run_dir.name)

    def step(self, step: int) -> None:
        self.bar.update(step - self.bar.n)

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        if split == "train":
            self.postfix.update(loss=f"{values['loss']:.3f}", acc=f"{values['token_acc']:.2f}",
                                tok_s=f"{values['tokens_per_s']:,.0f}")  # fmt: skip
        else:
            self.postfix.update(val_seq_acc=f"{values['seq_acc']:.3f}")
        self.bar.set_postfix(self.postfix, refresh=False)

    def finish(self, step: int, config: Config, final: dict[str, float]) -> None:
        self.bar.close()


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"d_model": 64}} -> {"model.d_model": 64}. TensorBoard's hparams take only
    numbers, strings and bools: None becomes "none", a list such as betas "[0.9, 0.98]"."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        elif isinstance(value, list | tuple):
            flat[f"{prefix}{key}"] = str(list(value))
        else:
            flat[f"{prefix}{key}"] = "none" if value is None else value
    return flat
