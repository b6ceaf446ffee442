"""The shape of the code: which module may import which, what the command line loads
before it does any work, and where per-architecture rules may live."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tinytf"
ARCHS = {"encoder", "decoder", "encoder-decoder"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(path: Path) -> set[str]:
    """Every tinytf module `path` imports, anywhere in the file: at the top, inside a
    function, or under `if TYPE_CHECKING`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from tinytf.tasks import base` imports the module tinytf.tasks.base
            found |= {
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names
            }
    return {name for name in found if name in MODULES}


def test_the_import_graph_has_no_cycle():
    graph = {name: imported_modules(path) - {name} for name, path in MODULES.items()}
    # A package imports its own modules; a module never imports its package back.
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycle = [*trail[trail.index(name) :], name]
            pytest.fail(f"import cycle: {' -> '.join(cycle)}")
        if name in done:
            return
        for other in sorted(graph[name]):
            visit(other, [*trail, name])
        done.add(name)

    for name in graph:
        visit(name, [])


def test_the_config_schema_imports_nothing_of_tinytf_but_its_errors_and_file_readers():
    schema_layer = {"tinytf.config.keys", "tinytf.errors", "tinytf.files", "tinytf.config.plain_yaml"}
    assert imported_modules(MODULES["tinytf.config"]) <= schema_layer
    assert imported_modules(MODULES["tinytf.config.keys"]) <= schema_layer
    assert imported_modules(MODULES["tinytf.errors"]) == set()
    program = "import sys, tinytf.config\nprint(sorted(m for m in sys.modules if m.startswith(('tinytf', 'torch'))))"
    result = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=60)
    expected = sorted(
        ["tinytf", "tinytf.config", "tinytf.config.keys", "tinytf.config.plain_yaml", "tinytf.errors", "tinytf.files"]
    )
    assert result.stdout.strip() == str(expected), result.stderr


def architecture_comparisons(source: str) -> list[int]:
    """Lines that compare an architecture: `arch == ...`, `x.arch != ...`, or `arch in` a
    literal of architecture names. (`arch in task.archs` asks a declaration: allowed.)"""

    def names_arch(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id == "arch") or (
            isinstance(node, ast.Attribute) and node.attr == "arch"
        )

    def arch_literal(node: ast.expr) -> bool:
        values = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
        return any(isinstance(v, ast.Constant) and v.value in ARCHS for v in values)

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            membership = all(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
            if any(map(names_arch, operands)) and (not membership or any(map(arch_literal, operands))):
                lines.append(node.lineno)
    return lines


MODEL_LAYOUT = "tinytf.interop.transformer_lens"  # the model's parts, laid out for TransformerLens


def test_the_architecture_check_tells_a_rule_from_a_declaration():
    assert architecture_comparisons("if config.model.arch == 'decoder': pass") == [1]
    assert architecture_comparisons("x = 1\nok = arch in ('encoder', 'encoder-decoder')") == [2]
    assert architecture_comparisons("if arch not in task.archs: pass") == []
    assert architecture_comparisons("if stack == 'encoder': pass") == []


def test_only_the_model_and_the_framings_look_at_the_architecture():
    # A rule that depends on model.arch belongs to a Framing class (or to the model that
    # the architecture shapes, and its translation into TransformerLens's layout), not to
    # an `if arch == ...` elsewhere.
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for name, path in MODULES.items()
        if not (name.startswith("tinytf.model") or name in ("tinytf.data.framing", MODEL_LAYOUT))
        for line in architecture_comparisons(path.read_text())
    ]
    assert not offenders


def architecture_decisions(source: str) -> list[int]:
    """Lines that decide the architecture by its parts: `x.encoder is None`, `.decoder is not
    None`, or `isinstance(x, SomeFraming)` / `issubclass(..., SomeFraming)`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and all(isinstance(op, ast.Is | ast.IsNot) for op in node.ops):
            operands = (node.left, *node.comparators)
            if any(isinstance(o, ast.Attribute) and o.attr in ("encoder", "decoder") for o in operands):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("isinstance", "issubclass"):
            lines += [node.lineno] if len(node.args) > 1 and "Framing" in ast.unparse(node.args[1]) else []
    return sorted(set(lines))


def test_the_architecture_decision_check_finds_each_spelling():
    assert architecture_decisions("if model.decoder is None or model.encoder is not None: pass") == [1]
    assert architecture_decisions("ok = isinstance(framing, DecoderFraming | LanguageModelFraming)") == [1]
    assert architecture_decisions("ok = framing.predicts_next_token and model.is_decoder_only") == []
    assert architecture_decisions("if value is None: pass\nok = isinstance(x, base.Framing)") == [2]


def test_only_the_model_and_the_framings_decide_by_the_architecture_s_parts():
    # Outside them, a rule asks the model (`is_decoder_only`) or the framing (`next_token_prompt`).
    framings = {"tinytf.data.framing", "tinytf.data.base", "tinytf.data.language_model"}
    sources = {
        name: path
        for name, path in MODULES.items()
        if not (name.startswith("tinytf.model") or name in framings or name == MODEL_LAYOUT)
    }
    sources |= {f"scripts/{path.name}": path for path in (ROOT / "scripts").glob("*.py")}
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sources.values()
        for line in architecture_decisions(path.read_text())
    ]
    assert not offenders


FAST_COMMANDS = [
    ["--help"],
    *[[command, "--help"] for command in ("train", "attend", "predict", "eval", "tasks", "board")],
    ["config", "show", "--help"],
    ["sweep", "--help"],
    ["sweep", "show", "--help"],
    ["config", "show", "configs/quickstart.yaml"],
    ["config", "show", "configs/add-decoder.yaml", "--set", "task.digits=4"],
    ["config", "show", "configs/sort-decoder.yaml", "--set", "task.digits=4"],  # an error: still no torch
]


def test_help_and_config_show_never_import_torch():
    """Every fast command in turn, in one fresh process: after each, torch is still not loaded."""
    program = (
        "import sys\n"
        "from tinytf.cli.app import app\n"
        f"for args in {FAST_COMMANDS!r}:\n"
        "    try:\n"
        "        app(args, prog_name='tinytf')\n"
        "    except SystemExit as exit:\n"
        "        code = exit.code\n"
        "    loaded = 'torch loaded' if 'torch' in sys.modules else 'torch not loaded'\n"
        "    print(' '.join(args), '|', loaded, code, file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=60)
    reports = [line for line in result.stderr.splitlines() if " | " in line]
    assert [report.partition(" | ")[0] for report in reports] == [" ".join(args) for args in FAST_COMMANDS], (
        result.stderr
    )
    for args, report in zip(FAST_COMMANDS, reports, strict=True):
        expected_code = 2 if "sort-decoder" in " ".join(args) else 0
        assert report.endswith(f"| torch not loaded {expected_code}"), report


# Modules that readers without a model use (config show, sweep show, the memory check,
# scripts that read metrics): importing them must not load torch (about 2 s).
TORCH_FREE = [
    "tinytf.config",
    "tinytf.tasks",
    "tinytf.data.framing",
    "tinytf.model.names",
    "tinytf.model.size",
    "tinytf.run.setup",
    "tinytf.run.folder",
    "tinytf.training.memory",
    "tinytf.cli.app",
    "tinytf.cli.output",
    "tinytf.sweep.results",
]


def test_the_modules_that_need_no_model_load_without_torch():
    program = f"import importlib, sys\nfor name in {TORCH_FREE!r}:\n    importlib.import_module(name)\n"
    program += "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    result = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stderr or result.stdout


def test_the_lazy_torch_is_the_real_torch_once_used():
    program = (
        "import sys\n"
        "from tinytf.lazy import torch\n"
        "import tinytf.tasks, tinytf.data.framing, tinytf.run.setup\n"
        "assert 'torch' not in sys.modules\n"
        "print(torch.ones(2).sum().item(), 'torch' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["2.0", "True"], result.stderr


# The layers, bottom up, by package (or foundation module). A module imports only from its
# own layer or the ones below; the public import paths (tinytf/attend.py...) sit on top.
LAYERS = [
    ("errors", "lazy", "arguments", "files", "device", "tensors", "config"),  # no torch at load time; the config schema
    ("tasks", "model"),  # the examples; the Transformer
    ("data",),  # examples framed into batches for an architecture; held-out set, training stream
    ("run",),  # one run: its setup, its folder, its checkpoints
    ("inspect", "interop"),  # looking inside a model, and the figures that show it; models that leave tinytf
    ("training",),  # training one run
    ("sweep",),  # many runs on Optuna
    ("cli",),  # the command line
]
PUBLIC_PATHS = {"attend", "evaluate", "heads", "patching", "fourier", "framing", "loggers"}


def layer_of(name: str) -> int:
    """The layer of a module: the first part of its name below tinytf."""
    part = name.split(".")[1]
    if part in PUBLIC_PATHS or part == "__main__":
        return len(LAYERS)
    return next(number for number, parts in enumerate(LAYERS) if part in parts)


def test_every_module_has_a_layer():
    placed = [name for name in MODULES if name != "tinytf"]
    assert all(name.split(".")[1] in PUBLIC_PATHS | {"__main__"} | set().union(*LAYERS) for name in placed)
    flat = sorted(path.stem for path in PACKAGE.glob("*.py")) + sorted(
        path.name for path in PACKAGE.iterdir() if path.is_dir() and (path / "__init__.py").exists()
    )
    assert set(flat) == {"__init__", "__main__"} | PUBLIC_PATHS | set().union(*LAYERS), flat


def test_modules_import_only_from_their_layer_or_below():
    placed = [name for name in MODULES if name != "tinytf"]
    upward = [
        f"{a} -> {b}"
        for a in placed
        for b in imported_modules(MODULES[a])
        if b != "tinytf" and layer_of(b) > layer_of(a)
    ]
    assert not upward


def test_nothing_inside_tinytf_imports_a_public_path():
    """The public paths re-export for scripts and notebooks; the code imports where things live."""
    inside = [name for name in MODULES if name != "tinytf" and name.split(".")[1] not in PUBLIC_PATHS]
    users = [
        f"{a} -> {b}"
        for a in inside
        for b in imported_modules(MODULES[a])
        if b.split(".")[-1] in PUBLIC_PATHS and b.count(".") == 1
    ]
    assert not users


ARCHITECTURE_DOC = ROOT / "docs" / "architecture.md"  # the layers and where each idea lives


def test_the_architecture_doc_names_every_module_and_package():
    text = ARCHITECTURE_DOC.read_text()
    for name, path in MODULES.items():
        if path.name in ("__init__.py", "__main__.py") or name.split(".")[1] in {"model", "tasks"} | PUBLIC_PATHS:
            continue
        assert f"`{path.name}`" in text, f"docs/architecture.md does not mention {path.name}"
    for parts in LAYERS:
        for part in parts:
            assert f"`{part}/`" in text or f"`{part}.py`" in text, f"docs/architecture.md does not mention {part}"


def test_every_module_and_function_stays_short_enough_to_read():
    """No module of tinytf/ over 450 lines, no function over 50 (docstring included)."""
    too_long = []
    for path in sorted((ROOT / "tinytf").rglob("*.py")):
        source = path.read_text()
        if source.count("\n") > 450:
            too_long.append(f"{path.relative_to(ROOT)}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            length = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and length > 50:
                too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines")
    assert too_long == []


def test_no_method_raises_a_bare_not_implemented_error():
    """Each says why: a subclass that must define it, or (`NotApplicableError`) what applies instead."""
    bare = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            exc = node.exc if isinstance(node, ast.Raise) else None
            called = exc.func if isinstance(exc, ast.Call) and not (exc.args or exc.keywords) else exc
            if isinstance(called, ast.Name) and called.id == "NotImplementedError":
                bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert bare == []


# An activation's name is built and read in model/names.py alone (ActName, act_name, child,
# is_value): an f-string that appends a part to a name, or a split at its dots, elsewhere
# would be a second spelling of the scheme. Config modules split dotted config keys.
NAME_PARTS = "q|k|v|pattern|z|resid_pre|attn_out|resid_mid|cross_attn_out|resid_mid_cross|mlp_out|resid_post|self|cross"
BUILT_NAME = re.compile(r'f"[^"\n]*(?:\}\.(?:' + NAME_PARTS + r")\b|\{[^}]*stack[^}]*\}\.\{|\{act_name\([^)]*\)\}\.)")
READ_NAME = re.compile(r'\.split\("\."\)|\.(?:removesuffix|endswith)\("\.\w')
CONFIG_KEY_MODULES = {PACKAGE / "config" / "__init__.py", PACKAGE / "config" / "keys.py", PACKAGE / "run" / "setup.py"}


def test_activation_names_are_built_and_read_in_one_place():
    sources = [*PACKAGE.rglob("*.py"), *(ROOT / "scripts").glob("*.py")]
    found = []
    for path in sources:
        if path == PACKAGE / "model" / "names.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            read = READ_NAME.search(line) and path not in CONFIG_KEY_MODULES
            if BUILT_NAME.search(line) or read:
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_name_patterns_catch_the_spellings_they_forbid():
    assert BUILT_NAME.search('name = f"decoder.{layer}.self.z"') and BUILT_NAME.search('f"{self.name}.pattern"')
    assert BUILT_NAME.search('f"{stack}.{layer}.{kind}"') and READ_NAME.search('stack, _, kind = name.split(".")')
    assert READ_NAME.search('name.removesuffix(".pattern")') and not READ_NAME.search('message.removesuffix(".")')
    assert BUILT_NAME.search('f"{act_name(stack, layer, kind)}.{head}"')
    assert not BUILT_NAME.search('f"{path}: cannot read"') and not BUILT_NAME.search('f"{layer}.{head}"')
