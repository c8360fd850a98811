// Pays a paygate route with the official npm x402 client `x402-fetch` (protocol v1): no code of
// paygate's on the client side.
//
// Usage: NODE_PATH=<node_modules> node x402_fetch_pay.cjs URL PRIVATE_KEY
// Prints one JSON line {status, body, paymentResponse}; exits non-zero unless the answer is 200
// with a settlement receipt.
const { wrapFetchWithPayment, createSigner, decodeXPaymentResponse } = require("x402-fetch");

async function main(url, key) {
  const signer = await createSigner("base-sepolia", key);
  const fetchWithPay = wrapFetchWithPayment(fetch, signer);
  const r = await fetchWithPay(url, { method: "GET" });
  const raw = r.headers.get("x-payment-response");
  const receipt = raw ? decodeXPaymentResponse(raw) : null;
  const body = await r.text();
  console.log(JSON.stringify({ status: r.status, body, paymentResponse: receipt }));
  return r.status === 200 && receipt && receipt.success ? 0 : 1;
}

main(process.argv[2], process.argv[3]).then(
  (code) => process.exit(code),
  (err) => {
    console.error(err && err.stack ? err.stack : err);
    process.exit(2);
  },
);
