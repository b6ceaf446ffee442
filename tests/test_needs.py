"""The rule for tests that need more than `pip install` (tests/needs.py), on the browser
tests: without Chromium they skip with the reason and the install command, unless `CI` is
set, where they fail."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT
from needs import in_ci

MISSING = "/nonexistent/chromium"


def run_browser_tests(ci: str | None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    env |= {"TINYTF_CHROMIUM": MISSING, "OMP_NUM_THREADS": "1"}
    if ci is not None:
        env["CI"] = ci
    command = [sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", "tests/test_viewer_browser.py"]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_without_chromium_the_browser_tests_skip_saying_what_to_install():
    done = run_browser_tests(ci=None)
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0, done.stdout[-2000:]
    assert "skipped" in summary and "passed" not in summary and "failed" not in summary and "error" not in summary
    reason = f"TINYTF_CHROMIUM={MISSING} is not an executable file; install with: apt-get install chromium"
    assert "SKIPPED [" in done.stdout and reason in done.stdout  # -ra prints each reason


def test_with_ci_set_a_missing_chromium_fails_the_browser_tests():
    done = run_browser_tests(ci="1")
    assert done.returncode == 1, done.stdout[-2000:]
    assert "skipped" not in done.stdout.strip().splitlines()[-1]
    assert "CI is set, and CI runs every test" in done.stdout


CI_VALUES = [("1", True), ("true", True), ("", False), ("0", False), ("false", False), ("no", False)]


@pytest.mark.parametrize(("value", "set_"), CI_VALUES)
def test_ci_counts_as_set_unless_empty_zero_false_or_no(monkeypatch, value, set_):
    monkeypatch.setenv("CI", value)
    assert in_ci() is set_
