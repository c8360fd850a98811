// Pays a paygate route N times over one payment channel with the official npm clients:
// @x402/fetch's wrapFetchWithPayment and @x402/evm's batch-settlement client scheme (one
// deposit, then a voucher per request), no code of paygate's on the client side.
//
// Usage: NODE_PATH=<node_modules> node x402_channel_pay.cjs URL PRIVATE_KEY RPC_URL N [refund[:AMOUNT]]
// URL may be several, comma-separated (one route on several nodes): the requests go to them in
// turn, X402_SPREAD_BLOCK requests to each (default 1), over the one channel.
// With `refund`, the client's own cooperative refund follows the N requests (all that is
// left, or AMOUNT base units); its settle response (or its error) is printed as `refund`.
// Prints one JSON line {statuses, bodies, receipts (decoded PAYMENT-RESPONSE of the first and
// last answers), deposits (answers whose receipt carries a transaction), charged (the last
// receipt's chargedCumulativeAmount), chargeHeaderSeen (an answer showed X-Paygate-Charge)};
// exits non-zero only when the client itself failed.
"use strict";
const { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } = require("@x402/fetch");
const { BatchSettlementEvmScheme } = require("@x402/evm/batch-settlement/client");
const { toClientEvmSigner } = require("@x402/evm");
const { privateKeyToAccount } = require("viem/accounts");
const { createPublicClient, http } = require("viem");
const { baseSepolia } = require("viem/chains");

async function main(url, key, rpc, n, refund) {
  const account = privateKeyToAccount(key);
  const publicClient = createPublicClient({ chain: baseSepolia, transport: http(rpc) });
  const signer = toClientEvmSigner(account, publicClient);
  const client = new x402Client();
  const scheme = new BatchSettlementEvmScheme(signer, {
    depositPolicy: { depositMultiplier: Math.max(n, 3) },
  });
  client.register("eip155:84532", scheme);
  const pay = wrapFetchWithPayment(fetch, client);
  const urls = url.split(",");
  const block = Math.max(1, Number(process.env.X402_SPREAD_BLOCK || "1"));
  const statuses = {};
  const receipts = [];
  let deposits = 0;
  let chargeHeaderSeen = false;
  let charged = "0";
  for (let i = 0; i < n; i++) {
    const r = await pay(urls[Math.floor(i / block) % urls.length], { method: "GET" });
    await r.text();
    chargeHeaderSeen = chargeHeaderSeen || r.headers.has("x-paygate-charge");
    statuses[r.status] = (statuses[r.status] || 0) + 1;
    const raw = r.headers.get("payment-response");
    if (!raw) continue;
    const receipt = decodePaymentResponseHeader(raw);
    if (receipt.transaction) deposits += 1;
    charged = receipt.extra && receipt.extra.channelState
      ? receipt.extra.channelState.chargedCumulativeAmount
      : charged;
    if (i === 0 || i === n - 1) receipts.push(receipt);
  }
  const report = { statuses, receipts, deposits, charged, chargeHeaderSeen };
  if (refund) {
    const amount = refund.split(":")[1];
    try {
      report.refund = await scheme.refund(urls[0], amount ? { amount } : {});
    } catch (err) {
      report.refund = { error: String(err && err.message ? err.message : err) };
    }
  }
  console.log(JSON.stringify(report));
  return 0;
}

main(process.argv[2], process.argv[3], process.argv[4], Number(process.argv[5]), process.argv[6]).then(
  (code) => process.exit(code),
  (err) => {
    console.error(err && err.stack ? err.stack : err);
    process.exit(2);
  },
);
