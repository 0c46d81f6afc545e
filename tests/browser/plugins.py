"""An installed plugin's tool run by the web page of `trellis serve`, in headless Chromium.

Usage: plugins.py SIGN_IN_URL SCREENSHOT_DIR CHROMIUM MODEL HEX... (see session.py); MODEL is a
scripted model that calls `count_words` on "the quick brown fox jumps", then answers; to
the next message it calls `spin` (a loop) and `crash` (a trap) of the plugin `faulty`,
then answers. The first HEX is a module whose `run` grows its memory by 4 MiB (trapping
if it cannot), which the page's memory cap must stop; each other HEX is a module with an
import it was not granted, which the page's worker must refuse. The page runs the plugin's WebAssembly in a Web Worker under the page's strict policy
and resolves the call; two tabs are open, only one result counts, and neither shows an
error.
"""

import json

from playwright.sync_api import expect, sync_playwright

from session import api, base, chromium, extra, shot, sign_in

model, grower, refused = extra[0], extra[1], extra[2:]

with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=chromium, headless=True)
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    context.set_default_timeout(20_000)
    # What must never happen: a script error, or the policy refusing the worker or WebAssembly.
    problems = []
    resolutions = []  # the status of each tab's answer to the call

    def watch(page):
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on("console", lambda m: "Content Security Policy" in m.text and problems.append(m.text))
        page.on("response", lambda r: r.url.endswith("/resolve") and resolutions.append(r.status))
        return page

    page = watch(context.new_page())
    page.goto(sign_in)
    expect(page).to_have_url(base + "/")
    assert api(page, "PUT", "/api/chat/model", {"model": model}) == 204
    second = watch(context.new_page())
    second.goto(base + "/")
    expect(page.locator("#model")).to_have_text(model)
    expect(second.locator("#model")).to_have_text(model)

    # The tools chip says where the plugin's tools come from.
    page.locator("#tools-chip").click()
    expect(page.locator("#tools-list")).to_contain_text("count_words")
    expect(page.locator("#tools-list")).to_contain_text("from plugin text-tools")
    page.locator("#tools-chip").click()

    box = page.locator("#input")
    box.click()
    box.press_sequentially("how many words are in: the quick brown fox jumps")
    box.press("Enter")
    for tab in (page, second):
        call = tab.locator("#messages .tool-call")
        expect(call).to_contain_text('count_words {"text":"the quick brown fox jumps"}')
        expect(tab.locator("#messages .tool-result")).to_have_text('← {"words":5}')
        expect(tab.locator("#messages .assistant").last).to_have_text("Your text has five words.")
        expect(tab.locator("#prompts .prompt")).to_have_count(0)
        # Each tab's run of the call, done: a tab whose result came second was refused
        # (409), which is no error to show.
        ran = tab.evaluate("() => Promise.all(running.values()).then(() => running.size)")
        assert ran <= 1, ran
        expect(tab.locator("#notice")).to_be_hidden()
    # The first answer won. The second tab ran the call too when it saw the call before the
    # first answer came (then it was refused), or never ran it: which, is the race's to say.
    assert sorted(resolutions) in ([202], [202, 409]), resolutions
    shot(page, "10-plugin-ran-in-the-page")
    shot(second, "11-plugin-second-tab")

    # A plugin that loops is stopped by the time budget, one that traps fails: each an
    # error result the model reads, and the conversation goes on.
    box.press_sequentially("now try the faulty plugin")
    box.press("Enter")
    results = page.locator("#messages .tool-result")
    expect(results).to_have_count(3, timeout=20_000)  # the loop runs its 5 s first
    messages = page.locator("#messages")
    expect(messages).to_contain_text("the plugin ran past its budget of 5 s in the page and was stopped")
    expect(messages).to_contain_text("the plugin failed: unreachable")
    expect(page.locator("#messages .assistant").last).to_have_text("Both plugins failed, and we go on.")
    expect(page.locator("#notice")).to_be_hidden()
    shot(page, "12-plugin-stopped-and-trapped")
    def in_worker(module, memory_mib):
        """What the page's worker answers for `run` of `module` (hex), granted `clock`."""
        return page.evaluate(
            """([hex, memoryMib]) => new Promise((done) => {
                const worker = new Worker("/plugin-worker.js");
                worker.onmessage = (event) => { worker.terminate(); done(event.data); };
                setTimeout(() => done({error: "the worker did not answer within 10 s"}), 10000);
                const bytes = Uint8Array.from(hex.match(/../g), (pair) => parseInt(pair, 16));
                worker.postMessage({module: bytes.buffer, export: "run", granted: ["clock"], memoryMib,
                                    arguments: {}});
            })""",
            [module, memory_mib],
        )

    # The worker itself refuses a module importing what was not granted.
    for module in refused:
        answer = in_worker(module, 2)
        assert "which it was not granted" in answer.get("error", ""), answer
    # The memory cap is the page's only bound on a plugin's memory: growing 4 MiB past a
    # cap of 2 MiB fails (the module traps); under a cap of 8 MiB the same growth succeeds.
    capped = in_worker(grower, 2)
    assert "unreachable" in capped.get("error", ""), capped
    roomy = in_worker(grower, 8)
    assert "unreachable" not in json.dumps(roomy), roomy

    assert not problems, problems
    browser.close()

print(json.dumps({"ok": True}))
