// Pays a paygate route with the official npm clients: @x402/fetch's wrapFetchWithPayment with
// @x402/evm's `exact` (which signs a Permit2 authorization when the requirement says
// `assetTransferMethod: "permit2"`), `upto` and `auth-capture` schemes; the payer's one
// approval of Permit2 is @x402/evm's own `createPermit2ApprovalTx`, sent with viem. No code of
// paygate's on the client side.
//
// Usage: NODE_PATH=<node_modules> node x402_permit2_pay.cjs '{"url","key","rpc","approve"?,"calls"?}'
// `approve`: a token address to approve Permit2 for first. `wallet`: pay as that smart wallet
// (EIP-1271), signing with `key` (its owner); with `factory` ({address, data}) the wallet is not
// deployed yet and each signature is wrapped as ERC-6492 (viem's own serializer) with the
// factory call that deploys it. `allow`: token addresses the agent
// accepts paying in beyond the client's default assets (its spend controls). `calls`: how many
// calls (1).
// Prints one JSON line {results: [{status, error, receipt, body}]}; exits non-zero only when the
// client itself failed.
"use strict";
const { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } = require("@x402/fetch");
const { ExactEvmScheme, createPermit2ApprovalTx } = require("@x402/evm/exact/client");
const { UptoEvmScheme } = require("@x402/evm/upto/client");
const { AuthCaptureEvmScheme } = require("@x402/evm/auth-capture/client");
const { toClientEvmSigner } = require("@x402/evm");
const { privateKeyToAccount } = require("viem/accounts");
const {
  createPublicClient,
  createWalletClient,
  http,
  serializeErc6492Signature,
} = require("viem");
const { baseSepolia } = require("viem/chains");

function decodeRequired(raw) {
  return raw ? JSON.parse(Buffer.from(raw, "base64").toString("utf8")) : null;
}

async function main(input) {
  const { url, key, rpc, approve, allow, calls, wallet, factory } = JSON.parse(input);
  const account = privateKeyToAccount(key);
  const transport = http(rpc);
  const publicClient = createPublicClient({ chain: baseSepolia, transport });
  if (approve) {
    const wallet = createWalletClient({ account, chain: baseSepolia, transport });
    const tx = createPermit2ApprovalTx(approve);
    const hash = await wallet.sendTransaction({ to: tx.to, data: tx.data });
    await publicClient.waitForTransactionReceipt({ hash });
  }
  // `wallet`: the payer is that smart wallet (EIP-1271), whose owner's key signs for it.
  const signTypedData = factory
    ? async (m) =>
        serializeErc6492Signature({
          address: factory.address,
          data: factory.data,
          signature: await account.signTypedData(m),
        })
    : (m) => account.signTypedData(m);
  const signer = toClientEvmSigner(
    wallet ? { address: wallet, signTypedData } : account,
    publicClient,
  );
  const client = new x402Client();
  if (allow) {
    client.setSpendControls({
      allowedAssets: allow.map((asset) => ({ network: "eip155:84532", asset })),
    });
  }
  client.register("eip155:84532", new ExactEvmScheme(signer));
  client.register("eip155:84532", new UptoEvmScheme(signer));
  client.register("eip155:84532", new AuthCaptureEvmScheme(signer));
  const pay = wrapFetchWithPayment(fetch, client);
  const results = [];
  for (let i = 0; i < (calls || 1); i++) {
    const r = await pay(url, { method: "GET" });
    const body = await r.text();
    const raw = r.headers.get("payment-response");
    const required = decodeRequired(r.headers.get("payment-required"));
    results.push({
      status: r.status,
      error: required ? required.error : null,
      receipt: raw ? decodePaymentResponseHeader(raw) : null,
      body,
    });
  }
  console.log(JSON.stringify({ results }));
  return 0;
}

main(process.argv[2]).then(
  (code) => process.exit(code),
  (err) => {
    console.error(err && err.stack ? err.stack : err);
    process.exit(2);
  },
);
