// An official x402 resource server that uses paygate as its facilitator: @x402/core's
// x402ResourceServer with @x402/evm's server scheme (`exact` or `upto`) and HTTPFacilitatorClient
// pointed at paygate's `/facilitator` (the organisation's API key in its auth headers). It learns
// the kinds from `/supported`, builds its requirements, lets the official client sign (approving
// Permit2 first for `upto`), then verifies and settles through paygate, `settleAmount` being the
// partial amount an `upto` server settles. No code of paygate's on either side.
//
// Usage: NODE_PATH=<node_modules> node x402_server_settle.cjs
//   '{"facilitator","apiKey","scheme","network","payTo","amount","asset","key","rpc","settleAmount"?}'
// Prints one JSON line {requirements, payload, verify, settle}; exits non-zero only when a library threw
// something other than a facilitator's answer.
"use strict";
const { x402ResourceServer, HTTPFacilitatorClient } = require("@x402/core/server");
const { UptoEvmScheme: UptoServer } = require("@x402/evm/upto/server");
const { ExactEvmScheme: ExactServer } = require("@x402/evm/exact/server");
const { UptoEvmScheme: UptoClient } = require("@x402/evm/upto/client");
const { ExactEvmScheme: ExactClient, createPermit2ApprovalTx } = require("@x402/evm/exact/client");
const { privateKeyToAccount } = require("viem/accounts");
const { createPublicClient, createWalletClient, http } = require("viem");
const { baseSepolia } = require("viem/chains");

// A facilitator's refusal comes back as an error carrying its answer.
function answer(err) {
  const r = err && (err.response || err.verifyResponse || err.settleResponse || err.body);
  if (r) return r;
  if (err && (err.invalidReason || err.errorReason)) return err;
  throw err;
}

async function main(input) {
  const cfg = JSON.parse(input);
  const auth = { Authorization: `Bearer ${cfg.apiKey}` };
  const facilitator = new HTTPFacilitatorClient({
    url: cfg.facilitator,
    createAuthHeaders: async () => ({ verify: auth, settle: auth, supported: {} }),
  });
  const server = new x402ResourceServer(facilitator);
  const upto = cfg.scheme === "upto";
  server.register(cfg.network, upto ? new UptoServer() : new ExactServer());
  await server.initialize();
  const [requirements] = await server.buildPaymentRequirements({
    scheme: cfg.scheme,
    network: cfg.network,
    payTo: cfg.payTo,
    price: { amount: cfg.amount, asset: cfg.asset, extra: { name: "USDC", version: "2" } },
    maxTimeoutSeconds: 60,
  });
  const account = privateKeyToAccount(cfg.key);
  if (upto) {
    const transport = http(cfg.rpc);
    const wallet = createWalletClient({ account, chain: baseSepolia, transport });
    const tx = createPermit2ApprovalTx(cfg.asset);
    const hash = await wallet.sendTransaction({ to: tx.to, data: tx.data });
    await createPublicClient({ chain: baseSepolia, transport }).waitForTransactionReceipt({ hash });
  }
  const client = upto ? new UptoClient(account) : new ExactClient(account);
  const signed = await client.createPaymentPayload(2, requirements);
  const payload = { x402Version: 2, accepted: requirements, ...signed };
  const verify = await server.verifyPayment(payload, requirements).catch(answer);
  const overrides = cfg.settleAmount !== undefined ? { amount: cfg.settleAmount } : undefined;
  const settle = await server
    .settlePayment(payload, requirements, undefined, undefined, overrides)
    .catch(answer);
  console.log(JSON.stringify({ requirements, payload, verify, settle }));
}

main(process.argv[2]).then(
  () => process.exit(0),
  (err) => {
    console.error(err && err.stack ? err.stack : err);
    process.exit(2);
  },
);
