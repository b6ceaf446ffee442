"""Where training reports go. The training loop never prints: it calls these.

`Logger` is the interface, a `typing.Protocol`: any object with these eight methods is a
logger. `NullLogger` does nothing for each, so a logger that cares about a few reports
subclasses it and overrides only those. Implementations: `MetricsFileLogger`
(metrics.jsonl), `TensorBoardLogger` (scalars, attention images, head scores, text
samples, hparams), `ProgressBarLogger` (a tqdm bar on the terminal, used by the CLI) and
`RecordingLogger` (keeps every report in a list: for tests and notebooks).
metrics.jsonl holds one record per report: {"step", "split", metric: value, ...} for the
splits "train" (the steps since the last log), "val" (the held-out set) and "train_set"
(a fixed training set, whole), and {"step", "split": "fourier", "norms": [...]}.
Loggers only write: what the model is asked (predictions, attention maps, head scores...)
is observers.py's.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO, runtime_checkable

from tinytf.files import append_text, naming_errors
from tinytf.run.folder import RunFolder

if TYPE_CHECKING:
    from tinytf.config import Config
    from tinytf.inspect.attend import AttentionReport
    from tinytf.inspect.heads import HeadReport

# TensorBoard's CUSTOM SCALARS tab, for a task with a fixed training set: each chart draws
# the whole training set's curve and the held-out set's together (memorised vs generalised).
TRAIN_SET_BESIDE_HELD_OUT = {
    "training set and held-out set": {
        "exact-answer accuracy": ["Multiline", ["train_set/seq_acc", "val/seq_acc"]],
        "loss": ["Multiline", ["train_set/loss", "val/loss"]],
    }
}


@runtime_checkable
class Logger(Protocol):
    def resumed(self, step: int, redone_to: int | None) -> None:
        """Before `start`, for a resumed run: it continues from its checkpoint of `step`;
        metrics it had logged past that step, up to `redone_to`, were dropped and will be
        logged again (None: it had logged none)."""

    def start(self, run_dir: Path | None, start_step: int) -> None:
        """Training begins (or resumes) at `start_step`, in `run_dir` if it has one."""

    def step(self, step: int) -> None:
        """Step `step` is done. Called every step: keep it cheap."""

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        """`split` is "train" or "val"; values: loss, token_acc, seq_acc, lr, tokens_per_s..."""

    def attention(self, step: int, sample: str, report: AttentionReport) -> None:
        """The attention maps of a fixed sample input at this step."""

    def heads(self, step: int, report: HeadReport) -> None:
        """Every head's score on each attention pattern, over a fixed slice of held-out
        inputs (logged with the attention maps, if `log.head_scores`)."""

    def text(self, step: int, tag: str, markdown: str) -> None:
        """A text sample, e.g. predictions next to targets."""

    def fourier(self, step: int, norms: list[float]) -> None:
        """At an evaluation, for a task whose numbers are Z_p's elements: the norm of their
        embedding at each frequency 0 .. p // 2 (tinytf/inspect/fourier.py)."""

    def finish(self, step: int, final: dict[str, float]) -> None:
        """Training ended (completed, stopped early or interrupted) with these metrics."""


class NullLogger(Logger):
    """Ignores every report: a subclass overrides only the reports it wants (a class
    that names `Logger` as its base inherits the protocol's do-nothing methods)."""


class RecordingLogger(NullLogger):
    """Keeps every report as (method, arguments) in `records`, except the per-step calls."""

    def __init__(self) -> None:
        self.records: list[tuple[str, tuple[Any, ...]]] = []

    def resumed(self, step: int, redone_to: int | None) -> None:
        self.records.append(("resumed", (step, redone_to)))

    def start(self, run_dir: Path | None, start_step: int) -> None:
        self.records.append(("start", (run_dir, start_step)))

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        self.records.append(("metrics", (step, split, values)))

    def attention(self, step: int, sample: str, report: AttentionReport) -> None:
        self.records.append(("attention", (step, sample, report)))

    def heads(self, step: int, report: HeadReport) -> None:
        self.records.append(("heads", (step, report)))

    def text(self, step: int, tag: str, markdown: str) -> None:
        self.records.append(("text", (step, tag, markdown)))

    def fourier(self, step: int, norms: list[float]) -> None:
        self.records.append(("fourier", (step, norms)))

    def finish(self, step: int, final: dict[str, float]) -> None:
        self.records.append(("finish", (step, final)))

    def of(self, method: str) -> list[tuple[Any, ...]]:
        """The arguments of every `method` report, in order."""
        return [args for name, args in self.records if name == method]


class MetricsFileLogger(NullLogger):
    """Appends one JSON object per logged point to `metrics.jsonl`: strict JSON, with
    null for a number that is not finite."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        self._append({"step": step, "split": split, **{key: _finite(value) for key, value in values.items()}})

    def fourier(self, step: int, norms: list[float]) -> None:
        self._append({"step": step, "split": "fourier", "norms": [_finite(norm) for norm in norms]})

    def _append(self, record: dict[str, Any]) -> None:
        append_text(self.path, json.dumps(record, allow_nan=False) + "\n")


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


class TensorBoardLogger(NullLogger):
    """Scalars as `<split>/<metric>`, attention maps as images under
    `attention/<sample>/<stack>.<layer>.<kind>`, head scores as the image `heads/scores`
    (patterns x heads) and, per pattern, the best head's score as the scalar
    `heads/best/<pattern>` (the curve rises when a head takes the pattern up),
    predictions as text, config as hparams. With `train_set` metrics, CUSTOM SCALARS charts
    of them beside the held-out ones (TRAIN_SET_BESIDE_HELD_OUT). The embedding's Fourier
    spectrum: the image `fourier/spectrum` (frequency x step, so far; drawn with the
    attention maps and at the end), the norms of the TOP_FREQUENCIES strongest frequencies
    as `fourier/k<k>` and the share of the squared norm they hold as `fourier/top_share`."""

    def __init__(self, log_dir: Path, config: Config, run: RunFolder | None = None) -> None:
        """run: the run folder; a resumed run's spectrum image starts from the spectra its
        metrics.jsonl holds."""
        from tinytf.inspect.viz import HeadScoreImages, LayerImages  # matplotlib loads only when a figure is drawn

        self.log_dir, self.config = log_dir, config  # the config is logged as hparams
        self.writer = None  # opened at start(): nothing is written before training begins
        self.images = LayerImages()
        self.score_images = HeadScoreImages()
        self.spectra: dict[int, list[float]] = {}  # step -> the Fourier norms logged then
        self.spectrum_drawn_at: int | None = None
        self.run = run
        self.overlaid = False  # the CUSTOM SCALARS charts of the training set against the held-out set

    def start(self, run_dir: Path | None, start_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        with naming_errors(self.log_dir):
            self.writer = SummaryWriter(log_dir=str(self.log_dir))
        self.event_file = max(self.log_dir.glob("events.out.tfevents.*"))  # its own, the newest (named by time)
        if start_step > 0 and self.run is not None and self.run.metrics.is_file():
            with naming_errors(self.run.metrics):
                records = self.run.read_metrics()
            # RunFolder.tidy_to has kept only JSON objects with a step up to start_step;
            # a hand-edited spectrum that is not a list of numbers is left out of the image.
            self.spectra = {r["step"]: r["norms"] for r in records if r.get("split") == "fourier" and _numbers(r)}
        self.thread_errors = threading.excepthook  # restored by finish()
        threading.excepthook = self._quiet_writer_thread

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        with naming_errors(self.event_file):
            for key, value in values.items():
                self.writer.add_scalar(f"{split}/{key}", value, step)
            if split == "train_set" and not self.overlaid:  # once per event file, as TensorBoard allows
                self.writer.add_custom_scalars(TRAIN_SET_BESIDE_HELD_OUT)
                self.overlaid = True

    def attention(self, step: int, sample: str, report: AttentionReport) -> None:
        with naming_errors(self.event_file):
            for attention_map in report.maps:
                tag = f"attention/{sample}/{attention_map.name}"
                self.writer.add_image(tag, self.images.render(attention_map), step, dataformats="HWC")

    def heads(self, step: int, report: HeadReport) -> None:
        with naming_errors(self.event_file):
            self.writer.add_image("heads/scores", self.score_images.render(report), step, dataformats="HWC")
            for pattern in report.patterns:
                best = report.best(pattern)
                if best is not None:  # the pattern applies to no head (e.g. no input has a duplicate)
                    self.writer.add_scalar(f"heads/best/{pattern}", best.scores[pattern], step)

    def text(self, step: int, tag: str, markdown: str) -> None:
        with naming_errors(self.event_file):
            self.writer.add_text(tag, markdown, step)

    def fourier(self, step: int, norms: list[float]) -> None:
        from tinytf.inspect.fourier import TOP_FREQUENCIES, top_share

        self.spectra[step] = norms
        strongest = sorted(range(len(norms)), key=norms.__getitem__, reverse=True)[:TOP_FREQUENCIES]
        with naming_errors(self.event_file):
            for k in strongest:
                self.writer.add_scalar(f"fourier/k{k}", norms[k], step)
            self.writer.add_scalar("fourier/top_share", top_share(norms), step)
        every = self.config.log.attention_every
        if every is not None and step % every == 0:
            self._draw_spectrum(step)

    def _draw_spectrum(self, step: int) -> None:
        """The spectra so far as one image, drawn with the attention maps and at the end, not
        at every evaluation: a drawing costs more than the evaluation itself."""
        from tinytf.inspect.viz import figure_pixels, spectrum_figure

        with naming_errors(self.event_file):
            width = len(self.spectra[step])  # spectra of another width (edited by hand) are left out
            image = figure_pixels(spectrum_figure({s: n for s, n in self.spectra.items() if len(n) == width}))
            self.writer.add_image("fourier/spectrum", image, step, dataformats="HWC")
        self.spectrum_drawn_at = step

    def finish(self, step: int, final: dict[str, float]) -> None:
        from torch.utils.tensorboard.summary import hparams

        try:
            if self.spectra and self.spectrum_drawn_at != max(self.spectra):
                self._draw_spectrum(max(self.spectra))
            with naming_errors(self.event_file):
                # Written into this run's own event file through SummaryWriter's undocumented
                # file_writer: the public SummaryWriter.add_hparams always writes a sub-run.
                metrics = {f"hparam/{key}": value for key, value in final.items()}
                experiment, session_start, session_end = hparams(_flatten(self.config.to_dict()), metrics)
                for summary in (experiment, session_start, session_end):
                    self.writer.file_writer.add_summary(summary)
                for key, value in metrics.items():
                    self.writer.add_scalar(key, value, step)
                self.writer.flush()
                self.writer.close()
        finally:
            if threading.excepthook == self._quiet_writer_thread:  # unless replaced meanwhile
                threading.excepthook = self.thread_errors

    def _quiet_writer_thread(self, args: threading.ExceptHookArgs) -> None:
        """TensorBoard writes the event file from a thread of its own. An OSError there (a
        full disk) is raised again by the next write from the training, which reports it
        in one line: the thread prints no traceback of its own."""
        if not (issubclass(args.exc_type, OSError) and type(args.thread).__module__.startswith("tensorboard.")):
            self.thread_errors(args)


class ProgressBarLogger(NullLogger):
    """A tqdm progress bar showing step, loss, accuracy and tokens/s. A run that stops at a
    held-out accuracy (`stop_at`) says so, and shows its steps as a budget, without a time
    left: it may end long before the last step."""

    def __init__(self, total_steps: int, stop_at: float | None = None, file: TextIO | None = None) -> None:
        self.total_steps, self.stop_at, self.file = total_steps, stop_at, file
        self.bar = None
        self.postfix: dict[str, str] = {}

    def resumed(self, step: int, redone_to: int | None) -> None:
        """Says, on stdout before the bar starts, where the run continues from."""
        print(resume_line(step, redone_to), flush=True)

    def start(self, run_dir: Path | None, start_step: int) -> None:
        from tqdm import tqdm

        name = run_dir.name if run_dir is not None else "training"
        shape = {"unit": "step", "dynamic_ncols": True, "file": self.file}
        if self.stop_at is not None:
            name = f"{name}, stops at held-out seq_acc {self.stop_at:g}"
            shape["bar_format"] = "{l_bar}{bar}| {n_fmt}/{total_fmt} at most [{elapsed}, {rate_fmt}{postfix}]"
        self.bar = tqdm(total=self.total_steps, initial=start_step, desc=name, **shape)

    def step(self, step: int) -> None:
        self.bar.update(step - self.bar.n)

    def metrics(self, step: int, split: str, values: dict[str, float]) -> None:
        if split == "train":
            self.postfix.update(
                loss=f"{values['loss']:.3f}", acc=f"{values['token_acc']:.2f}", tok_s=f"{values['tokens_per_s']:,.0f}"
            )
        elif split == "val":
            self.postfix.update(val_seq_acc=f"{values['seq_acc']:.3f}")
        elif split == "train_set":
            self.postfix.update(train_set_seq_acc=f"{values['seq_acc']:.3f}")
        self.bar.set_postfix(self.postfix, refresh=False)

    def finish(self, step: int, final: dict[str, float]) -> None:
        self.bar.close()


def resume_line(step: int, redone_to: int | None) -> str:
    """`resumed from step 1000 (last.pt); steps 1001–1417 will be redone`: where a resumed
    run continues, and the steps it had logged past its checkpoint that it trains again."""
    line = f"resumed from step {step} (last.pt)"
    if redone_to is None:
        return line
    steps = f"step {redone_to}" if redone_to == step + 1 else f"steps {step + 1}–{redone_to}"
    return f"{line}; {steps} will be redone"


def _numbers(record: dict[str, Any]) -> bool:
    """Whether a metrics.jsonl record's "norms" is a list of numbers."""
    norms = record.get("norms")
    return isinstance(norms, list) and all(isinstance(x, int | float) and not isinstance(x, bool) for x in norms)


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
