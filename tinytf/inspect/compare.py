"""Looking vs causing: where each head looks beside what it causes, for one kind of
minimal pair (a construction: "subject", "coreference", "semantic"...).

Looking is the head's attention score for the construction's pattern (heads.py): on the
held-out inputs, as `tinytf heads` reports it, and on the pairs' own clean prompts
followed by their answers. Causing is the share of the answer the head restores when its
output is patched from the clean prompt into the corrupted one (patching.py), at three
places: every position at once, the prompt's last position (where the answer is read,
and where the pattern scores of "subject" and "coreference" look from), and the deciding
word (where the prompts differ).

Across heads, each pairing of a score with a place is summed up by Spearman's rank
correlation, with a bootstrap interval: the pairs and the inputs drawn again with
replacement (BOOTSTRAP_SAMPLES times, from a fixed seed), the 2.5th and 97.5th
percentiles of the correlations they give. A head *looks without causing* when it scores
LOOKS or more and restores under CAUSES wherever it is patched; it *causes without
looking* when it restores CAUSES or more somewhere and scores under LOOKS.

    comparison = compare(run.model, run.framing, pairs, held_out, "coreference")
    comparison.spearman["held_out"]["last"].rho, comparison.looks_without_causing()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from tinytf.data.framing import Framing
from tinytf.errors import UserError
from tinytf.inspect.heads import LABEL_THRESHOLD, HeadReport, head_scores
from tinytf.inspect.patching import AT, PatchReport, patch, prompts_of
from tinytf.model import Transformer
from tinytf.model.names import act_name, head_name
from tinytf.tasks.base import MinimalPair, Pairs

SCORED_ON = ("held_out", "prompts")  # where a head's looking is measured
LOOKS = LABEL_THRESHOLD  # a head looks at the pattern from this score, as `heads` labels it
CAUSES = 0.2  # a head causes the answer from this share restored
BOOTSTRAP_SAMPLES = 1000
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class HeadComparison:
    head: str  # "decoder.1.self.0"
    score: dict[str, float | None]  # held_out, prompts -> the attention score; None where the pattern has no row
    restored: dict[str, float]  # all, last, deciding -> the share of the answer restored


@dataclass(frozen=True)
class Correlation:
    rho: float | None  # Spearman's, across heads; None when every head scores alike
    low: float | None  # the bootstrap's 2.5th percentile
    high: float | None  # its 97.5th

    def text(self) -> str:
        """Rho and its interval, as "0.76 [0.74, 0.86]"; "-" without rho."""
        if self.rho is None:
            return "-"
        interval = "" if self.low is None else f" [{self.low:.2f}, {self.high:.2f}]"
        return f"{self.rho:.2f}{interval}"


@dataclass
class Comparison:
    construction: str
    pattern: str  # the attention pattern the construction is about
    pairs: int
    inputs: int  # held-out inputs scored
    heads: list[HeadComparison]
    spearman: dict[str, dict[str, Correlation]]  # scored on -> patched at -> correlation
    meta: dict[str, object] = field(default_factory=dict)  # where it comes from (run, checkpoint)

    def looks_without_causing(self) -> list[str]:
        return [h.head for h in self.heads if (h.score["held_out"] or 0) >= LOOKS and max(h.restored.values()) < CAUSES]

    def causes_without_looking(self) -> list[str]:
        return [h.head for h in self.heads if max(h.restored.values()) >= CAUSES and (h.score["held_out"] or 0) < LOOKS]

    def to_dict(self) -> dict:
        found = {
            "looks_without_causing": self.looks_without_causing(),
            "causes_without_looking": self.causes_without_looking(),
        }
        return {**self.meta, **asdict(self), **found}


def pattern_of(alignment_patterns: Sequence[str], construction: str) -> str:
    """The attention pattern a construction's pairs test: the one of its name, else the
    task's only alignment pattern (modular-add's pairs "a" and "b" test "operands")."""
    if construction in alignment_patterns:
        return construction
    if len(alignment_patterns) == 1:
        return alignment_patterns[0]
    raise UserError(
        f"construction {construction!r} names none of the task's patterns ({', '.join(alignment_patterns)})"
    )


def compare(
    model: Transformer, framing: Framing, pairs: Sequence[MinimalPair], held_out: Pairs, construction: str
) -> Comparison:
    """Each head's score and shares restored for `pairs` of `construction`, and the rank
    correlations across heads (module docstring); `model` in eval mode."""
    pattern = pattern_of(framing.task.alignment_patterns, construction)
    groups = prompts_of(framing, pairs, model.config.max_len)
    patched = {at: patch(model, groups, "head", at) for at in AT}
    scores = {
        "held_out": [_scores(head_scores(model, framing, held_out[i : i + 1]), pattern) for i in range(len(held_out))],
        "prompts": [_scores(head_scores(model, framing, text=f"{p.clean} {p.answer}"), pattern) for p in pairs],
    }
    names = [head_name(act_name("decoder", r.layer, "self"), r.head) for r in patched["all"].results]
    per_input = {
        on: np.array([[row.get(name, np.nan) for row in rows] for name in names]) for on, rows in scores.items()
    }
    lds = {at: _pair_lds(report) for at, report in patched.items()}
    heads = [
        HeadComparison(
            name,
            {on: _mean(per_input[on][index]) for on in SCORED_ON},
            {at: report.results[index].restored for at, report in patched.items()},
        )
        for index, name in enumerate(names)
    ]
    spearman = _correlations(per_input, lds)
    return Comparison(construction, pattern, len(pairs), len(held_out), heads, spearman)


def _scores(report: HeadReport, pattern: str) -> dict[str, float]:
    """Each head's score for `pattern` in a one-input report (heads where it has no row left out)."""
    return {h.name: h.scores[pattern] for h in report.heads if h.scores.get(pattern) is not None}


def _mean(values: np.ndarray) -> float | None:
    return None if np.isnan(values).all() else float(np.nanmean(values))


def _pair_lds(report: PatchReport) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each pair's clean and corrupted LD (P,), and its LD with each head patched (H, P)."""
    clean = np.array([pair.ld_clean for pair in report.per_pair])
    corrupt = np.array([pair.ld_corrupt for pair in report.per_pair])
    patched = np.array([pair.ld_patched for pair in report.per_pair]).T
    return clean, corrupt, patched


def _restored(lds: tuple[np.ndarray, np.ndarray, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """Each head's share restored over the pairs `rows` (patching.py: LDs averaged first)."""
    clean, corrupt, patched = (part[..., rows].mean(axis=-1) for part in lds)
    return (patched - corrupt) / (clean - corrupt)


def _correlations(
    per_input: dict[str, np.ndarray], lds: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> dict[str, dict[str, Correlation]]:
    """Spearman's rho across heads for each (scored on, patched at), with its bootstrap interval."""
    generator = np.random.default_rng(BOOTSTRAP_SEED)
    n_pairs = len(next(iter(lds.values()))[0])
    everything = {on: np.arange(values.shape[1]) for on, values in per_input.items()}
    draws = []
    for _ in range(BOOTSTRAP_SAMPLES):
        drawn = {on: generator.integers(0, len(rows), len(rows)) for on, rows in everything.items()}
        draws.append((drawn, generator.integers(0, n_pairs, n_pairs)))
    found: dict[str, dict[str, Correlation]] = {}
    for on, values in per_input.items():
        found[on] = {}
        for at, pair_lds in lds.items():
            rho = spearman(np.nanmean(values, axis=1), _restored(pair_lds, np.arange(n_pairs)))
            sampled = [spearman(np.nanmean(values[:, rows[on]], axis=1), _restored(pair_lds, p)) for rows, p in draws]
            kept = np.array([value for value in sampled if value is not None])
            low, high = (float(np.percentile(kept, q)) for q in (2.5, 97.5)) if len(kept) else (None, None)
            found[on][at] = Correlation(rho, low, high)
    return found


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman's rank correlation of x and y (ties share their mean rank), over the places
    where both are numbers; None when either has no spread."""
    keep = ~(np.isnan(x) | np.isnan(y))
    rx, ry = _ranks(x[keep]), _ranks(y[keep])
    if len(rx) < 2 or rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(values: np.ndarray) -> np.ndarray:
    """1..n, ties given the mean of the ranks they span."""
    order = values.argsort(kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks
