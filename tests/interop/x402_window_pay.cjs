// Calls a paygate route with an access window N times with the official npm clients: @x402/fetch's
// wrapFetchWithPayment (the `exact` scheme of @x402/evm) around @x402/extensions'
// wrapFetchWithSIWx (sign-in-with-x), so each call first signs in and pays only when the
// sign-in is refused; no code of paygate's on the client side.
//
// Usage: NODE_PATH=<node_modules> node x402_window_pay.cjs URL PRIVATE_KEY RPC_URL N
// Prints one JSON line {statuses, kinds, callsLeft, windowReceipts}: per call, `paid` (its
// receipt carries a transaction), `window` (its receipt says an access window served it) or the
// status; the windows' calls left as their receipts said; the window calls' receipts and those
// of answers other than 200 (decoded PAYMENT-RESPONSE). Exits non-zero only when the client itself failed.
"use strict";
const { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } = require("@x402/fetch");
const { ExactEvmScheme } = require("@x402/evm/exact/client");
const { toClientEvmSigner } = require("@x402/evm");
const { wrapFetchWithSIWx } = require("@x402/extensions/sign-in-with-x");
const { privateKeyToAccount } = require("viem/accounts");
const { createPublicClient, http } = require("viem");
const { baseSepolia } = require("viem/chains");

async function main(url, key, rpc, n) {
  const account = privateKeyToAccount(key);
  const publicClient = createPublicClient({ chain: baseSepolia, transport: http(rpc) });
  const client = new x402Client();
  client.register("eip155:84532", new ExactEvmScheme(toClientEvmSigner(account, publicClient)));
  const call = wrapFetchWithPayment(wrapFetchWithSIWx(fetch, account), client);
  const statuses = {};
  const kinds = [];
  const callsLeft = [];
  const windowReceipts = [];
  const failedReceipts = [];
  for (let i = 0; i < n; i++) {
    const r = await call(url, { method: "GET" });
    await r.text();
    statuses[r.status] = (statuses[r.status] || 0) + 1;
    const raw = r.headers.get("payment-response");
    if (r.status !== 200 || !raw) {
      kinds.push(String(r.status));
      if (raw) failedReceipts.push(decodePaymentResponseHeader(raw));
      continue;
    }
    const receipt = decodePaymentResponseHeader(raw);
    if (receipt.accessWindow) {
      kinds.push("window");
      callsLeft.push(receipt.accessWindow.callsLeft);
      windowReceipts.push(receipt);
    } else {
      kinds.push(receipt.transaction ? "paid" : "unknown");
    }
  }
  console.log(JSON.stringify({ statuses, kinds, callsLeft, windowReceipts, failedReceipts }));
  return 0;
}

main(process.argv[2], process.argv[3], process.argv[4], Number(process.argv[5])).then(
  (code) => process.exit(code),
  (err) => {
    console.error(err && err.stack ? err.stack : err);
    process.exit(2);
  },
);
