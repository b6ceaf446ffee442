"""Debian's Chromium, started headless through Playwright, and a page's screenshot: what
the browser tests and scripts/viewer_screenshot.py share.

Playwright drives the system browser (`executable_path`), so nothing is downloaded. The
flags keep Chromium from calling home (updates, sync, field trials), which a machine
without a network would answer with a screen of errors.

    with chromium() as browser:
        page = offline_page(browser)
        page.goto(path.as_uri())
        screenshot(browser, path, png_path)    # a written page, whole, as PNG
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

INSTALL_CHROMIUM = "apt-get install chromium (or set TINYTF_CHROMIUM to a Chromium binary)"
INSTALL_PLAYWRIGHT = "pip install -e '.[dev]'"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class BrowserMissing(RuntimeError):
    """No Chromium or no Playwright here: `missing` says which, `install` the command that installs it."""

    def __init__(self, missing: str, install: str) -> None:
        super().__init__(f"{missing}; install with: {install}")
        self.missing, self.install = missing, install


def chromium_path() -> str:
    """$TINYTF_CHROMIUM, else /usr/bin/chromium, else `chromium` on the PATH."""
    wanted = os.environ.get("TINYTF_CHROMIUM")
    if wanted:
        candidates = [wanted]
        where = f"TINYTF_CHROMIUM={wanted} is not an executable file"
    else:
        candidates = ["/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")]
        where = "no Chromium in /usr/bin nor on the PATH"
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise BrowserMissing(where, INSTALL_CHROMIUM)


@contextlib.contextmanager
def chromium() -> Iterator[object]:
    """A headless Chromium (a Playwright `Browser`), closed on exit."""
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise BrowserMissing("Playwright is not installed", INSTALL_PLAYWRIGHT) from None
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


def offline_page(browser, width: int = 1400, height: int = 900):
    """A page in a new offline context: no request can reach a network, and every request
    the page makes (its own file:// load included) is recorded in `page.requests`; console
    errors and uncaught exceptions in `page.errors`."""
    context = browser.new_context(viewport={"width": width, "height": height}, offline=True)
    page = context.new_page()
    page.requests = []
    page.errors = []
    page.on("request", lambda request: page.requests.append(request.url))
    page.on("console", lambda message: message.type == "error" and page.errors.append(message.text))
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    return page


def screenshot(browser, page_path: Path, png_path: Path, width: int = 1400) -> None:
    """Open the written page `page_path` in `browser`, `width` px wide, and save the whole page
    as PNG; a page that logs an error or requests anything but itself raises RuntimeError."""
    page = offline_page(browser, width=width, height=900)
    try:
        page.goto(page_path.resolve().as_uri())
        page.wait_for_selector("body[data-ready]")
        if page.errors or page.requests != [page_path.resolve().as_uri()]:
            raise RuntimeError(f"the page misbehaved: errors {page.errors}, requests {page.requests}")
        page.screenshot(path=str(png_path), full_page=True)
    finally:
        page.context.close()
