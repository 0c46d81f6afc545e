"""The web chat of `trellis serve` in headless Chromium (Debian's), driven by Playwright.

Usage: chat.py SIGN_IN_URL SCREENSHOT_DIR CHROMIUM (see session.py). Each step saves a screenshot; a
failed expectation raises (Playwright's message says what it waited for) and the
process exits non-zero.
"""

import json

from playwright.sync_api import expect, sync_playwright

from session import api, base, chromium, shot, sign_in

with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=chromium, headless=True)
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    context.set_default_timeout(20_000)
    # Text from charms is data: no alert (or any dialog) may ever open, in any tab.
    dialogs = []
    context.on("page", lambda tab: tab.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss())))
    page = context.new_page()
    page.goto(sign_in)
    expect(page).to_have_url(base + "/")  # the one-time token is gone from the address
    expect(page.locator("#tools-chip")).to_contain_text("tool")

    # The @-popup: filters case-insensitively, moves with the arrow keys, picks with Enter.
    box = page.locator("#input")
    box.click()
    box.press_sequentially("@o")
    options = page.locator("#mentions li")
    expect(options.first).to_be_visible()
    names = options.evaluate_all("items => items.map(item => item.dataset.name)")
    assert "Counter" in names and "Todo" in names and "Dice" not in names, names
    expect(options.nth(0)).to_have_attribute("aria-selected", "true")
    box.press("ArrowDown")
    expect(options.nth(1)).to_have_attribute("aria-selected", "true")
    box.press("Backspace")
    box.press_sequentially("Cou")
    expect(options).to_have_count(1)
    expect(options.first).to_contain_text("Counter")
    shot(page, "01-mention-popup")
    box.press("Enter")
    expect(box).to_have_value("@Counter ")
    expect(page.locator('#chips .chip[data-charm="Counter"]')).to_be_visible()
    page.locator("#tools-chip").click()
    expect(page.locator("#tools-list")).to_contain_text("Counter.increment")
    expect(page.locator("#tools-list")).to_contain_text("from Counter")
    shot(page, "02-attached-and-tools")
    page.locator("#tools-chip").click()

    # A message to the offline model: the tool call inline, the counter in the panel.
    counter = page.locator('#panel [data-charm="Counter"] dd[data-field="count"]')
    expect(counter).to_have_text("0")
    box.press_sequentially("add 5")
    box.press("Enter")
    expect(page.locator("#messages .tool-call")).to_contain_text('Counter.increment {"amount":5}')
    expect(page.locator("#messages .tool-result").first).to_contain_text("count: 0 → 5")
    expect(counter).to_have_text("5")  # no reload: the panel follows the charm's cells
    shot(page, "03-tool-call-and-panel")

    # A chip can be removed: the charm is detached.
    page.locator('#chips .chip[data-charm="Counter"] button').click()
    expect(page.locator('#chips .chip[data-charm="Counter"]')).to_have_count(0)

    # Text from charms is data: a note whose title is HTML shows as text.
    assert api(page, "POST", "/api/charms/Notes/handlers/add", {"title": "<img src=x onerror=alert(1)>"}) == 200

    # An approval prompt, seen in two tabs; answered in the first, the second sees it resolved.
    second = context.new_page()
    second.goto(base + "/")
    box.press_sequentially("@Notes delete note 1")
    box.press("Enter")
    prompt = page.locator('#prompts .prompt[data-kind="approval"]')
    expect(prompt).to_contain_text("Notes.delete")
    other = second.locator('#prompts .prompt[data-kind="approval"]')
    expect(other).to_contain_text("Notes.delete")
    notes = page.locator('#panel [data-charm="Notes"] dd[data-field="notes"]')
    expect(notes).to_contain_text("<img src=x onerror=alert(1)>")
    for tab in (page, second):  # the note's title shows in the panel, the tool results, the prompt
        assert tab.locator("img").count() == 0, tab.content()
    shot(page, "04-approval-prompt")
    shot(second, "05-second-tab-waiting")
    prompt.get_by_role("button", name="Approve").click()
    expect(prompt).to_have_count(0)
    expect(other).to_have_count(0)
    expect(second.locator("#messages .tool-result").last).to_contain_text("notes")
    expect(notes).to_have_text("[]")
    shot(second, "06-second-tab-resolved")

    # A question from the model, answered in the page.
    box.press_sequentially("ask me what my favourite colour is")
    box.press("Enter")
    question = page.locator('#prompts .prompt[data-kind="question"]')
    expect(question).to_be_visible()
    question.locator("input").fill("blue")
    question.get_by_role("button", name="Answer").click()
    expect(question).to_have_count(0)
    expect(page.locator("#messages")).to_contain_text("blue")
    shot(page, "07-question-answered")

    # Stop cancels a slow reply.
    assert api(page, "PUT", "/api/chat/model", {"model": "ollama:slow"}) == 204
    box.press_sequentially("tell me a long story")
    box.press("Enter")
    streaming = page.locator("#messages .streaming")
    expect(streaming).to_contain_text("word2")
    stop = page.locator("#stop")
    expect(stop).to_be_enabled()
    shot(page, "08-streaming")
    stop.click()
    expect(stop).to_be_disabled()
    expect(streaming).to_have_count(0)
    expect(page.locator("#messages .stopped")).to_have_text("(stopped)")
    shot(page, "09-stopped")
    assert not dialogs, dialogs
    browser.close()

print(json.dumps({"ok": True}))
