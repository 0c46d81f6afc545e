#!/bin/sh
# Installs the third-party MCP parts Trellis's tests drive, pinned, under DIR (default
# target/tmp): the official Python SDK and mcp-server-time (PyPI, one virtual
# environment), and @modelcontextprotocol/server-everything (npm). Does nothing for a part
# already installed at its version. `.ci/run` runs it; tests/mcp/tools.rs runs it on a
# test's first use. Needs python3 (with venv) and npm.
set -eu
dir=${1:-target/tmp}
sdk=mcp==2.3.0
time_server=mcp-server-time==2026.10.19
everything=@modelcontextprotocol/server-everything@2026.8.31

venv=$dir/mcp-sdk-venv
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$sdk $time_server" ]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$sdk" "$time_server"
    printf '%s' "$sdk $time_server" > "$venv/.installed"
fi

modules=$dir/mcp-npm
if [ "$(cat "$modules/.installed" 2>/dev/null)" != "$everything" ]; then
    mkdir -p "$modules"
    npm install --silent --no-audit --no-fund --prefix "$modules" "$everything"
    printf '%s' "$everything" > "$modules/.installed"
fi
