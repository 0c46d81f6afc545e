"""A tool's question mid-call (an MCP server's elicitation) in the web chat of
`trellis serve --mcp`, in headless Chromium (Debian's), driven by Playwright.

Usage: elicitation.py SIGN_IN_URL SCREENSHOT_DIR CHROMIUM MODEL (see session.py). MODEL
is a scripted model that calls `py.book_table` for Friday, then answers; to the next
message it calls server-everything's `ev.simulate-research-query` (a task) on an
ambiguous topic, then answers. The server's form (name, seats) shows as a prompt while the
call runs; a seat count that is not a whole number is refused in the prompt; the filled
form goes back to the server, whose result shows the answer. The task's stages show while
it runs, and its question's options are a list to pick from. To a third message it calls
`ev.trigger-url-elicitation`: the URL to visit is a link, and Done tells the server.
"""

from playwright.sync_api import expect, sync_playwright

from session import api, base, extra, shot, signed_in

model = extra[0]

with sync_playwright() as p:
    browser, page, problems = signed_in(p)
    expect(page).to_have_url(base + "/")
    assert api(page, "PUT", "/api/chat/model", {"model": model}) == 204
    expect(page.locator("#model")).to_have_text(model)

    box = page.locator("#input")
    box.click()
    box.press_sequentially("book a table on Friday")
    box.press("Enter")
    form = page.locator('#prompts .prompt[data-kind="elicitation"]')
    expect(form).to_contain_text("py.book_table asks: Who is the table on Friday for?")
    expect(form).to_contain_text("How many seats")
    shot(page, "60-form-asked")

    form.get_by_label("name").fill("Ada")
    form.get_by_label("seats").fill("2.5")
    form.get_by_role("button", name="Send").click()
    expect(form.locator(".problem")).to_contain_text("does not fit the form")
    shot(page, "61-form-refused")

    form.get_by_label("seats").fill("4")
    form.get_by_role("button", name="Send").click()
    expect(page.locator("#messages .tool-result")).to_contain_text("booked on Friday for Ada, 4 seats")
    expect(page.locator("#messages .assistant").last).to_have_text("Booked.")
    expect(page.locator("#prompts .prompt")).to_have_count(0)
    shot(page, "62-form-answered")

    box.press_sequentially("research python")
    box.press("Enter")
    expect(page.locator("#messages .progress")).to_contain_text("ev.simulate-research-query: ")
    shot(page, "63-task-stage")
    question = page.locator('#prompts .prompt[data-kind="elicitation"]')
    expect(question).to_contain_text("could have multiple interpretations")
    question.get_by_label("interpretation").select_option("snake")
    question.get_by_role("button", name="Send").click()
    expect(page.locator("#messages .tool-result").last).to_contain_text("Research Report: python (snake)")
    expect(page.locator("#messages .assistant").last).to_have_text("Here is the report.")
    expect(page.locator("#messages .progress")).to_have_count(0)
    shot(page, "64-task-answered")

    box.press_sequentially("sign me in")
    box.press("Enter")
    visit = page.locator('#prompts .prompt[data-kind="elicitation"]')
    expect(visit).to_contain_text("asks you to visit a URL: Sign in")
    link = visit.get_by_role("link", name="https://example.test/sign-in")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    shot(page, "65-url-asked")
    visit.get_by_role("button", name="Done").click()
    expect(page.locator("#messages .tool-result").last).to_contain_text("User completed the URL elicitation flow")
    expect(page.locator("#messages .assistant").last).to_have_text("Signed in.")

    assert not problems, problems
    browser.close()
print('{"ok": true}')
