"""Pays a paygate route once with the official x402 Python SDK (PyPI `x402`, protocol v2),
naming the payment with the x402 `payment-identifier` extension through the SDK's own helper
(`append_payment_identifier_to_extensions`, which adds the id only when the route declares the
extension). No code of paygate's on the client side.

Usage: python x402_python_pay_id.py URL PRIVATE_KEY PAYMENT_ID
Prints one JSON line {status, body, paymentResponse, header, code}: `header` is the
PAYMENT-SIGNATURE sent (to send the very same payment again), `code` paygate's error code if any.
Each run signs a new payment (a fresh nonce).
"""

import asyncio
import base64
import json
import sys

import httpx
from eth_account import Account
from x402 import x402Client
from x402.extensions.payment_identifier import append_payment_identifier_to_extensions
from x402.http.utils import encode_payment_signature_header
from x402.mechanisms.evm.exact import register_exact_evm_client
from x402.mechanisms.evm.signers import EthAccountSigner
from x402.schemas import parse_payment_required


async def main(url, key, payment_id):
    client = x402Client()
    register_exact_evm_client(client, EthAccountSigner(Account.from_key(key)))
    async with httpx.AsyncClient(timeout=30) as http:
        challenge = await http.get(url)
        required = parse_payment_required(
            json.loads(base64.b64decode(challenge.headers["payment-required"]))
        )
        extensions = dict(required.extensions or {})
        append_payment_identifier_to_extensions(extensions, payment_id)
        payload = await client.create_payment_payload(required, extensions=extensions)
        header = encode_payment_signature_header(payload)
        r = await http.get(url, headers={"PAYMENT-SIGNATURE": header})
        receipt = r.headers.get("payment-response")
        decoded = json.loads(base64.b64decode(receipt)) if receipt else None
        code = None
        if r.headers.get("content-type", "").startswith("application/json"):
            code = r.json().get("code") if isinstance(r.json(), dict) else None
        print(
            json.dumps(
                {
                    "status": r.status_code,
                    "body": r.text,
                    "paymentResponse": decoded,
                    "header": header,
                    "code": code,
                }
            )
        )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
