"""Pays a paygate route with the official x402 Python SDK (PyPI `x402`, protocol v2) and its
httpx client: no code of paygate's on the client side.

Usage: python x402_python_pay.py URL PRIVATE_KEY
Prints one JSON line {status, body, paymentResponse}; exits non-zero unless the answer is 200
with a settlement receipt.
"""

import asyncio
import base64
import json
import sys

from eth_account import Account
from x402 import x402Client
from x402.http.clients import x402HttpxClient
from x402.mechanisms.evm.exact import register_exact_evm_client
from x402.mechanisms.evm.signers import EthAccountSigner


async def main(url, key):
    client = x402Client()
    register_exact_evm_client(client, EthAccountSigner(Account.from_key(key)))
    async with x402HttpxClient(client, timeout=30) as http:
        r = await http.get(url)
        receipt = r.headers.get("payment-response")
        decoded = json.loads(base64.b64decode(receipt)) if receipt else None
        print(json.dumps({"status": r.status_code, "body": r.text, "paymentResponse": decoded}))
        return 0 if r.status_code == 200 and decoded and decoded.get("success") else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
