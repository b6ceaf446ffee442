"""Speed of a tinytf training step next to the implementations users would otherwise pick, in one process.

    python scripts/bench.py                      # the three reference shapes
    python scripts/bench.py --shape default      # one of them
    python scripts/bench.py --d-model 96 --layers 3 --heads 4 --seq 48 --batch 16   # any shape
    python scripts/bench.py --json bench.json
    python scripts/bench.py --shape default --profile   # where tinytf's step spends its time

Contenders (scripts/contenders.py says what each is and why the comparison is fair), each
a causal language model of the same shape trained with the same optimizer (fused AdamW)
on the same random tokens:
    tinytf            tinytf.build_model (fused QKV projection; attention on the path
                      tinytf takes when no weights are asked for)
    tinytf post/relu  the textbook's design (post-LN, ReLU) built by tinytf: same model as textbook
    torch-encoder     torch.nn.TransformerEncoder (pre-LN, GELU) with a causal mask
    textbook          a textbook chapter's code: separate W_Q, W_K, W_V, W_O, masked_fill
                      + softmax, post-LN, ReLU
    x-transformers    x_transformers.TransformerWrapper, if that package is installed
    tinytf compiled   torch.compile(model), what `train.compile: true` does (--no-compile: skip it)

Method: after warm-up, the contenders run round-robin, `--rounds` times, each round
timing `--repeat` calls; we report medians, and ratios of medians taken in the same
run, so a busy machine slows everyone alike. Also measured: the machine's fp32 GEMM
peak (the best of a few large square matmuls), each contender's model-FLOPs
utilisation (MFU) against it, the matmul floor ("matmuls only": the step's matrix
products alone, on random data), tinytf's forward with `return_attention=True` against
a plain forward, and the fixed cost of one tinytf step at batch 1 x 8 tokens.
`--profile` prints instead where the time of tinytf's step goes, eager and compiled
(torch.profiler, self time per operator).

Model FLOPs of one training step, the PaLM paper's count (forward + backward = 3 x forward):
    6 * N * tokens  +  12 * L * T * D * tokens
N: the weight matrices of the layers and the (tied) output projection (D x V); biases,
LayerNorms and the embedding lookup do no matmul. The second term is the attention
scores Q K^T and weighted sums P V (not reduced for causality). MFU divides this count
by every contender's step time: the work of the model, not of an implementation. Each
run checks the count twice with torch.utils.flop_counter.FlopCounterMode, and prints
whether both agree: over one forward and backward pass of the tinytf model with
`return_attention=True` (attention as plain matmuls, which FlopCounterMode counts; it
has no formula for PyTorch's fused attention kernel on a CPU), and over the products
of the matmul floor.

Scope: CPU, fp32 only. Every tensor lives on the CPU and calls return when their work is
done, so time.perf_counter around them measures it. A CUDA run would need: models and
tensors moved to the device; torch.cuda.synchronize() (or CUDA events) around every timed
region, since kernels launch asynchronously; the peak measured in the dtype actually used
(fp32 matmuls may run as TF32 on tensor cores, bf16 under autocast); and larger shapes,
since at these a GPU step is mostly kernel-launch overhead.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from contenders import CONTENDERS, Shape, tinytf_model
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

SHAPES = {
    "tiny": dict(vocab=64, seq=32, batch=64, d_model=64, heads=4, layers=2, d_ff=256),
    "default": dict(vocab=64, seq=64, batch=32, d_model=128, heads=4, layers=4, d_ff=512),
    "small": dict(vocab=64, seq=128, batch=16, d_model=256, heads=8, layers=4, d_ff=1024),
}

FLOOR = "matmuls only"  # not a contender: the floor under every contender's step (see matmul_floor)
COMPILED = "tinytf compiled"  # tinytf's model under torch.compile, as train.compile: true trains it


# --------------------------------------------------------------------------- FLOPs


def model_flops_per_step(shape: Shape) -> int:
    """The PaLM count of one training step's model FLOPs: 6 N tokens + 12 L T D tokens.

    N counts weight matrices only: per layer W_Q W_K W_V W_O (4 D^2) and the FFN's two
    (2 D F), plus the output projection (D V). Each weight does 2 FLOPs per token forward
    and 4 backward (grad wrt input, grad wrt weight). Attention does Q K^T and P V,
    2 T D FLOPs per token each forward, twice that backward: 12 T D per token and layer.
    """
    d, f, tokens = shape.d_model, shape.d_ff, shape.batch * shape.seq
    weights = shape.layers * (4 * d * d + 2 * d * f) + d * shape.vocab
    return 6 * weights * tokens + 12 * shape.layers * shape.seq * d * tokens


def counted_flops_per_step(model: nn.Module, tokens: torch.Tensor) -> int:
    """FLOPs FlopCounterMode counts in one forward and backward pass of the tinytf `model` on
    tokens (B, T), its attention computed as plain matmuls (`return_attention=True`). The
    optimizer step does no matmul. Leaves no gradients behind."""
    targets = torch.roll(tokens, -1, dims=1)
    with FlopCounterMode(display=False) as counter:
        logits, _ = model(tokens, return_attention=True)  # (B, T, V)
        F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


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


# --------------------------------------------------------------------------- the matmul floor


@dataclass(frozen=True)
class MatmulProduct:
    """One matrix product of a training step, on random operands of the right shapes."""

    name: str  # where in the model, which pass, and the product, e.g. "layer 0 ffn.up grad wrt weight: dY^T X"
    left: torch.Tensor
    right: torch.Tensor

    def __call__(self) -> torch.Tensor:
        return self.left @ self.right


def linear_products(where: str, rows: int, d_in: int, d_out: int) -> tuple[MatmulProduct, list[MatmulProduct]]:
    """A linear layer Y = X W^T, X (rows, d_in), W (d_out, d_in): its forward product, and its
    two backward products, given dY (rows, d_out)."""
    x, w, dy = torch.randn(rows, d_in), torch.randn(d_out, d_in), torch.randn(rows, d_out)
    forward = MatmulProduct(f"{where} forward: X W^T", x, w.T)  # (rows, d_in) @ (d_in, d_out)
    backward = [
        MatmulProduct(f"{where} grad wrt input: dY W", dy, w),  # (rows, d_out) @ (d_out, d_in)
        MatmulProduct(f"{where} grad wrt weight: dY^T X", dy.T, x),  # (d_out, rows) @ (rows, d_in)
    ]
    return forward, backward


def attention_products(where: str, heads: int, seq: int, head_dim: int) -> tuple[list[MatmulProduct], ...]:
    """softmax(Q K^T / sqrt(D_h)) V over `heads` = B x H independent heads: the forward's two
    products and the backward's four. dO is the gradient wrt the output, dS wrt the scores."""
    q, k, v, d_out = torch.randn(4, heads, seq, head_dim)  # each (B*H, T, D_h)
    probs, d_scores = torch.randn(2, heads, seq, seq)  # P and dS, each (B*H, T, T)
    forward = [
        MatmulProduct(f"{where} forward: scores Q K^T", q, k.transpose(1, 2)),
        MatmulProduct(f"{where} forward: output P V", probs, v),
    ]
    backward = [
        MatmulProduct(f"{where} grad wrt P: dO V^T", d_out, v.transpose(1, 2)),
        MatmulProduct(f"{where} grad wrt V: P^T dO", probs.transpose(1, 2), d_out),
        MatmulProduct(f"{where} grad wrt Q: dS K", d_scores, k),
        MatmulProduct(f"{where} grad wrt K: dS^T Q", d_scores.transpose(1, 2), q),
    ]
    return forward, backward


def matmul_floor(shape: Shape) -> list[MatmulProduct]:
    """Every matrix product of one training step of this shape, in the order a step runs them:
    each layer's forward, the output projection's forward and backward, each layer's
    backward, last layer first. Names follow tinytf's modules (qkv_proj, out_proj, ffn.up,
    ffn.down, lm_head); each layer has its own operands, as a real model does.
    """
    rows, d, f = shape.batch * shape.seq, shape.d_model, shape.d_ff
    forward: list[MatmulProduct] = []
    backward: list[list[MatmulProduct]] = []  # per layer, in backward order within the layer
    for layer in range(shape.layers):
        qkv_proj, qkv_proj_backward = linear_products(f"layer {layer} qkv_proj", rows, d, 3 * d)
        attention, attention_backward = attention_products(
            f"layer {layer} attention", shape.batch * shape.heads, shape.seq, d // shape.heads
        )
        out_proj, out_proj_backward = linear_products(f"layer {layer} out_proj", rows, d, d)
        up, up_backward = linear_products(f"layer {layer} ffn.up", rows, d, f)
        down, down_backward = linear_products(f"layer {layer} ffn.down", rows, f, d)
        forward += [qkv_proj, *attention, out_proj, up, down]
        backward.append(down_backward + up_backward + out_proj_backward + attention_backward + qkv_proj_backward)
    lm_head, lm_head_backward = linear_products("lm_head", rows, d, shape.vocab)
    return forward + [lm_head, *lm_head_backward] + [p for layer in reversed(backward) for p in layer]


def matmuls_only(products: list[MatmulProduct]) -> Callable[[], None]:
    """One call runs the matmul floor's `products`: the floor under any fp32 implementation's
    step time at their shape, whatever it does around them."""

    def step() -> None:
        for product in products:
            product()

    return step


def floor_flops(products: list[MatmulProduct]) -> int:
    """FLOPs FlopCounterMode counts in `products`, the matmul floor of a step."""
    with FlopCounterMode(display=False) as counter:
        for product in products:
            product()
    return counter.get_total_flops()


# --------------------------------------------------------------------------- timing


def timed(fn: Callable[[], object], repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def round_robin(fns: dict[str, Callable[[], object]], rounds: int, repeat: int) -> dict[str, float]:
    """Median seconds per call of each fn, measured interleaved."""
    for fn in fns.values():
        fn(), fn()  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(timed(fn, repeat))
    return {name: statistics.median(times) for name, times in samples.items()}


def training_step(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor, vocab: int) -> Callable[[], None]:
    """One forward, loss, backward and fused AdamW step on `tokens`."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step() -> None:
        logits = model(tokens)  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def bench_shape(name: str, shape: Shape, rounds: int, repeat: int, peak: float, compiled: bool) -> dict:
    torch.manual_seed(0)
    tokens = torch.randint(0, shape.vocab, (shape.batch, shape.seq))
    targets = torch.roll(tokens, -1, dims=1)
    models = {key: make(shape) for key, make in CONTENDERS.items()}
    models = {key: model for key, model in models.items() if model is not None}
    flops = model_flops_per_step(shape)
    floor = matmul_floor(shape)

    steps = {key: training_step(model, tokens, targets, shape.vocab) for key, model in models.items()}
    compile_s = None
    if compiled:  # what train.compile does: torch.compile the model; the first step compiles it
        steps[COMPILED] = training_step(torch.compile(tinytf_model(shape)), tokens, targets, shape.vocab)
        compile_s = timed(steps[COMPILED], 1)
    steps[FLOOR] = matmuls_only(floor)
    step_time = round_robin(steps, rounds, repeat)

    ours = models["tinytf"].eval()
    with torch.no_grad():
        forward_time = round_robin(
            {
                "plain": lambda: ours(tokens),
                "return_attention": lambda: ours(tokens, return_attention=True),
                "torch-encoder": lambda: models["torch-encoder"](tokens),
            },
            rounds,
            repeat,
        )

    n_tokens = shape.batch * shape.seq
    rows = {
        key: {
            "step_ms": 1e3 * seconds,
            "tokens_per_s": n_tokens / seconds,
            "mfu": flops / seconds / peak,
            "speed_vs_tinytf": step_time["tinytf"] / seconds,
        }
        for key, seconds in step_time.items()
    }
    floor_time = step_time[FLOOR]
    return {
        "shape": name,
        **shape.__dict__,
        "train": rows,
        "model_flops": flops,  # the formula's: 6 N tokens + 12 L T D tokens
        "model_flops_counted": counted_flops_per_step(models["tinytf"], tokens),
        "matmul_floor_flops": floor_flops(floor),
        # The most any implementation could gain over torch-encoder if it did nothing but its matmuls.
        "ceiling_vs_torch_encoder": step_time["torch-encoder"] / floor_time,
        "ceiling_vs_textbook": step_time["textbook"] / floor_time,
        "compile_s": compile_s,
        "forward_ms": {key: 1e3 * value for key, value in forward_time.items()},
        "return_attention_ratio": forward_time["return_attention"] / forward_time["plain"],
    }


def bench_fixed_cost(rounds: int) -> float:
    """ms of one tinytf training step at batch 1, 8 tokens (default shape otherwise)."""
    shape = Shape(**{**SHAPES["default"], "batch": 1, "seq": 8})
    tokens = torch.randint(0, shape.vocab, (1, 8))
    step = training_step(tinytf_model(shape), tokens, torch.roll(tokens, -1, dims=1), shape.vocab)
    return 1e3 * round_robin({"step": step}, rounds, 20)["step"]


def profile_step(shape: Shape, steps: int = 20) -> None:
    """Print where tinytf's training step spends its time, eager and compiled: self time
    per operator per step (torch.profiler), largest first."""
    torch.manual_seed(0)
    tokens = torch.randint(0, shape.vocab, (shape.batch, shape.seq))
    targets = torch.roll(tokens, -1, dims=1)
    for label, model in (("eager", tinytf_model(shape)), ("compiled", torch.compile(tinytf_model(shape)))):
        step = training_step(model, tokens, targets, shape.vocab)
        step(), step()  # warm-up (and compilation)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
            timed(step, steps)
        events = [e for e in profiler.key_averages() if e.self_cpu_time_total > 0]
        total_ms = sum(e.self_cpu_time_total for e in events) / 1e3 / steps
        print(f"\n### {label}: {total_ms:.1f} ms of operator self time per step\n")
        print("| operator | ms per step | share |\n|---|---:|---:|")
        for event in sorted(events, key=lambda e: -e.self_cpu_time_total)[:15]:
            ms = event.self_cpu_time_total / 1e3 / steps
            print(f"| {event.key} | {ms:.2f} | {ms / total_ms:.0%} |")


# --------------------------------------------------------------------------- report


def print_report(peak: float, shapes: list[dict], fixed_ms: float) -> None:
    print(f"fp32 GEMM peak: {peak / 1e9:.1f} GFLOP/s ({torch.get_num_threads()} threads, torch {torch.__version__})")
    for result in shapes:
        dims = ", ".join(f"{k} {result[k]}" for k in ("batch", "seq", "d_model", "heads", "layers", "d_ff", "vocab"))
        print(f"\n### {result['shape']} ({dims})\n")
        flops = result["model_flops"]
        counts = {"tinytf's step": result["model_flops_counted"], "the matmul floor": result["matmul_floor_flops"]}
        checks = "; ".join(
            f"{what}: {'equal' if count == flops else f'NOT equal, {count / 1e9:.4f} GFLOP'}"
            for what, count in counts.items()
        )
        print(f"model FLOPs of a step (6·N·tokens + 12·L·T·D·tokens): {flops / 1e9:.4f} GFLOP")
        print(f"counted by FlopCounterMode in {checks}\n")
        print("| contender | step (ms) | tokens/s | MFU | tinytf is |")
        print("|---|---:|---:|---:|---:|")
        for key, row in result["train"].items():
            print(
                f"| {key} | {row['step_ms']:.1f} | {row['tokens_per_s']:,.0f} | {row['mfu']:.0%} | "
                f"{1 / row['speed_vs_tinytf']:.2f}x |"
            )
        if result["compile_s"] is not None:
            print(f"\n{COMPILED}: compiling took {result['compile_s']:.1f} s (the first step)")
        print(
            f"\nThe step's matmuls alone take {result['train'][FLOOR]['step_ms']:.1f} ms: no fp32 implementation "
            f"can train faster than {result['ceiling_vs_torch_encoder']:.2f}x torch-encoder or "
            f"{result['ceiling_vs_textbook']:.2f}x textbook at this shape on this machine."
        )
        forward = result["forward_ms"]
        ratio = result["return_attention_ratio"]
        print(
            f"\nforward: plain {forward['plain']:.2f} ms, return_attention=True "
            f"{forward['return_attention']:.2f} ms ({ratio:.2f}x), "
            f"torch-encoder {forward['torch-encoder']:.2f} ms"
        )
    print(f"\nfixed cost of a tinytf training step at batch 1 x 8 tokens: {fixed_ms:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=[*SHAPES, "all"], default="all")
    for key in Shape.__dataclass_fields__:
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, default=None, help="a custom shape")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--profile", action="store_true", help="where tinytf's step spends its time, and stop")
    parser.add_argument("--no-compile", action="store_true", help=f"skip the {COMPILED!r} row (~20 s to compile)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    custom = {key: getattr(args, key) for key in Shape.__dataclass_fields__ if getattr(args, key) is not None}
    if custom:
        shapes = {"custom": Shape(**{**SHAPES["default"], **custom})}
    else:
        names = list(SHAPES) if args.shape == "all" else [args.shape]
        shapes = {name: Shape(**SHAPES[name]) for name in names}

    if args.profile:
        for shape in shapes.values():
            profile_step(shape)
        return
    peak = gemm_peak_flops(args.rounds)
    results = [
        bench_shape(name, shape, args.rounds, args.repeat, peak, not args.no_compile) for name, shape in shapes.items()
    ]
    fixed_ms = bench_fixed_cost(args.rounds)
    print_report(peak, results, fixed_ms)
    if args.json:
        args.json.write_text(
            json.dumps({"gemm_peak_flops": peak, "shapes": results, "fixed_step_ms": fixed_ms}, indent=1)
        )


if __name__ == "__main__":
    main()
