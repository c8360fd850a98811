"""Pays a paygate public MCP tool (x402's MCP transport) with official clients only: the MCP
Python SDK (PyPI `mcp`, Streamable HTTP) and the x402 SDK's MCP client (PyPI `x402`,
`x402.mcp.x402MCPSession`) signing with its EVM scheme. No code of paygate's on the client side.

Usage: python x402_mcp_pay.py MCP_URL PRIVATE_KEY TOOL [ARGS_JSON]
Prints one JSON line:
  {tools: [{name, description, inputSchema, outputSchema}],
   unpaid: {isError, structuredContent},
   paid: {isError, text, structuredContent, paymentMade, paymentResponse},
   replay: {isError, text, structuredContent, meta}}
`replay` sends the very payment of `paid` again (a retry): it must not pay twice.

One shim, not paygate's: x402 2.25's MCP client (`x402MCPSession`) is written against mcp 1.x,
whose session takes `read_timeout_seconds` as a `datetime.timedelta` and whose results spell
`isError` / `structuredContent`; mcp 2.x takes seconds as a float and spells `is_error` /
`structured_content`. `Mcp1Session` below translates those names and nothing else: finding the
requirements, signing, attaching `_meta["x402/payment"]` and reading the receipt are the
official clients' code.
"""

import asyncio
import json
import sys
from datetime import timedelta

from eth_account import Account
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from x402 import x402Client
from x402.mcp import x402MCPSession
from x402.mechanisms.evm.exact import register_exact_evm_client
from x402.mechanisms.evm.signers import EthAccountSigner


def dump(model):
    if model is None:
        return None
    if hasattr(model, "model_dump"):
        return model.model_dump(by_alias=True, exclude_none=True)
    return model


class Mcp1Result:
    """An mcp 2.x tool result under mcp 1.x's attribute names."""

    def __init__(self, r):
        self.content = r.content
        self.isError = r.is_error
        self.structuredContent = r.structured_content
        self.meta = r.meta


class Mcp1Session:
    """An mcp 2.x session as x402's MCP client expects one (mcp 1.x): see the module's note.
    Records the payment the client attaches, to send it once more afterwards."""

    def __init__(self, session):
        self.session = session
        self.sent = None

    async def initialize(self):
        return None

    async def list_tools(self):
        return await self.session.list_tools()

    async def call_tool(self, name, arguments=None, read_timeout_seconds=None, meta=None):
        if isinstance(read_timeout_seconds, timedelta):
            read_timeout_seconds = read_timeout_seconds.total_seconds()
        if meta and "x402/payment" in meta:
            self.sent = meta["x402/payment"]
        r = await self.session.call_tool(
            name, arguments, read_timeout_seconds=read_timeout_seconds, meta=meta
        )
        return Mcp1Result(r)


def text_of(result):
    return "".join(getattr(c, "text", "") for c in (result.content or []))


async def main(url, key, tool, args):
    client = x402Client()
    register_exact_evm_client(client, EthAccountSigner(Account.from_key(key)))

    async with streamable_http_client(url) as (read, write, *_):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            tools = [
                {
                    "name": t.name,
                    "description": t.description,
                    "inputSchema": t.input_schema,
                    "outputSchema": t.output_schema,
                }
                for t in listed.tools
            ]

            unpaid = await session.call_tool(tool, args)

            shim = Mcp1Session(session)
            paid = await x402MCPSession(shim, client).call_tool(tool, args)

            replay = None
            if shim.sent is not None:
                again = await session.call_tool(tool, args, meta={"x402/payment": shim.sent})
                replay = {
                    "isError": again.is_error,
                    "text": text_of(again),
                    "structuredContent": again.structured_content,
                    "meta": dump(again.meta),
                }

    report = {
        "tools": tools,
        "unpaid": {"isError": unpaid.is_error, "structuredContent": unpaid.structured_content},
        "paid": {
            "isError": paid.is_error,
            "text": "".join(getattr(c, "text", "") for c in paid.content),
            "structuredContent": getattr(paid.raw_result, "structuredContent", None),
            "paymentMade": paid.payment_made,
            "paymentResponse": dump(paid.payment_response),
        },
        "replay": replay,
    }
    print(json.dumps(report, default=str))
    return 0


if __name__ == "__main__":
    extra = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], extra)))
