"""Speed of a tinytf training step next to the implementations users would otherwise pick, in one process.

    python scripts/bench.py                      # the three reference shapes
    python scripts/bench.py --shape default      # one of them
    python scripts/bench.py --d-model 96 --layers 3 --heads 4 --seq 48 --batch 16   # any shape
    python scripts/bench.py --json bench.json
    python scripts/bench.py --paths              # the attention path rule's measurements
    python scripts/bench.py --paths --padded     # the same under a padding bias

(What making each task's batches costs is measured by scripts/bench_tasks.py.)

Contenders (scripts/contenders.py says what each is and why the comparison is fair), each
a causal language model of the same shape trained with the same optimizer (fused AdamW)
on the same random tokens:
    tinytf            tinytf.build_model (fused QKV; attention on the path its shape rule
                      picks: explicit for 1-48 keys on a CPU but 16 at head widths under
                      32, else PyTorch's fused kernel)
    torch-encoder     torch.nn.TransformerEncoder (pre-LN, GELU) with a causal mask
    textbook          the seed chapter's code: separate W_Q, W_K, W_V, W_O, masked_fill
                      + softmax, post-LN, ReLU
    x-transformers    x_transformers.TransformerWrapper, if that package is installed
and tinytf three more ways, to measure its own choices:
    tinytf fused      the same model always on the fused kernel     } the shape rule
    tinytf explicit   the same model always on the explicit path    } (attention.py)
    tinytf post/relu  the textbook's design (post-LN, ReLU) built by tinytf: same model as textbook
    tinytf compiled   torch.compile(model), what `train.compile: true` does (--no-compile: skip it)

Method: after warm-up, the contenders run round-robin, `--rounds` times, each round
timing `--repeat` calls; we report medians, and ratios of medians taken in the same
run, so a busy machine slows everyone alike. Also measured: the machine's fp32 GEMM
peak (the best of a few large square matmuls), each contender's model-FLOPs
utilisation (MFU) against it, the matmul floor ("matmuls only": the step's matrix
products alone, on random data), tinytf's forward with `return_attention=True` against
a plain forward, and the fixed cost of one tinytf step at batch 1 x 8 tokens.
`--profile` prints instead where the time of tinytf's step goes, eager and compiled
(torch.profiler, self time per operator). `--paths` measures instead what attention.py's
shape rule rests on: whole training steps of a 2-layer causal LM (batch x keys = 2,048
tokens) with each attention path forced, over key lengths and three head widths, and which
path the rule picks at each; with `--padded`, of a 2-layer encoder whose rows are padded
to the longest, so that every attention runs under a padding bias.

Model FLOPs of one training step are counted by torch.utils.flop_counter.FlopCounterMode
over one forward and backward pass of the tinytf model; they equal the PaLM paper's
count (forward + backward = 3 x forward), which a test holds:
    6 * N * tokens  +  12 * L * T * D * tokens
N: the weight matrices of the layers and the (tied) output projection (D x V); biases,
LayerNorms and the embedding lookup do no matmul. The second term is the attention
scores Q K^T and weighted sums P V (not reduced for causality). MFU divides the same
count by every contender's step time: the work of the model, not of an implementation.

Scope: CPU, fp32 only. Every tensor lives on the CPU and calls return when their work is
done, so time.perf_counter around them measures it. A CUDA run would need: models and
tensors moved to the device; torch.cuda.synchronize() (or CUDA events) around every timed
region, since kernels launch asynchronously; the peak measured in the dtype actually used
(fp32 matmuls may run as TF32 on tensor cores, bf16 under autocast); larger shapes, since
at these a GPU step is mostly kernel-launch overhead; and, for the FLOP count, nothing:
FlopCounterMode knows PyTorch's CUDA attention kernels (only the CPU one is added here).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from contenders import CONTENDERS, Shape, tinytf_model, tinytf_on_one_path
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from tinytf.model.attention import EXPLICIT_KEYS, EXPLICIT_KEYS_WIDE_HEADS, WIDE_HEAD_DIM, explicit_keys

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


def _cpu_attention_forward_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kw) -> int:
    """Q K^T: (.., T_q, D_h) x (.., D_h, T_k) and P V: (.., T_q, T_k) x (.., T_k, D_v), over all heads (..)."""
    *heads, queries, head_dim = query_shape
    keys, value_dim = key_shape[-2], value_shape[-1]
    return 2 * math.prod(heads) * queries * keys * (head_dim + value_dim)


def _cpu_attention_backward_flops(grad_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kw) -> int:
    """dP = dO V^T and dV = P^T dO (each T_q T_k D_v), dQ = dS K and dK = dS^T Q (each T_q T_k D_h)."""
    *heads, queries, head_dim = query_shape
    keys, value_dim = key_shape[-2], value_shape[-1]
    return 2 * math.prod(heads) * queries * keys * 2 * (head_dim + value_dim)


# FlopCounterMode (torch 2.13) has formulas for the CUDA attention kernels but not for the
# one F.scaled_dot_product_attention calls on the CPU; without these it would count 0.
CPU_ATTENTION_FLOPS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_forward_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward_flops,
}


def counted_flops_per_step(model: nn.Module, tokens: torch.Tensor) -> int:
    """FLOPs FlopCounterMode counts in one forward and backward pass of `model` on tokens (B, T)
    (the optimizer step does no matmul). Leaves no gradients behind."""
    targets = torch.roll(tokens, -1, dims=1)
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION_FLOPS) as counter:
        logits = model(tokens)  # (B, T, V)
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


def _linear_products(where: str, rows: int, d_in: int, d_out: int) -> tuple[MatmulProduct, list[MatmulProduct]]:
    """A linear layer Y = X W^T, X (rows, d_in), W (d_out, d_in): its forward product, and its
    two backward products, given dY (rows, d_out)."""
    x, w, dy = torch.randn(rows, d_in), torch.randn(d_out, d_in), torch.randn(rows, d_out)
    forward = MatmulProduct(f"{where} forward: X W^T", x, w.T)  # (rows, d_in) @ (d_in, d_out)
    backward = [
        MatmulProduct(f"{where} grad wrt input: dY W", dy, w),  # (rows, d_out) @ (d_out, d_in)
        MatmulProduct(f"{where} grad wrt weight: dY^T X", dy.T, x),  # (d_out, rows) @ (rows, d_in)
    ]
    return forward, backward


def _attention_products(where: str, heads: int, seq: int, head_dim: int) -> tuple[list[MatmulProduct], ...]:
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
        qkv_proj, qkv_proj_backward = _linear_products(f"layer {layer} qkv_proj", rows, d, 3 * d)
        attention, attention_backward = _attention_products(
            f"layer {layer} attention", shape.batch * shape.heads, shape.seq, d // shape.heads
        )
        out_proj, out_proj_backward = _linear_products(f"layer {layer} out_proj", rows, d, d)
        up, up_backward = _linear_products(f"layer {layer} ffn.up", rows, d, f)
        down, down_backward = _linear_products(f"layer {layer} ffn.down", rows, f, d)
        forward += [qkv_proj, *attention, out_proj, up, down]
        backward.append(down_backward + up_backward + out_proj_backward + attention_backward + qkv_proj_backward)
    lm_head, lm_head_backward = _linear_products("lm_head", rows, d, shape.vocab)
    return forward + [lm_head, *lm_head_backward] + [p for layer in reversed(backward) for p in layer]


def matmuls_only(shape: Shape) -> Callable[[], None]:
    """One call runs the matmul floor's products: the floor under any fp32 implementation's
    step time at this shape, whatever it does around them."""
    products = matmul_floor(shape)

    def step() -> None:
        for product in products:
            product()

    return step


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


def training_step(
    model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor, vocab: int, pad_mask: torch.Tensor | None = None
) -> Callable[[], None]:
    """One forward, loss, backward and fused AdamW step on `tokens`; with `pad_mask` (B, T),
    True at padding, every attention runs under a padding bias (the padded positions'
    targets count too: the step's time is the point, not its loss)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    inputs = {} if pad_mask is None else {"pad_mask": pad_mask}

    def step() -> None:
        logits = model(tokens, **inputs)  # (B, T, V)
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
    flops = counted_flops_per_step(models["tinytf"], tokens)
    formula_flops = model_flops_per_step(shape)

    steps = {key: training_step(model, tokens, targets, shape.vocab) for key, model in models.items()}
    compile_s = None
    if compiled:  # what train.compile does: torch.compile the model; the first step compiles it
        steps[COMPILED] = training_step(torch.compile(tinytf_model(shape)), tokens, targets, shape.vocab)
        compile_s = timed(steps[COMPILED], 1)
    steps[FLOOR] = matmuls_only(shape)
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
        "model_flops": flops,
        "model_flops_formula": formula_flops,
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


PATH_SWEEP_KEYS = (8, 12, 16, 20, 24, 28, 32, 48, 64)
PATH_SWEEP_WIDTHS = (16, 32, 64)  # head widths: d_model 64, 128 and 256 with 4 heads


def path_sweep(keys: tuple[int, ...], widths: tuple[int, ...], rounds: int, repeat: int, padded: bool) -> list[dict]:
    """Step time with attention always explicit / always fused, per (head width, keys):
    the measurements behind attention.explicit_keys. A 2-layer causal LM, no padding; or,
    `padded`, a 2-layer encoder whose rows (lengths drawn from keys / 2 to keys) are
    padded to the longest: attention under a padding bias."""
    rows = []
    for head_dim in widths:
        for seq in keys:
            d_model = 4 * head_dim
            shape = Shape(
                vocab=64, seq=seq, batch=max(8, 2048 // seq), d_model=d_model, heads=4, layers=2, d_ff=4 * d_model
            )
            torch.manual_seed(0)
            tokens = torch.randint(0, shape.vocab, (shape.batch, seq))
            targets = torch.roll(tokens, -1, dims=1)
            pad_mask = None
            if padded:
                lengths = torch.randint((seq + 1) // 2, seq + 1, (shape.batch,))  # (B,)
                lengths[0] = seq  # one row as long as the batch
                pad_mask = torch.arange(seq) >= lengths[:, None]  # (B, T), True at padding
            arch = "encoder" if padded else "decoder"
            steps = {
                path: training_step(
                    tinytf_on_one_path(shape, path == "explicit", arch), tokens, targets, shape.vocab, pad_mask
                )
                for path in ("explicit", "fused")
            }
            times = round_robin(steps, rounds, repeat)
            rows.append(
                {
                    "head_dim": head_dim,
                    "keys": seq,
                    "batch": shape.batch,
                    "padded": padded,
                    "explicit_ms": 1e3 * times["explicit"],
                    "fused_ms": 1e3 * times["fused"],
                    "rule": "explicit" if seq in explicit_keys(head_dim) else "fused",
                }
            )
    return rows


def spans(keys: Iterable[int]) -> str:
    """Key lengths as runs, e.g. "1-15, 17-48"."""
    runs: list[list[int]] = []
    for key in sorted(keys):
        if runs and key == runs[-1][1] + 1:
            runs[-1][1] = key
        else:
            runs.append([key, key])
    return ", ".join(f"{first}-{last}" if last > first else str(first) for first, last in runs)


def print_path_sweep(rows: list[dict]) -> None:
    rule = (
        f"explicit for {spans(EXPLICIT_KEYS)} keys, "
        f"{spans(EXPLICIT_KEYS_WIDE_HEADS)} at head widths from {WIDE_HEAD_DIM}"
    )
    case = "a 2-layer encoder under a padding bias" if rows and rows[0]["padded"] else "a 2-layer causal LM"
    print(f"Attention paths, whole training steps of {case} ({torch.get_num_threads()} threads); the rule: {rule}\n")
    print("| head width | keys | batch | explicit ms | fused ms | explicit / fused | rule picks | faster |")
    print("|---:|---:|---:|---:|---:|---:|---|---|")
    for row in rows:
        ratio = row["explicit_ms"] / row["fused_ms"]
        faster = "explicit" if ratio < 1 else "fused"
        print(
            f"| {row['head_dim']} | {row['keys']} | {row['batch']} | {row['explicit_ms']:.2f} | "
            f"{row['fused_ms']:.2f} | {ratio:.2f} | {row['rule']} | {faster} |"
        )


# --------------------------------------------------------------------------- report


def print_report(peak: float, shapes: list[dict], fixed_ms: float) -> None:
    print(f"fp32 GEMM peak: {peak / 1e9:.1f} GFLOP/s ({torch.get_num_threads()} threads, torch {torch.__version__})")
    for result in shapes:
        dims = ", ".join(f"{k} {result[k]}" for k in ("batch", "seq", "d_model", "heads", "layers", "d_ff", "vocab"))
        print(f"\n### {result['shape']} ({dims})\n")
        flops, formula = result["model_flops"], result["model_flops_formula"]
        agrees = "equal to" if flops == formula else f"NOT equal to, {formula / 1e9:.4f} GFLOP by"
        print(
            f"model FLOPs of a step: {flops / 1e9:.4f} GFLOP (FlopCounterMode; {agrees} 6·N·tokens + 12·L·T·D·tokens)\n"
        )
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
    parser.add_argument("--paths", action="store_true", help="time the two attention paths over key lengths, and stop")
    parser.add_argument("--keys", type=int, nargs="+", default=list(PATH_SWEEP_KEYS), help="--paths: key lengths")
    parser.add_argument("--padded", action="store_true", help="--paths: an encoder under a padding bias")
    parser.add_argument("--no-compile", action="store_true", help=f"skip the {COMPILED!r} row (~20 s to compile)")
    args = parser.parse_args()
    if min(args.keys) < 1:
        parser.error("--keys: key lengths must be at least 1")
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
    if args.padded and not args.paths:
        parser.error("--padded goes with --paths")
    if args.paths:
        rows = path_sweep(tuple(args.keys), PATH_SWEEP_WIDTHS, args.rounds, args.repeat, args.padded)
        print_path_sweep(rows)
        if args.json:
            args.json.write_text(json.dumps({"paths": rows}, indent=1))
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
