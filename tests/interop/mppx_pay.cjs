// Pays a paygate route with MPP's official client library, unmodified: mppx's `Mppx.create`
// with its EVM `charge` method (Base Sepolia's USDC from mppx's own asset list), in MPP mode
// (the `WWW-Authenticate: Payment` challenge, an `Authorization: Payment` credential) or in
// x402 mode (the same client paying the route's x402 `exact` form), chosen among the offers the
// client itself read from the `402`. No code of paygate's on the client side.
//
// Usage: NODE_PATH=<node_modules> node mppx_pay.cjs '{"url","key","protocol":"mpp"|"x402","calls"?}'
// Prints one JSON line {offered: [method/intent or scheme...], results: [{status, receipt, body}]}
// (`receipt`: the decoded `Payment-Receipt`, or x402's `PAYMENT-RESPONSE`).
"use strict";
const { pathToFileURL } = require("node:url");
const { privateKeyToAccount } = require("viem/accounts");

const esm = (name) => import(pathToFileURL(require.resolve(name)).href);

function decode(value) {
  if (!value) return null;
  return JSON.parse(Buffer.from(value, "base64url").toString("utf8"));
}

async function main(input) {
  const { url, key, protocol, calls } = JSON.parse(input);
  const { Mppx, evm } = await esm("mppx/client");
  const account = privateKeyToAccount(key);
  const isX402 = (candidate) => {
    const c = candidate.challenge ?? candidate;
    return typeof c.request?.scheme === "string";
  };
  const offered = [];
  const mppx = Mppx.create({
    polyfill: false,
    methods: [evm.charge({ account, currencies: [evm.assets.baseSepolia.USDC] })],
    orderChallenges: (candidates) => {
      for (const c of candidates) {
        const ch = c.challenge ?? c;
        offered.push(isX402(c) ? `x402/${ch.request.scheme}` : `${ch.method}/${ch.intent}`);
      }
      return candidates.filter((c) => (protocol === "x402") === isX402(c));
    },
  });
  const results = [];
  for (let i = 0; i < (calls ?? 1); i++) {
    const res = await mppx.fetch(url);
    const receipt =
      decode(res.headers.get("payment-receipt")) ??
      (res.headers.get("payment-response")
        ? JSON.parse(Buffer.from(res.headers.get("payment-response"), "base64").toString("utf8"))
        : null);
    results.push({ status: res.status, receipt, body: await res.text() });
  }
  console.log(JSON.stringify({ offered: [...new Set(offered)], results }));
}

main(process.argv[2]).then(
  () => process.exit(0),
  (err) => {
    console.error(err && err.stack ? err.stack : err);
    process.exit(2);
  },
);
