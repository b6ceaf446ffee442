"""Tests that need more than `pip install` (a browser, root to mount a small disk): where the
thing is missing they skip, saying what is missing and the command that installs it, so the
README's test command passes on any fresh machine. In CI (the environment variable `CI` set,
as `.ci/run` sets it) they fail instead: CI installs everything, so nothing promised goes
untested there.

    if not found:
        unavailable("no Chromium in /usr/bin nor on the PATH", "apt-get install chromium")
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """True when `CI` is set to anything but an empty string, 0, false or no (CI services set it to true or 1)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(missing: str, install: str) -> NoReturn:
    """Skip the test (fail it in CI), saying what is missing and the command that installs it."""
    reason = f"{missing}; install with: {install}"
    if in_ci():
        pytest.fail(f"{reason} (CI is set, and CI runs every test)", pytrace=False)
    pytest.skip(reason)
