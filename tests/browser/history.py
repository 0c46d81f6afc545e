"""The state's history in the web chat of `trellis serve`, in headless Chromium (Debian's),
driven by Playwright.

Usage: history.py SIGN_IN_URL SCREENSHOT_DIR CHROMIUM (see session.py). With the offline
model, "add 5" increments the Counter: the panel names the model's call as the writer of
`count` and `label` as derived. The page then adds 2 itself: `count` names the web page,
and the tool result that showed 5 is marked as changed since. Undo turn is refused, since
the page wrote the count after the model; after another turn ("add 3"), Undo turn puts
the count back to 7.
"""

from playwright.sync_api import expect, sync_playwright

from session import api, base, shot, signed_in

with sync_playwright() as p:
    browser, page, problems = signed_in(p)
    expect(page).to_have_url(base + "/")

    box = page.locator("#input")
    panel = page.locator('#panel [data-charm="Counter"]')
    count = panel.locator('dd[data-field="count"]')
    results = page.locator("#messages .tool-result")

    def say(text):
        box.click()
        box.press_sequentially(text)
        box.press("Enter")
        expect(box).to_have_value("")

    say("@Counter add 5")
    expect(results.first).to_contain_text("count: 0 → 5")
    expect(count).to_have_text("5")
    expect(panel.locator('dd[data-writer="count"]')).to_contain_text(
        "by the model (offline) calling Counter.increment in request 1"
    )
    expect(panel.locator('dd[data-writer="label"]')).to_have_text("derived")
    shot(page, "40-writers")

    # The page writes the count itself: it is the writer now, and the result that showed
    # 5 is marked.
    assert api(page, "POST", "/api/charms/Counter/handlers/increment", {"amount": 2}) == 200
    expect(count).to_have_text("7")
    expect(panel.locator('dd[data-writer="count"]')).to_contain_text("by the web page")
    expect(results.first.locator(".stale")).to_contain_text("changed since: count is now 7")
    shot(page, "41-changed-since")

    # The model's turn cannot be undone over the page's later write.
    notice = page.locator("#notice")
    page.locator("#undo").click()
    expect(notice).to_contain_text("cannot undo request 1")
    expect(notice).to_contain_text("Counter.count is 7 (request 1 left it at 5), written by the web page")
    expect(count).to_have_text("7")
    shot(page, "42-undo-refused")

    say("add 3")
    expect(count).to_have_text("10")
    page.locator("#undo").click()
    expect(notice).to_contain_text("Undid request 2: Counter.count: 10 → 7")
    expect(count).to_have_text("7")
    expect(panel.locator('dd[data-writer="count"]')).to_contain_text("by an undo on the web page")
    shot(page, "43-undone")

    assert not problems, problems
    browser.close()
print('{"ok": true}')
