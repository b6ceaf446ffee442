"""`tinytf checkpoints`: what a run holds to look at, each a name for --checkpoint."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tinytf.run.checkpoint import CheckpointError, load_checkpoint
from tinytf.run.folder import RunFolder, snapshot_name


@dataclass(frozen=True)
class Held:
    name: str  # best, last, step-<k>
    bytes: int
    step: int | None  # None: the file could not be read (`problem` says why)
    train_loss: float | None = None  # a snapshot's
    problem: str | None = None


@dataclass
class CheckpointList:
    run_dir: Path
    held: list[Held]
    note: str | None = None

    def to_text(self) -> str:
        """A line per checkpoint, then the snapshots' count and size."""
        lines = [f"run {self.run_dir}", f"{'checkpoint':<12} {'step':>8} {'size':>9}  training loss"]
        for held in self.held:
            step = "?" if held.step is None else str(held.step)
            after = held.problem if held.problem is not None else _loss(held.train_loss)
            lines.append(f"{held.name:<12} {step:>8} {_size(held.bytes):>9}  {after}")
        snapshots = [held for held in self.held if held.name not in ("best", "last")]
        total = sum(held.bytes for held in snapshots)
        lines.append(f"{len(snapshots)} snapshots, {_size(total)} in all" if snapshots else "no snapshots")
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({"run": str(self.run_dir), "checkpoints": [vars(held) for held in self.held]})


def list_checkpoints(run_dir: Path) -> CheckpointList:
    """Every checkpoint of the run, best and last first, then the snapshots by step; each
    read and checked (a damaged one says why instead of its step)."""
    folder = RunFolder(run_dir)
    names = [which for which in ("best", "last") if folder.checkpoint(which).is_file()]
    names += [snapshot_name(step) for step, _ in folder.snapshots()]
    held = []
    for name in names:
        path = folder.checkpoint(name)
        try:
            size = path.stat().st_size
        except OSError:  # gone since the folder was listed
            held.append(Held(name, 0, None, problem="gone"))
            continue
        try:
            state = load_checkpoint(path)
        except CheckpointError as err:  # damaged, or not ours
            held.append(Held(name, size, None, problem=str(err).removeprefix(f"{path}: ")))
            continue
        loss = state.get("train_loss")
        held.append(Held(name, size, state["step"], loss if isinstance(loss, float) else None))
    return CheckpointList(folder.path, held)


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


def _loss(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"
