"""Approvals and messages while a reply runs, in the web chat of `trellis serve`, in
headless Chromium (Debian's), driven by Playwright.

Usage: approvals.py SIGN_IN_URL SCREENSHOT_DIR CHROMIUM (see session.py). The server's
`ollama:` models reach a slow loopback model. With the offline model, Notes.delete waits
for approval, showing what it would change: the page edits its arguments (text that is no JSON is refused in the page,
arguments that do not fit the tool by the server, both said in the prompt), then allows
the tool always (its next call shows no prompt), then makes it ask again. Then, while a
slow reply streams, a second message waits for it, and goes when Stop cancels the reply.
"""

import json

from playwright.sync_api import expect, sync_playwright

from session import api, base, chromium, shot, sign_in

with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=chromium, headless=True)
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    context.set_default_timeout(20_000)
    problems = []
    answers = []  # the bodies the page resolved calls with
    page = context.new_page()
    page.on("dialog", lambda d: (problems.append(f"a dialog opened: {d.message}"), d.dismiss()))
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("request", lambda r: r.url.endswith("/resolve") and answers.append(json.loads(r.post_data)))
    page.goto(sign_in)
    expect(page).to_have_url(base + "/")
    for title in ["milk", "eggs", "tea", "jam", "bread"]:
        assert api(page, "POST", "/api/charms/Notes/handlers/add", {"title": title}) == 200

    box = page.locator("#input")
    prompt = page.locator('#prompts .prompt[data-kind="approval"]')
    allowed = page.locator("#allowed")
    results = page.locator("#messages .tool-result")

    def notes():
        """The titles of the notes left, as the API has them."""
        return page.evaluate(
            """async () => (await (await fetch("/api/charms/Notes")).json()).data.notes.map(n => n.title)"""
        )

    def say(text):
        box.click()
        box.press_sequentially(text)
        box.press("Enter")
        expect(box).to_have_value("")

    # Edited arguments: the model asks to delete note 1; the person deletes note 4.
    say("@Notes delete note 1")
    expect(prompt).to_contain_text('Approve Notes.delete {"id":1}?')
    # What the call would change, beside the question: the milk note removed.
    change = prompt.locator("ul.preview li").first
    expect(change).to_contain_text("Notes.notes[0]: ")
    expect(change).to_contain_text('"title":"milk"} → removed')
    shot(page, "30-approval-preview")
    expect(allowed).to_be_hidden()
    prompt.locator("summary", has_text="Edit arguments").click()
    arguments = prompt.locator("textarea.arguments")
    assert json.loads(arguments.input_value()) == {"id": 1}, arguments.input_value()
    run = prompt.get_by_role("button", name="Run with these arguments")
    problem = prompt.locator(".problem")
    arguments.fill('{"id": 4')  # no JSON: refused here, nothing sent
    run.click()
    expect(problem).to_contain_text("The arguments are not JSON")
    assert answers == [], answers
    shot(page, "30-arguments-not-json")
    arguments.fill('{"id": "four"}')  # JSON the tool refuses: the server's 422, in the prompt
    run.click()
    expect(problem).to_contain_text("nothing was approved")
    expect(problem).to_contain_text("do not fit")
    assert answers == [{"approve_with": {"input": {"id": "four"}}}], answers
    shot(page, "31-arguments-refused")
    arguments.fill('{"id": 4}')
    run.click()
    expect(prompt).to_have_count(0)
    expect(results).to_have_count(1)
    expect(results.first).to_contain_text("changed this call's arguments")
    assert notes() == ["milk", "eggs", "tea", "bread"], notes()
    shot(page, "32-edited-arguments-ran")

    # Always allow: this call runs, the tool is listed, its next call shows no prompt.
    say("@Notes delete note 1")
    expect(prompt).to_have_count(1)
    prompt.get_by_role("button", name="Always allow Notes.delete").click()
    expect(prompt).to_have_count(0)
    expect(allowed).to_be_visible()
    expect(allowed.locator(".chip")).to_have_count(1)
    expect(allowed.locator('.chip[data-tool="Notes.delete"]')).to_contain_text("Notes.delete")
    expect(results).to_have_count(2)
    assert notes() == ["eggs", "tea", "bread"], notes()
    # Every prompt added from now on is counted: an allowed call must add none.
    page.evaluate(
        """() => {
            window.promptsSeen = 0;
            new MutationObserver((changes) => {
                for (const change of changes) window.promptsSeen += change.addedNodes.length;
            }).observe(document.querySelector("#prompts"), {childList: true});
        }"""
    )
    say("@Notes delete note 2")
    expect(results).to_have_count(3)
    expect(page.locator("#stop")).to_be_disabled()
    assert page.evaluate("window.promptsSeen") == 0, "an allowed call asked"
    assert notes() == ["tea", "bread"], notes()
    shot(page, "33-allowed-ran-without-asking")

    # Ask again: the tool leaves the list, and its next call asks.
    allowed.get_by_role("button", name="ask again").click()
    expect(allowed).to_be_hidden()
    say("@Notes delete note 3")
    expect(prompt).to_contain_text('Approve Notes.delete {"id":3}?')
    shot(page, "34-asks-again")
    prompt.get_by_role("button", name="Approve", exact=True).click()
    expect(prompt).to_have_count(0)
    expect(results).to_have_count(4)
    assert notes() == ["bread"], notes()

    # A message sent while a slow reply streams waits for it; Stop cancels both.
    assert api(page, "PUT", "/api/chat/model", {"model": "ollama:slow"}) == 204
    say("tell me a long story")
    streaming = page.locator("#messages .streaming")
    expect(streaming).to_contain_text("word2")
    queued = page.locator("#messages li.queued")
    say("and make it short")
    expect(queued).to_have_count(1)
    expect(queued).to_contain_text("waits for the reply: and make it short")
    expect(streaming).to_be_visible()  # the reply goes on meanwhile
    shot(page, "35-message-waits-for-the-reply")
    page.locator("#stop").click()
    expect(page.locator("#stop")).to_be_disabled()
    expect(queued).to_have_count(0)
    expect(streaming).to_have_count(0)
    expect(page.get_by_text("and make it short")).to_have_count(0)
    shot(page, "36-stopped-and-dropped")
    assert not problems, problems
    browser.close()

print(json.dumps({"ok": True}))
