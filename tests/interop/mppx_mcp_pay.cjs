// Pays a paid MCP tool with MPP's official MCP client: the MCP SDK's client (Streamable HTTP)
// wrapped by mppx's `McpClient.wrap` with its EVM `charge` method, unmodified. The wrapper reads
// the tool's MPP challenge from the result's `_meta["org.paymentauth/payment-required"]`, pays
// it and calls again with the credential; the receipt comes back in the result.
//
// Usage: NODE_PATH=<node_modules> node mppx_mcp_pay.cjs '{"url","key","tool","args"}'
// Prints one JSON line {tools: [names], isError, text, receipt}.
"use strict";
const { pathToFileURL } = require("node:url");
const { privateKeyToAccount } = require("viem/accounts");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const {
  StreamableHTTPClientTransport,
} = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const esm = (name) => import(pathToFileURL(require.resolve(name)).href);

async function main(input) {
  const { url, key, tool, args } = JSON.parse(input);
  const { McpClient } = await esm("mppx/mcp/client");
  const { evm } = await esm("mppx/client");
  const client = new Client({ name: "mppx-interop", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  McpClient.wrap(client, {
    methods: [
      evm.charge({
        account: privateKeyToAccount(key),
        currencies: [evm.assets.baseSepolia.USDC],
      }),
    ],
  });
  const tools = (await client.listTools()).tools.map((t) => t.name);
  const result = await client.callTool({ name: tool, arguments: args });
  const text = (result.content ?? []).map((c) => c.text ?? "").join("");
  console.log(
    JSON.stringify({ tools, isError: !!result.isError, text, receipt: result.receipt ?? null }),
  );
  await client.close();
}

main(process.argv[2]).then(
  () => process.exit(0),
  (err) => {
    console.error(err && err.stack ? err.stack : err);
    process.exit(2);
  },
);
