"""The page of a space on a server of many spaces (`trellis serve --database`), in headless
Chromium (Debian's), driven by Playwright.

Usage: cluster.py SIGN_IN_URL SCREENSHOT_DIR CHROMIUM ELSEWHERE (see session.py).
SIGN_IN_URL is `/spaces/NAME/?token=BEARER` on a node that does not hold the space (it
forwards every request to the node that does); ELSEWHERE is the page of another space of
the database, on the same node. The page loads with no error in the console and no failed
request, lists the space's charms in the @-popup, and a message to the offline model adds 5
to the Counter. The other space's page, with the first space's cookie only (then with that
cookie copied to its path), is refused: its API answers 401, the page says to sign in.
"""

import json

from playwright.sync_api import expect, sync_playwright

from session import api, base, chromium, extra, shot, sign_in

elsewhere = extra[0]
other_base = elsewhere.rstrip("/")


def path_of(url):
    """The path of an absolute URL: `/spaces/NAME` of `http://HOST/spaces/NAME`."""
    return "/" + url.split("/", 3)[3]


def watch(page, problems):
    """Collects, in `problems`, what goes wrong in `page`: errors in the console or the
    page, dialogs, requests that fail or are answered with an error."""

    def console(message):
        # The browser's own request for an icon (the page names none) is not the page's.
        if message.type == "error" and not message.location["url"].endswith("/favicon.ico"):
            problems.append(f"console: {message.text}")

    page.on("console", console)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("dialog", lambda d: (problems.append(f"a dialog opened: {d.message}"), d.dismiss()))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.method} {r.url} ({r.failure})"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"{r.status}: {r.request.method} {r.url}"))


def refused_with(page, session):
    """The status of the other space's `GET /api/chat` from `page`, having checked the
    session cookie it carried (`session`: its value, or None for no cookie)."""
    with page.expect_request(other_base + "/api/chat") as sent:
        status = api(page, "GET", other_base + "/api/chat")
    cookies = sent.value.all_headers().get("cookie", "")
    carried = f"trellis_session={session}" in cookies if session else "trellis_session=" not in cookies
    assert carried, f"the request carried the cookies {cookies!r}"
    return status


def refused_page(context, session, name):
    """Opens the other space's page in a new tab, which the other space's API refuses (401,
    whatever the page asks) and which says to sign in, showing nothing of the space."""
    problems = []
    tab = context.new_page()
    watch(tab, problems)
    tab.goto(elsewhere)
    expect(tab.locator("#notice")).to_contain_text("sign in")
    assert refused_with(tab, session) == 401
    expect(tab.locator("#model")).to_have_text("")
    expect(tab.locator("#messages li")).to_have_count(0)
    shot(tab, name)
    # All that went wrong: the other space's API refusing, the console saying so, and the
    # refused event stream given up (aborted) while it tries again, when that is in time.
    def expected(problem):
        return (
            problem.startswith(f"401: GET {other_base}/api/")
            or ("401" in problem and problem.startswith("console:"))
            or (problem.startswith(f"failed: GET {other_base}/api/chat/events") and "ERR_ABORTED" in problem)
        )

    unexpected = [problem for problem in problems if not expected(problem)]
    assert problems and not unexpected, problems
    tab.close()


with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=chromium, headless=True)
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    context.set_default_timeout(20_000)
    problems = []
    page = context.new_page()
    watch(page, problems)
    page.goto(sign_in)
    expect(page).to_have_url(base + "/")  # the token is gone from the address
    expect(page.locator("#model")).to_have_text("offline")  # the conversation came, on its stream
    expect(page.locator("#tools-chip")).to_contain_text("tool")

    # The space's charms, in the @-popup.
    box = page.locator("#input")
    box.click()
    box.press_sequentially("@")
    options = page.locator("#mentions li")
    expect(options).to_have_count(4)
    names = options.evaluate_all("items => items.map(item => item.dataset.name)")
    assert sorted(names) == ["Counter", "Dice", "Notes", "Todo"], names
    shot(page, "40-charms")

    # A message to the offline model: its mention attaches the Counter, which it increments.
    box.press_sequentially("Counter add 5")
    expect(page.locator("#mentions")).to_be_hidden()
    box.press("Enter")
    expect(page.locator("#messages .tool-call")).to_contain_text('Counter.increment {"amount":5}')
    expect(page.locator("#messages .tool-result")).to_contain_text("count: 0 → 5")
    expect(page.locator("#messages .assistant").last).to_contain_text("Done: Counter.increment → count: 0 → 5")
    expect(page.locator("#stop")).to_be_disabled()  # the reply is over
    expect(page.locator('#chips .chip[data-charm="Counter"]')).to_be_visible()
    expect(page.locator('#panel [data-charm="Counter"] dd[data-field="count"]')).to_have_text("5")
    expect(box).to_have_value("")
    expect(page.locator("#notice")).to_be_hidden()
    shot(page, "41-counter-added")
    assert not problems, problems

    # Another space's page: the cookie is the first space's (its path), so the page's
    # requests go without one and are refused; the page says to sign in.
    refused_page(context, None, "42-other-space-refused")

    # The first space's session cookie sent to the other space's path: refused all the same.
    session = next(c for c in context.cookies() if c["name"] == "trellis_session")
    assert session["path"] == path_of(base) + "/", session
    copied = {key: session[key] for key in ["name", "value", "domain", "httpOnly", "secure", "sameSite"]}
    context.add_cookies([{**copied, "path": path_of(other_base) + "/"}])
    refused_page(context, session["value"], "43-copied-cookie-refused")

    # The first page is still signed in, and nothing went wrong in it.
    assert api(page, "GET", base + "/api/chat") == 200
    assert not problems, problems
    browser.close()

print(json.dumps({"ok": True}))
