"""The choices and options the `tinytf` commands share (app.py defines the commands)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from tinytf.run.folder import is_checkpoint_name

OverridesOption = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="KEY=VALUE", help="Override a config value, e.g. --set model.d_model=64."),
]
RunOption = Annotated[
    Path | None, typer.Option("--run", help="A run folder. Default: the newest run under --runs-dir.")
]
RunsDirOption = Annotated[Path, typer.Option("--runs-dir", help="Where runs are kept.")]


def _checkpoint_name(value: str) -> str:
    if is_checkpoint_name(value):
        return value
    raise typer.BadParameter(f"{value!r} is not best, last or a snapshot's step-K (e.g. step-100)")


CheckpointOption = Annotated[
    str,
    typer.Option(
        "--checkpoint",
        metavar="best|last|step-K",
        callback=_checkpoint_name,
        help="best: best validation score; last: latest step; step-K: the snapshot of step K "
        "(train.snapshot_every; tinytf checkpoints lists them).",
    ),
]
OverTrainingOption = Annotated[
    bool,
    typer.Option(
        "--over-training",
        help="Every snapshot of the run (train.snapshot_every), a row each with its step, "
        "training loss and held-out accuracy.",
    ),
]


OutOption = Annotated[Path | None, typer.Option("--out", help="Write to this file instead of the terminal.")]


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"
    mps = "mps"


class AttendFormat(str, Enum):
    table = "table"
    json = "json"
    npz = "npz"
    png = "png"
    html = "html"


class TableFormat(str, Enum):
    """A table for people, or JSON for programs (heads, attribute)."""

    table = "table"
    json = "json"


class Ablation(str, Enum):
    zero = "zero"
    mean = "mean"


class PatchBy(str, Enum):
    head = "head"
    head_position = "head-position"
    layer_position = "layer-position"


class PatchAt(str, Enum):
    all = "all"
    last = "last"
    deciding = "deciding"


class PatchFormat(str, Enum):
    table = "table"
    json = "json"
    png = "png"


class FigureFormat(str, Enum):
    """A table, JSON, CSV, or a png figure (heads, circuits)."""

    table = "table"
    json = "json"
    csv = "csv"
    png = "png"


class ExportFormat(str, Enum):
    safetensors = "safetensors"
    transformer_lens = "transformer-lens"


class PredictFormat(str, Enum):
    text = "text"
    json = "json"
