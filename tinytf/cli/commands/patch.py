"""`tinytf patch` and `tinytf attribute`: activation patching over minimal pairs, and each
part's share of one prompt's logit difference."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tinytf.cli.commands import first_held_out, run_heading, typed_length_note
from tinytf.cli.output import fresh_path, write_png
from tinytf.errors import UserError, did_you_mean
from tinytf.inspect.heatmaps import patch_figure
from tinytf.inspect.patching import Attribution, PatchReport, attribute, check_next_token, patch, prompts_of
from tinytf.run.load import LoadedRun
from tinytf.tasks import CONSTRUCTIONS
from tinytf.tasks.base import MinimalPair


@dataclass(frozen=True)
class PairDraw:
    """Which minimal pairs `patch` reads: one of the user's (clean, corrupt, answer, wrong),
    or `n` drawn from the task's held-out pairs of one `construction`."""

    clean: str | None = None
    corrupt: str | None = None
    answer: str | None = None
    wrong: str | None = None
    n: int | None = None
    construction: str | None = None

    def pairs(self, loaded: LoadedRun) -> list[MinimalPair]:
        one = (self.clean, self.corrupt, self.answer, self.wrong)
        if self.n is None:
            if any(value is None for value in one):
                raise UserError(
                    "give --clean, --corrupt, --answer and --wrong (one pair), or --pairs N --construction NAME"
                )
            if self.construction is not None:
                raise UserError("--construction chooses the pairs --pairs draws: drop it for a pair of your own")
            return [MinimalPair(*one)]
        if any(value is not None for value in one):
            raise UserError("--pairs draws its pairs: drop --clean, --corrupt, --answer and --wrong")
        check_next_token(loaded.framing)  # before drawing pairs it could not patch
        return self._drawn(loaded)

    def _drawn(self, loaded: LoadedRun) -> list[MinimalPair]:
        """The task's minimal pairs of the construction, unseen in training."""
        task, n, construction = loaded.task, self.n, self.construction
        if not task.constructions:
            drawing = " and ".join(CONSTRUCTIONS)
            raise UserError(f"--pairs draws minimal pairs of {drawing}, not of {task.name}: give one pair")
        if construction is None:
            raise UserError(f"--pairs {n} needs --construction ({', '.join(task.constructions)})")
        if construction not in task.constructions:
            kinds = ", ".join(task.constructions)
            hint = did_you_mean(construction, task.constructions)
            raise UserError(f"--construction {construction}: one of {kinds} for {task.name}{hint}")
        held_out = first_held_out(loaded, None) if task.train_size() is not None else None  # a fixed split's pairs
        return task.held_out_pairs(construction, n, seed=loaded.config.seed, held_out=held_out)


@dataclass
class Patched:
    """`patch`'s report; `tokens` label the positions for one pair of the user's (drawn
    pairs' words differ from pair to pair: None)."""

    loaded: LoadedRun
    report: PatchReport
    tokens: list[str] | None
    checkpoint: str
    note: str | None  # one pair's length never trained on

    def to_text(self) -> str:
        """What was patched and a table, the largest effects first."""
        report = self.report
        lines = [
            f"{run_heading(self.loaded, self.checkpoint)}, {report.pairs} pair{'s' * (report.pairs > 1)}",
            f"logit difference: clean {report.ld_clean:.3f}, corrupted {report.ld_corrupt:.3f}; "
            f"answer above wrong in {report.clean_correct:.0%} of clean prompts",
            f"{'component':<10} {'layer':>5} {'head':>4} {'position':>8} {'restored':>8}",
        ]
        for result in sorted(report.results, key=lambda result: -abs(result.restored)):
            head = "-" if result.head is None else result.head
            position = report.at if result.position is None else result.position
            lines.append(f"{result.component:<10} {result.layer:>5} {head:>4} {position:>8} {result.restored:>8.3f}")
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(self.report.to_dict())

    def write_png(self, out: Path | None) -> Path:
        """The heatmaps to `out`, or to a new patch.png; the path written."""
        path = out or fresh_path(Path("patch.png"))
        write_png(path, patch_figure(self.report, self.tokens))
        return path


def patched(loaded: LoadedRun, draw: PairDraw, by: str, checkpoint: str, at: str = "all") -> Patched:
    """Each head's or layer's activation patched from clean into corrupted over the pairs of
    `draw` (by head: at the positions `at` names)."""
    groups = prompts_of(loaded.framing, draw.pairs(loaded), loaded.config.model.max_len)
    report = patch(loaded.model, groups, by, at)
    if draw.n is not None:
        return Patched(loaded, report, None, checkpoint, None)
    # The pair's tokens, "clean/corrupted" where the prompts differ
    clean, corrupt = (loaded.vocab.decode(ids[0].tolist()) for ids in (groups[0].clean, groups[0].corrupt))
    tokens = [word if word == other else f"{word}/{other}" for word, other in zip(clean, corrupt, strict=True)]
    return Patched(loaded, report, tokens, checkpoint, typed_length_note(loaded, draw.clean))


@dataclass
class Attributed:
    """`attribute`'s report."""

    loaded: LoadedRun
    report: Attribution
    checkpoint: str
    note: str | None  # the prompt's length never trained on

    def to_text(self) -> str:
        """Which run, then the LD and a table, the largest contributions first."""
        return f"{run_heading(self.loaded, self.checkpoint)}\n{self.report.to_text()}"

    def to_json(self) -> str:
        return json.dumps(self.report.to_dict())


def attributed(loaded: LoadedRun, text: str, answer: str, wrong: str, checkpoint: str) -> Attributed:
    """Each part's share of logit(answer) - logit(wrong) after `text`."""
    (prompts,) = prompts_of(loaded.framing, [MinimalPair(text, text, answer, wrong)], loaded.config.model.max_len)
    report = attribute(loaded.model, prompts.clean, int(prompts.answer[0]), int(prompts.wrong[0]))
    return Attributed(loaded, report, checkpoint, typed_length_note(loaded, text))
