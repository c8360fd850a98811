// Signs a payment with the official npm client (@x402/evm): the `exact` scheme with
// `extra.assetTransferMethod: "permit2"`, the `upto` scheme, or the `auth-capture` scheme (an
// ERC-3009 `ReceiveWithAuthorization` into the escrow); no code of paygate's.
//
// Usage: NODE_PATH=<node_modules> node x402_permit2_sign.cjs '{"scheme","key","requirements"}'
// Prints the payment payload the client would send (JSON).
"use strict";
const { ExactEvmScheme } = require("@x402/evm/exact/client");
const { UptoEvmScheme } = require("@x402/evm/upto/client");
const { AuthCaptureEvmScheme } = require("@x402/evm/auth-capture/client");
const { privateKeyToAccount } = require("viem/accounts");

async function main(input) {
  const { scheme, key, requirements } = JSON.parse(input);
  const account = privateKeyToAccount(key);
  const client =
    scheme === "upto"
      ? new UptoEvmScheme(account)
      : scheme === "auth-capture"
        ? new AuthCaptureEvmScheme(account)
        : new ExactEvmScheme(account);
  const payload = await client.createPaymentPayload(2, requirements);
  console.log(JSON.stringify(payload));
}

main(process.argv[2]).then(
  () => process.exit(0),
  (err) => {
    console.error(err && err.stack ? err.stack : err);
    process.exit(2);
  },
);
