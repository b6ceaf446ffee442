"""The command line: real exit codes, one-line errors, no tracebacks."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tinytf.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_config_show_prints_every_resolved_key(path):
    result = runner.invoke(app, ["config", "show", str(path)])
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.stdout)
    assert set(shown) == {"task", "model", "train", "log", "seed"}
    assert shown["model"]["d_model"] == yaml.safe_load(path.read_text())["model"]["d_model"]
    assert "d_ff" in shown["model"] and "warmup_steps" in shown["train"]  # defaults filled in


def test_config_show_applies_overrides():
    result = runner.invoke(
        app, ["config", "show", str(ROOT / "configs/quickstart.yaml"), "--set", "model.d_model=32", "--set", "seed=3"]
    )
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.stdout)
    assert shown["model"]["d_model"] == 32 and shown["seed"] == 3


@pytest.mark.parametrize(
    "file_text, args, fragment",
    [
        (None, [], "missing.yaml: config file not found"),
        ("", ["--set", "model.d_modle=3"], "did you mean 'd_model'?"),
        ("model:\n  n_heads: four\n", [], "model.n_heads = 'four'"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(file_text, args, fragment, tmp_path):
    path = tmp_path / "missing.yaml"
    if file_text is not None:
        path.write_text(file_text)
    result = runner.invoke(app, ["config", "show", str(path), *args])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert fragment in result.stderr


def test_python_dash_m_reports_errors_without_traceback(tmp_path):
    """Through a real process: the installed entry point's exit code and stderr."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  d_model: 64\n   n_heads: 4\n")
    process = subprocess.run(
        [sys.executable, "-m", "tinytf", "config", "show", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert process.returncode == 2
    assert "Traceback" not in process.stderr
    assert (
        process.stderr.strip() == f"error: {bad}: line 3, column 11: invalid YAML: mapping values are not allowed here"
    )


def test_help_lists_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "config" in result.stdout
