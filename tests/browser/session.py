"""What the browser tests share: their arguments, screenshots, requests from the page.

Each test script is run as SCRIPT SIGN_IN_URL SCREENSHOT_DIR CHROMIUM [EXTRA...].
"""

import sys
from pathlib import Path

sign_in, shots, chromium = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
extra = sys.argv[4:]
shots.mkdir(parents=True, exist_ok=True)
base = sign_in.split("/?")[0]


def shot(page, name):
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)


def api(page, method, path, body=None):
    """A request from the page itself (its cookie, its origin); the status."""
    return page.evaluate(
        """async ([method, path, body]) => {
            const r = await fetch(path, {method, headers: {"Content-Type": "application/json"},
                                         body: body === null ? undefined : JSON.stringify(body)});
            return r.status;
        }""",
        [method, path, body],
    )


def signed_in(p):
    """Debian's Chromium with one page signed in; the browser, the page, and the list its
    dialogs and page errors are noted in (a test ends asserting it empty)."""
    browser = p.chromium.launch(executable_path=chromium, headless=True)
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    context.set_default_timeout(20_000)
    problems = []
    page = context.new_page()
    page.on("dialog", lambda d: (problems.append(f"a dialog opened: {d.message}"), d.dismiss()))
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.goto(sign_in)
    return browser, page, problems
