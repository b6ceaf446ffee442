"""What making a batch costs next to the training step it feeds, for every task.

    python scripts/bench_tasks.py                   # every task
    python scripts/bench_tasks.py --tasks dyck-1 sort
    python scripts/bench_tasks.py --json tasks.json

Per task, with the architecture it trains best with (the decoder where the task allows
one, else the first it names) and the default shape of scripts/bench.py (d_model 128,
4 heads, 4 layers, d_ff 512), this times two things round-robin, medians over `--rounds`
rounds of `--repeat` calls:
    batch   making one training batch: drawing `--batch-size` examples from the task's
            training stream (redrawing any that fall in the held-out set) and framing
            them into the padded tensors the model reads
    step    one training step on such a batch: forward, loss, backward, fused AdamW
and reports their ratio, the share of a step spent making its batch. Tasks that read a
file (text) get a small generated corpus.

Scope: CPU, fp32 only, like bench.py. Batches are made on the CPU in any run; on CUDA the
step would shrink (and need torch.cuda.synchronize() around it to be timed), so the
share would grow, and the copy of each batch to the device would belong in "batch".
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from bench import SHAPES, round_robin

import tinytf
from tinytf.config import config_from_dict
from tinytf.data import TaskData
from tinytf.evaluate import scored_loss
from tinytf.framing import Batch, get_framing
from tinytf.tasks import TASKS, Task, get_task


def make_batch(data: TaskData, task: Task, arch: str, batch_size: int) -> Batch:
    """One training batch as `tinytf.training` makes it: sampled examples, framed for `arch`."""
    return get_framing(task, arch).frame(data.train_pairs(batch_size))


def bench_task(name: str, corpus: Path, batch_size: int, rounds: int, repeat: int) -> dict:
    """Median ms to make a batch of task `name` and to train one step on it, and their ratio."""
    arch = "decoder" if "decoder" in TASKS[name].archs else TASKS[name].archs[0]
    shape = SHAPES["default"]
    task_section = {"name": name, "path": str(corpus)} if name == "text" else {"name": name}  # only text reads a file
    config = config_from_dict(
        {
            "task": task_section,
            "model": {
                "arch": arch,
                "d_model": shape["d_model"],
                "n_heads": shape["heads"],
                "n_layers": shape["layers"],
                "d_ff": shape["d_ff"],
            },
        }
    )
    task = get_task(config.task)
    data = TaskData(task, seed=0, eval_size=config.task.eval_size)
    model = tinytf.build_model(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    batch = make_batch(data, task, arch, batch_size)

    def step() -> None:
        scored_loss(model(**batch.model_inputs()), batch.labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    times = round_robin({"batch": lambda: make_batch(data, task, arch, batch_size), "step": step}, rounds, repeat)
    return {
        "task": name,
        "arch": arch,
        "batch_size": batch_size,
        "batch_ms": 1e3 * times["batch"],
        "step_ms": 1e3 * times["step"],
        "share": times["batch"] / times["step"],
    }


def print_report(rows: list[dict]) -> None:
    print(f"CPU, {torch.get_num_threads()} threads, torch {torch.__version__}, batch {rows[0]['batch_size']}\n")
    print("| task | arch | batch (ms) | step (ms) | batch / step |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['task']} | {row['arch']} | {row['batch_ms']:.2f} | {row['step_ms']:.1f} | {row['share']:.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--tasks",
        nargs="+",
        choices=list(TASKS),
        default=list(TASKS),
        metavar="TASK",
        help=f"tasks to measure (default: all of {', '.join(TASKS)})",
    )
    parser.add_argument("--batch-size", type=int, default=SHAPES["default"]["batch"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "corpus.txt"
        corpus.write_text("the quick brown fox jumps over the lazy dog. " * 2000)
        rows = [bench_task(name, corpus, args.batch_size, args.rounds, args.repeat) for name in args.tasks]
    print_report(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
