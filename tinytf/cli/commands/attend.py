"""`tinytf attend`: one input's attention maps, as a terminal table, JSON, or a file (json,
npz, png, or the offline viewer page)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tinytf.cli.commands import run_heading
from tinytf.cli.output import fresh_path, write_png, writing
from tinytf.inspect.attend import AttentionReport, attention_report
from tinytf.inspect.heads import head_scores
from tinytf.inspect.viewer import attention_page
from tinytf.inspect.viz import report_figure, terminal_report
from tinytf.run.load import LoadedRun

ATTENTION_FILES = ("json", "npz", "png", "html")  # the `attend` formats written to a file


@dataclass
class Attended:
    """`attend`'s report: the attention of `text` (with `target` imposed, or the model's answer)."""

    loaded: LoadedRun
    report: AttentionReport
    text: str
    target: str | None
    checkpoint: str

    @property
    def note(self) -> str | None:
        return self.report.note

    def to_text(self) -> str:
        """The run, the tokens and the answer, then a heatmap per head."""
        answer = None if self.report.answer is None else self.loaded.vocab.join(self.report.answer)
        return terminal_report(self.report, run_heading(self.loaded, self.checkpoint), answer)

    def to_json(self) -> str:
        return self.report.to_json()

    def write(self, output_format: str, out: Path | None) -> Path:
        """Write json, npz, png or html to `out`, or to a new attention.<format> (never over
        an existing file); the path written."""
        page = self.page() if output_format == "html" else None  # (the heads scored before a file is made)
        path = out or fresh_path(Path(f"attention.{output_format}"))
        if output_format == "png":
            write_png(path, report_figure(self.report))
            return path
        with writing(path) as file:
            if page is not None:
                file.write(page.encode("utf-8"))
            elif output_format == "json":
                file.write(self.to_json().encode("utf-8"))
            else:
                self.report.save_npz(file)
        return path

    def page(self) -> str:
        """The viewer page: the report, the heads' pattern scores on the same input (unless
        --target imposes an answer the scores would not follow), and where it comes from."""
        loaded, report, text = self.loaded, self.report, self.text
        facts = {"input": text}
        if report.answer is not None:
            facts["answer" if self.target is None else "target (--target)"] = loaded.vocab.join(report.answer)
        facts |= {"run": str(loaded.run_dir), "checkpoint": f"{self.checkpoint} (step {loaded.step})"}
        if self.target is None:
            scores = head_scores(loaded.model, loaded.framing, text=text)
            note = "Head scores: this input, after the model's own answer (as tinytf heads --text)."
        else:
            scores = None
            note = "No head scores: they follow the model's own answer, and --target imposes another."
        shown = text if len(text) <= 60 else text[:59] + "…"
        return attention_page(report, scores, title=f"Attention: {shown}", facts=facts, heads_note=note)


def attend(
    loaded: LoadedRun, text: str, target: str | None, layer: int | None, head: int | None, checkpoint: str
) -> Attended:
    report = attention_report(loaded.model, loaded.framing, text, target).select(layer, head)
    return Attended(loaded, report, text, target, checkpoint)
