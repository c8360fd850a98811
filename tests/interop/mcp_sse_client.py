"""An independent MCP client (the official Python SDK, PyPI `mcp`) over the legacy SSE transport.

Usage: mcp_sse_client.py SSE_URL API_KEY [--call TOOL] [--args JSON] [--watch SECONDS]

Prints one JSON object per line:
  {"event": "tools", "tools": [{"name", "description", "inputSchema"}]}
  {"event": "call", "isError": bool, "text": str}            (with --call)
  {"event": "ready"}                                          (with --watch: waiting for a change)
  {"event": "list_changed"} then {"event": "tools", ...}      (when the server announces a change)
  {"event": "timeout"}                                        (no change within SECONDS)
"""

import argparse
import json
import sys

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.sse import sse_client


def emit(obj):
    print(json.dumps(obj), flush=True)


async def list_tools(session):
    res = await session.list_tools()
    emit(
        {
            "event": "tools",
            "tools": [
                {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                for t in res.tools
            ],
        }
    )


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("key")
    ap.add_argument("--call")
    ap.add_argument("--args", default="{}")
    ap.add_argument("--watch", type=float)
    a = ap.parse_args()

    changed = anyio.Event()

    async def on_message(message):
        inner = getattr(message, "root", message)
        if isinstance(inner, types.ToolListChangedNotification):
            changed.set()

    headers = {"Authorization": f"Bearer {a.key}"}
    async with sse_client(a.url, headers=headers, timeout=30, sse_read_timeout=120) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            await list_tools(session)
            if a.call:
                res = await session.call_tool(a.call, json.loads(a.args))
                text = "".join(c.text for c in res.content if getattr(c, "type", "") == "text")
                emit({"event": "call", "isError": bool(res.is_error), "text": text})
            if a.watch:
                emit({"event": "ready"})
                with anyio.move_on_after(a.watch) as scope:
                    await changed.wait()
                if scope.cancelled_caught:
                    emit({"event": "timeout"})
                else:
                    emit({"event": "list_changed"})
                    await list_tools(session)


if __name__ == "__main__":
    try:
        anyio.run(main)
    except Exception as e:  # the test reads the reason from stdout
        emit({"event": "error", "error": repr(e)})
        sys.exit(1)
