"""Standing watches in the web chat of `trellis serve`, in headless Chromium (Debian's),
driven by Playwright.

Usage: watches.py SIGN_IN_URL SCREENSHOT_DIR CHROMIUM (see session.py). In the terminal,
a model on loopback set watch w1 on the Counter (`count > 3`, note "say so"). The panel
lists it, not holding; the page adds 5 to the counter; the watch fires in the server,
which runs the conversation: its message and the model's answer appear, and the panel
says it holds and fired once. Remove takes it away.
"""

from playwright.sync_api import expect, sync_playwright

from session import api, base, shot, signed_in

with sync_playwright() as p:
    browser, page, problems = signed_in(p)
    expect(page).to_have_url(base + "/")

    watch = page.locator('#watch-list li[data-watch="w1"]')
    expect(watch).to_contain_text("Counter: count > 3")
    expect(watch).to_contain_text("does not hold now, fired 0 times")
    expect(watch).to_contain_text("note: say so")
    shot(page, "50-watch-listed")

    assert api(page, "POST", "/api/charms/Counter/handlers/increment", {"amount": 5}) == 200
    messages = page.locator("#messages")
    expect(messages.locator("li.user").last).to_contain_text(
        "watch w1 on Counter: `count > 3` is now true (count is 5). Your note: say so"
    )
    expect(messages.locator("li.assistant").last).to_have_text("It passed 3.")
    expect(watch).to_contain_text("holds now, fired 1 time")
    shot(page, "51-watch-fired")

    watch.get_by_role("button", name="remove watch w1").click()
    expect(watch).to_have_count(0)
    expect(page.locator("#panel .empty-watches")).to_be_visible()
    shot(page, "52-watch-removed")

    assert not problems, problems
    browser.close()
print('{"ok": true}')
