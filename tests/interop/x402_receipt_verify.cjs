// Verifies a signed receipt or offer with the official npm helpers (@x402/extensions'
// offer-receipt `verifyReceiptSignatureEIP712` / `verifyOfferSignatureEIP712`): the signer
// recovered from the document alone. No code of paygate's.
//
// Usage: NODE_PATH=<node_modules> node x402_receipt_verify.cjs '{"receipt": {...}}' (or
// '{"offer": {...}}'). Prints one JSON line {signer, payload}.
"use strict";
const {
  verifyReceiptSignatureEIP712,
  verifyOfferSignatureEIP712,
} = require("@x402/extensions/offer-receipt");

async function main(input) {
  const { receipt, offer } = JSON.parse(input);
  const { signer, payload } = offer
    ? await verifyOfferSignatureEIP712(offer)
    : await verifyReceiptSignatureEIP712(receipt);
  console.log(JSON.stringify({ signer, payload }));
}

main(process.argv[2]).then(
  () => process.exit(0),
  (err) => {
    console.error(err && err.stack ? err.stack : err);
    process.exit(2);
  },
);
