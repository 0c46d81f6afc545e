"""A stdio MCP server written without an SDK, for Trellis's client tests: it shakes hands
and lists its tools as MCP says, but answers a call of its tool `broken` with a line that
is JSON yet no JSON-RPC message (its error's code is a text, and it has no message).
Calling `fine` answers well, so a test can see the session outlive the bad answer; calling
`exits` ends the process without an answer; calling `asks` first sends the client a
malformed request (its method is a number) and answers with what the client said to it;
`deep` answers with a result nested 200 levels deep (past what a reader takes), `long`
with one of 17 MiB (past the most a message may be); `junk` writes 100,000 lines that are
not JSON before it answers well.
"""

import json
import sys

# Each tool, read-only (so a call needs no approval), by name and description.
TOOLS = [
    {"name": name, "description": description, "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}
    for name, description in [
        ("broken", "Answers with a malformed JSON-RPC error."),
        ("exits", "Exits without answering."),
        ("asks", "Sends the client a malformed request; answers with the client's reply."),
        ("fine", "Answers well."),
        ("deep", "Answers with a result nested 200 levels deep."),
        ("long", "Answers with a result of 17 MiB."),
        ("junk", "Writes 100,000 junk lines, then answers well."),
    ]
]


def send(message):
    write(json.dumps(message))


def write(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def answer(request):
    method, rid = request.get("method"), request.get("id")
    if rid is None:
        return  # a notification
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "malformed-answer-server", "version": "1.0"},
        }})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
    elif method == "tools/call" and request["params"]["name"] == "broken":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": "broken"}})
    elif method == "tools/call" and request["params"]["name"] == "exits":
        sys.exit(0)
    elif method == "tools/call" and request["params"]["name"] == "asks":
        send({"jsonrpc": "2.0", "id": "bad-request", "method": 7})
        reply = wait_for("bad-request")
        text = f"the client said {reply['error']['code']}"
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}]}})
    elif method == "tools/call" and request["params"]["name"] == "deep":
        write(f'{{"jsonrpc": "2.0", "id": {json.dumps(rid)}, "result": {{"x": {"[" * 200}{"]" * 200}}}}}')
    elif method == "tools/call" and request["params"]["name"] == "long":
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "a" * (17 << 20)}]}})
    elif method == "tools/call" and request["params"]["name"] == "junk":
        sys.stdout.write("junk, not JSON\n" * 100_000)
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "after the junk"}]}})
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "fine"}]}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"unknown method {method}"}})


# What the client sent while the server waited for a reply, handled after it.
backlog = []


def messages():
    while True:
        if backlog:
            yield backlog.pop(0)
            continue
        line = sys.stdin.readline()
        if not line:
            return
        if line.strip():
            yield json.loads(line)


def wait_for(rid):
    """The client's reply to the server's request `rid`; what comes before it waits."""
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        if line.strip():
            message = json.loads(line)
            if message.get("id") == rid and "method" not in message:
                return message
            backlog.append(message)


for request in messages():
    answer(request)
