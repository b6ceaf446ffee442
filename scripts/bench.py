"""Speed of tinytf next to the implementations users would otherwise pick, in one process.

    python scripts/bench.py                      # the three reference shapes
    python scripts/bench.py --shape default      # one of them
    python scripts/bench.py --d-model 96 --layers 3 --heads 4 --seq 48 --batch 16   # any shape
    python scripts/bench.py --json bench.json

Contenders, each a causal language model of the same shape trained with the same
optimizer (fused AdamW) on the same random tokens:
    tinytf            tinytf.build_model (fused QKV, PyTorch's fused attention kernel)
    torch-encoder     torch.nn.TransformerEncoder (pre-LN, GELU) with a causal mask
    textbook          written below as the source material teaches it: separate W_Q, W_K,
                      W_V, W_O, masked_fill + softmax, post-LN, ReLU
    x-transformers    x_transformers.TransformerWrapper, if that package is installed

Method: after warm-up, the contenders run round-robin, `--rounds` times, each round
timing `--repeat` calls; we report medians, and ratios of medians taken in the same
run, so a busy machine slows everyone alike. Also measured: the machine's fp32 GEMM
peak (the best of a few large square matmuls), each contender's model-FLOPs
utilisation against it, tinytf's forward with `return_attention=True` against a plain
forward, the fixed cost of one tinytf step at batch 1 x 8 tokens, and for every task
the cost of making a batch next to a training step.

Model FLOPs of one training step (the PaLM paper's count, fwd + bwd = 3x fwd):
    6 * N * tokens  +  12 * L * T * D * tokens
N: parameters of the layers plus the output projection (D x V); the second term is the
attention scores and weighted sums (not reduced for causality).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import tinytf
from tinytf.config import config_from_dict
from tinytf.data import TaskData, frame
from tinytf.evaluate import scored_loss
from tinytf.tasks import TASKS, get_task

SHAPES = {
    "tiny": dict(vocab=64, seq=32, batch=64, d_model=64, heads=4, layers=2, d_ff=256),
    "default": dict(vocab=64, seq=64, batch=32, d_model=128, heads=4, layers=4, d_ff=512),
    "small": dict(vocab=64, seq=128, batch=16, d_model=256, heads=8, layers=4, d_ff=1024),
}


@dataclass(frozen=True)
class Shape:
    vocab: int
    seq: int
    batch: int
    d_model: int
    heads: int
    layers: int
    d_ff: int


# --------------------------------------------------------------------------- contenders


def tinytf_model(shape: Shape) -> nn.Module:
    model = {"arch": "decoder", "d_model": shape.d_model, "n_heads": shape.heads, "n_layers": shape.layers,
             "d_ff": shape.d_ff, "max_len": shape.seq, "dropout": 0.0}  # fmt: skip
    task = {"name": "copy", "min_len": 1, "max_len": 3}  # any task whose sequences fit in shape.seq
    return tinytf.build_model({"task": task, "model": model}, vocab_size=shape.vocab)


class TorchEncoderLM(nn.Module):
    """A causal LM on torch.nn.TransformerEncoder, configured like tinytf's defaults."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.embedding = nn.Embedding(shape.vocab, shape.d_model)
        self.register_buffer("positions", tinytf.model.positional.sinusoidal_table(shape.seq, shape.d_model))
        layer = nn.TransformerEncoderLayer(shape.d_model, shape.heads, shape.d_ff, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)  # fmt: skip
        self.encoder = nn.TransformerEncoder(layer, shape.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(shape.d_model)
        self.head = nn.Linear(shape.d_model, shape.vocab, bias=False)
        self.head.weight = self.embedding.weight
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(shape.seq))
        self.scale = math.sqrt(shape.d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.size(1)
        x = self.embedding(tokens) * self.scale + self.positions[:length]
        x = self.encoder(x, mask=self.mask[:length, :length], is_causal=True)
        return self.head(self.norm(x))


class TextbookAttention(nn.Module):
    """Multi-head attention exactly as the source material's chapter writes it."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.W_Q = nn.Linear(d_model, d_model, bias=False)
        self.W_K = nn.Linear(d_model, d_model, bias=False)
        self.W_V = nn.Linear(d_model, d_model, bias=False)
        self.W_O = nn.Linear(d_model, d_model, bias=False)

    def split_heads(self, x: torch.Tensor, batch_size: int) -> torch.Tensor:
        return x.view(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch_size = x.size(0)
        Q, K, V = (self.split_heads(w(x), batch_size) for w in (self.W_Q, self.W_K, self.W_V))
        scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(self.d_k)
        scores = scores.masked_fill(mask == 0, float("-inf"))
        attention_weights = torch.softmax(scores, dim=-1)
        context = (
            torch.matmul(attention_weights, V)
            .transpose(1, 2)
            .contiguous()
            .view(batch_size, -1, self.num_heads * self.d_k)
        )
        return self.W_O(context)


class TextbookBlock(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.attention = TextbookAttention(shape.d_model, shape.heads)
        self.norm1, self.norm2 = nn.LayerNorm(shape.d_model), nn.LayerNorm(shape.d_model)
        self.ffn = nn.Sequential(nn.Linear(shape.d_model, shape.d_ff), nn.ReLU(), nn.Linear(shape.d_ff, shape.d_model))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x, mask))  # post-LN, as in the original paper
        return self.norm2(x + self.ffn(x))


class TextbookLM(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.embedding = nn.Embedding(shape.vocab, shape.d_model)
        self.register_buffer("positions", tinytf.model.positional.sinusoidal_table(shape.seq, shape.d_model))
        self.blocks = nn.ModuleList(TextbookBlock(shape) for _ in range(shape.layers))
        self.head = nn.Linear(shape.d_model, shape.vocab, bias=False)
        self.head.weight = self.embedding.weight
        self.register_buffer("mask", torch.tril(torch.ones(shape.seq, shape.seq)))
        self.scale = math.sqrt(shape.d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.size(1)
        x = self.embedding(tokens) * self.scale + self.positions[:length]
        for block in self.blocks:
            x = block(x, self.mask[:length, :length])
        return self.head(x)


def x_transformers_model(shape: Shape) -> nn.Module | None:
    try:
        from x_transformers import Decoder, TransformerWrapper
    except ImportError:
        return None
    return TransformerWrapper(num_tokens=shape.vocab, max_seq_len=shape.seq, tie_embedding=True,
                              attn_layers=Decoder(dim=shape.d_model, depth=shape.layers, heads=shape.heads,
                                                  attn_dim_head=shape.d_model // shape.heads,
                                                  ff_mult=shape.d_ff / shape.d_model, attn_flash=True))  # fmt: skip


FLOOR = "matmuls only"  # not a contender: the floor under every contender's step (see matmuls_only)

CONTENDERS: dict[str, Callable[[Shape], nn.Module | None]] = {
    "tinytf": tinytf_model,
    "torch-encoder": TorchEncoderLM,
    "textbook": TextbookLM,
    "x-transformers": x_transformers_model,
}


# --------------------------------------------------------------------------- measuring


def model_flops_per_step(model: nn.Module, shape: Shape) -> float:
    embedding_like = {id(p) for name, p in model.named_parameters() if "embedding" in name or "positions" in name}
    n_params = sum(p.numel() for p in model.parameters() if id(p) not in embedding_like)
    n_params += shape.d_model * shape.vocab  # the (tied) output projection is a real matmul
    tokens = shape.batch * shape.seq
    return 6 * n_params * tokens + 12 * shape.layers * shape.seq * shape.d_model * tokens


def gemm_peak_flops(rounds: int) -> float:
    """fp32 FLOP/s of the best large square matmul: the machine's practical ceiling."""
    best = 0.0
    for size in (512, 1024, 2048):
        a, b = torch.randn(size, size), torch.randn(size, size)
        a @ b
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(3):
                a @ b
            times.append((time.perf_counter() - start) / 3)
        best = max(best, 2 * size**3 / statistics.median(times))
    return best


def matmuls_only(shape: Shape) -> Callable[[], None]:
    """Only the matrix products of one training step of this shape, on random data: the
    floor under any fp32 implementation's step time, whatever it does around them.

    Every linear layer (W_Q W_K W_V fused, W_O, the FFN's two, the output projection):
    forward X W^T, backward dX = dY W and dW = dY^T X. Every attention: forward Q K^T and
    P V, backward dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q (batched over B x H).
    """
    rows, d, head = shape.batch * shape.seq, shape.d_model, shape.d_model // shape.heads
    linears = [(d, 3 * d), (d, d), (d, shape.d_ff), (shape.d_ff, d)] * shape.layers + [(d, shape.vocab)]
    operands = [(torch.randn(rows, i), torch.randn(o, i), torch.randn(rows, o)) for i, o in linears]
    q, k = torch.randn(2, shape.batch * shape.heads, shape.seq, head)
    p = torch.randn(shape.batch * shape.heads, shape.seq, shape.seq)

    def step() -> None:
        for x, w, dy in operands:
            x @ w.T, dy @ w, dy.T @ x
        for _ in range(shape.layers):
            q @ k.transpose(1, 2), p @ k  # forward
            p @ k, p.transpose(1, 2) @ q, p @ k, q @ k.transpose(1, 2)  # backward

    return step


def timed(fn: Callable[[], object], repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def training_step(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> Callable[[], None]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    vocab = model(tokens[:1]).size(-1)

    def step() -> None:
        logits = model(tokens)
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def round_robin(fns: dict[str, Callable[[], object]], rounds: int, repeat: int) -> dict[str, float]:
    """Median seconds per call of each fn, measured interleaved."""
    for fn in fns.values():
        fn(), fn()  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(timed(fn, repeat))
    return {name: statistics.median(times) for name, times in samples.items()}


def bench_shape(name: str, shape: Shape, rounds: int, repeat: int, peak: float) -> dict:
    torch.manual_seed(0)
    tokens = torch.randint(0, shape.vocab, (shape.batch, shape.seq))
    targets = torch.roll(tokens, -1, dims=1)
    models = {key: make(shape) for key, make in CONTENDERS.items()}
    models = {key: model for key, model in models.items() if model is not None}

    steps = {key: training_step(model, tokens, targets) for key, model in models.items()}
    steps[FLOOR] = matmuls_only(shape)
    step_time = round_robin(steps, rounds, repeat)
    floor_time = step_time.pop(FLOOR)

    ours = models["tinytf"].eval()
    with torch.no_grad():
        forward_time = round_robin({
            "plain": lambda: ours(tokens),
            "return_attention": lambda: ours(tokens, return_attention=True),
            "torch-encoder": lambda: models["torch-encoder"](tokens),
        }, rounds, repeat)  # fmt: skip

    n_tokens = shape.batch * shape.seq
    rows = {}
    for key, seconds in step_time.items():
        rows[key] = {
            "step_ms": 1e3 * seconds,
            "tokens_per_s": n_tokens / seconds,
            "mfu": model_flops_per_step(models[key], shape) / seconds / peak,
            "speed_vs_tinytf": step_time["tinytf"] / seconds,
        }
    rows[FLOOR] = {
        "step_ms": 1e3 * floor_time, "tokens_per_s": n_tokens / floor_time,
        "mfu": model_flops_per_step(models["tinytf"], shape) / floor_time / peak,
        "speed_vs_tinytf": step_time["tinytf"] / floor_time,
    }  # fmt: skip
    return {
        "shape": name, **shape.__dict__, "train": rows,
        # The most any implementation could gain over torch-encoder if it did nothing but its matmuls.
        "ceiling_vs_torch_encoder": step_time["torch-encoder"] / floor_time,
        "ceiling_vs_textbook": step_time["textbook"] / floor_time,
        "forward_ms": {key: 1e3 * value for key, value in forward_time.items()},
        "return_attention_ratio": forward_time["return_attention"] / forward_time["plain"],
    }  # fmt: skip


def bench_fixed_cost(rounds: int) -> float:
    """ms of one tinytf training step at batch 1, 8 tokens (default shape otherwise)."""
    shape = Shape(**{**SHAPES["default"], "batch": 1, "seq": 8})
    tokens = torch.randint(0, shape.vocab, (1, 8))
    step = training_step(tinytf_model(shape), tokens, torch.roll(tokens, -1, dims=1))
    return 1e3 * round_robin({"step": step}, rounds, 20)["step"]


def bench_tasks(rounds: int, batch_size: int) -> list[dict]:
    """Per task: making a batch (sampling + framing) next to a training step on it,
    with the default shape's model."""
    shape = SHAPES["default"]
    results = []
    with tempfile.TemporaryDirectory() as folder:
        text = Path(folder) / "corpus.txt"
        text.write_text("the quick brown fox jumps over the lazy dog. " * 2000)
        for name, cls in TASKS.items():
            arch = "decoder" if "decoder" in cls.archs else cls.archs[0]
            config = config_from_dict({
                "task": {"name": name, "path": str(text)},
                "model": {"arch": arch, "d_model": shape["d_model"], "n_heads": shape["heads"],
                          "n_layers": shape["layers"], "d_ff": shape["d_ff"]},
            })  # fmt: skip
            task = get_task(config.task)
            data = TaskData(task, seed=0, eval_size=config.task.eval_size)
            model = tinytf.build_model(config)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

            def make_batch(data=data, task=task, arch=arch):
                return frame(data.train_pairs(batch_size), task, arch)

            batch = make_batch()

            def step(model=model, batch=batch, optimizer=optimizer):
                scored_loss(model(**batch.model_inputs()), batch.labels).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            times = round_robin({"batch": make_batch, "step": step}, rounds, 5)
            results.append({"task": name, "arch": arch, "batch_ms": 1e3 * times["batch"],
                            "step_ms": 1e3 * times["step"], "share": times["batch"] / times["step"]})  # fmt: skip
    return results


# --------------------------------------------------------------------------- report


def print_report(peak: float, shapes: list[dict], fixed_ms: float | None, tasks: list[dict] | None) -> None:
    print(f"fp32 GEMM peak: {peak / 1e9:.1f} GFLOP/s ({torch.get_num_threads()} threads, torch {torch.__version__})")
    for result in shapes:
        dims = ", ".join(f"{k} {result[k]}" for k in ("batch", "seq", "d_model", "heads", "layers", "d_ff", "vocab"))
        print(f"\n### {result['shape']} ({dims})\n")
        print("| contender | step (ms) | tokens/s | MFU | tinytf is |")
        print("|---|---:|---:|---:|---:|")
        for key, row in result["train"].items():
            print(f"| {key} | {row['step_ms']:.1f} | {row['tokens_per_s']:,.0f} | {row['mfu']:.0%} | "
                  f"{1 / row['speed_vs_tinytf']:.2f}x |")  # fmt: skip
        print(f"\nThe step's matmuls alone take {result['train'][FLOOR]['step_ms']:.1f} ms: no fp32 implementation "
              f"can train faster than {result['ceiling_vs_torch_encoder']:.2f}x torch-encoder or "
              f"{result['ceiling_vs_textbook']:.2f}x textbook at this shape on this machine.")  # fmt: skip
        forward = result["forward_ms"]
        ratio = result["return_attention_ratio"]
        print(f"\nforward: plain {forward['plain']:.2f} ms, return_attention=True "
              f"{forward['return_attention']:.2f} ms ({ratio:.2f}x), "
              f"torch-encoder {forward['torch-encoder']:.2f} ms")  # fmt: skip
    if fixed_ms is not None:
        print(f"\nfixed cost of a tinytf training step at batch 1 x 8 tokens: {fixed_ms:.2f} ms")
    if tasks:
        print("\n| task | arch | batch (ms) | step (ms) | batch / step |")
        print("|---|---|---:|---:|---:|")
        for row in tasks:
            print(
                f"| {row['task']} | {row['arch']} | {row['batch_ms']:.2f} | {row['step_ms']:.1f} | {row['share']:.1%} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=[*SHAPES, "all"], default="all")
    for key in Shape.__dataclass_fields__:
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, default=None, help="a custom shape")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-tasks", action="store_true", help="skip the per-task batch cost")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    custom = {key: getattr(args, key) for key in Shape.__dataclass_fields__ if getattr(args, key) is not None}
    if custom:
        shapes = {"custom": Shape(**{**SHAPES["default"], **custom})}
    else:
        names = list(SHAPES) if args.shape == "all" else [args.shape]
        shapes = {name: Shape(**SHAPES[name]) for name in names}

    peak = gemm_peak_flops(args.rounds)
    results = [bench_shape(name, shape, args.rounds, args.repeat, peak) for name, shape in shapes.items()]
    fixed_ms = bench_fixed_cost(args.rounds)
    tasks = None if args.skip_tasks else bench_tasks(args.rounds, SHAPES["default"]["batch"])
    print_report(peak, results, fixed_ms, tasks)
    if args.json:
        args.json.write_text(json.dumps({"gemm_peak_flops": peak, "shapes": results, "fixed_step_ms": fixed_ms,
                                         "tasks": tasks}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
