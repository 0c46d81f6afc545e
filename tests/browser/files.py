"""Files in the web chat of `trellis serve`, in headless Chromium (Debian's), driven by Playwright.

Usage: files.py SIGN_IN_URL SCREENSHOT_DIR CHROMIUM PNG (see session.py); PNG is an 8x8 image.
The conversation was begun in the terminal: server-everything's tiny image came back in a
tool result, the turns before the third were compacted into a summary, and the last reply
ended with the value {"colour": "blue"} of a result schema. The page shows each of them;
then the PNG attached by the button, a text file dropped on the message box (named like
HTML) and another dropped and removed go with a message, while a file past the limit is
refused in the page. The sent image is shown from the server; the text file is a link that
downloads it. The model's reply ends with {"colour": "red"}.
"""

import json
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from session import base, chromium, extra, shot, sign_in

png = Path(extra[0])
hostile = "<img src=x onerror=alert(1)>.txt"

with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=chromium, headless=True)
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    context.set_default_timeout(20_000)
    # What must never happen: a dialog (text run as code), a script error, the policy
    # refusing something the page loads.
    problems = []
    posts = []  # the messages the page sent
    page = context.new_page()
    page.on("dialog", lambda d: (problems.append(f"a dialog opened: {d.message}"), d.dismiss()))
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda m: "Content Security Policy" in m.text and problems.append(m.text))
    page.on("request", lambda r: r.method == "POST" and r.url.endswith("/api/chat/messages") and posts.append(r))
    page.goto(sign_in)
    expect(page).to_have_url(base + "/")

    def wait_loaded(image):
        """Waits until an <img> was fetched and decoded; its natural width."""
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle())
        return image.evaluate("img => img.naturalWidth")

    # The MCP tool's image, inline in its result, from the server (the page's cookie).
    result = page.locator("#messages .tool-result").filter(has=page.locator("img"))
    expect(result).to_have_count(1)
    expect(result).to_contain_text("Here's the image you requested")
    assert wait_loaded(result.locator("img")) > 0
    result.scroll_into_view_if_needed()
    shot(page, "20-tool-result-image")

    # Where the conversation was compacted: after the long reply, before "and now?".
    divider = page.locator("#messages .compacted")
    expect(divider).to_have_count(1)
    after = divider.evaluate("li => li.nextElementSibling.textContent")
    assert after == "and now?", after
    divider.locator("summary").click()
    expect(divider.locator(".summary")).to_have_text("The user asked for the tiny image, then for a long text.")
    divider.scroll_into_view_if_needed()
    shot(page, "21-compacted")

    # The value the last reply ended with.
    value = page.locator("#messages .result")
    expect(value).to_contain_text('"colour": "blue"')

    # The attach button: a PNG.
    def pick(files):
        with page.expect_file_chooser() as chooser:
            page.locator("#attach").click()
        chooser.value.set_files(files)

    chips = page.locator("#files .chip")
    pick(str(png))
    expect(page.locator('#files .chip[data-file="red.png"]')).to_contain_text("red.png (75 bytes)")
    # A file past the limit is refused here, saying why; the server is not asked.
    pick({"name": "big.bin", "mimeType": "application/octet-stream", "buffer": bytes(6_000_000)})
    expect(page.locator("#notice")).to_have_text(
        "big.bin is 5.7 MB, and a file may be at most 5.0 MB: send a smaller one")
    expect(chips).to_have_count(1)

    # Files dropped on the message box; a chip removes its file.
    box = page.locator("#input")

    def drop(name, text):
        data = page.evaluate_handle(
            """([name, text]) => {
                const data = new DataTransfer();
                data.items.add(new File([text], name, {type: "text/plain"}));
                return data;
            }""",
            [name, text],
        )
        box.dispatch_event("dragover", {"dataTransfer": data})
        box.dispatch_event("drop", {"dataTransfer": data})

    drop(hostile, "milk and eggs")
    drop("extra.txt", "not sent")
    expect(chips).to_have_count(3)
    shot(page, "22-attached")
    page.locator('#files .chip[data-file="extra.txt"] button').click()
    expect(chips).to_have_count(2)
    assert not posts, "nothing was sent yet"

    # Sent: the chips go, the image shows from the server, the text file is a link.
    box.click()
    box.press_sequentially("what colour is it?")
    box.press("Enter")
    expect(chips).to_have_count(0)
    sent = page.locator("#messages li.user.file img")
    expect(sent).to_have_count(1)
    assert wait_loaded(sent) == 8
    link = page.locator("#messages li.user.file a")
    expect(link).to_have_text(f"{hostile} (text/plain, 13 bytes)")
    expect(value).to_contain_text('"colour": "red"')
    expect(page.locator("#notice")).to_be_hidden()
    expect(divider.locator("details")).to_have_attribute("open", "")  # still open: the page kept it so
    shot(page, "23-sent")
    with page.expect_download() as download:
        link.click()
    assert Path(download.value.path()).read_text() == "milk and eggs"
    # Only the two images: the file's name stayed text.
    expect(page.locator("#messages img")).to_have_count(2)
    assert len(posts) == 1, [r.url for r in posts]
    assert not problems, problems
    browser.close()

print(json.dumps({"ok": True}))
