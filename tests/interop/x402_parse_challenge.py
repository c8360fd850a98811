"""Reads paygate 402 challenges with the official x402 Python SDK's own parsers.

Usage: python x402_parse_challenge.py URL [URL...]
Exits non-zero if any challenge is rejected by the SDK or disagrees between versions.
"""

import json
import sys
import urllib.error
import urllib.request

from x402.http.x402_http_client_base import x402HTTPClientBase
from x402.schemas.v1 import PaymentRequiredV1, PaymentRequirementsV1


def fetch_402(url):
    try:
        urllib.request.urlopen(url)
    except urllib.error.HTTPError as e:
        if e.code != 402:
            raise SystemExit(f"{url}: expected 402, got {e.code}")
        return e.headers, e.read()
    raise SystemExit(f"{url}: expected 402, got success")


def check(url):
    headers, body = fetch_402(url)
    client = x402HTTPClientBase()
    # The SDK reads the v2 header first (as its HTTP client does), else the v1 body.
    v2 = client.get_payment_required_response(lambda name: headers.get(name), body)
    assert v2.x402_version == 2, v2
    req2 = v2.accepts[0]
    # The v1 body and the seed header, through the SDK's v1 models.
    v1 = PaymentRequiredV1.model_validate_json(body)
    req1 = v1.accepts[0]
    seed = PaymentRequirementsV1.model_validate(json.loads(headers["X-Payment-Requirements"]))
    assert seed == req1, (seed, req1)
    assert req1.scheme == req2.scheme == "exact"
    assert req1.max_amount_required == req2.amount, (req1, req2)
    assert req1.pay_to == req2.pay_to and req1.asset == req2.asset
    assert req1.resource == url and v2.resource.url == url, (req1.resource, url)
    assert req2.network.startswith("eip155:") and not req1.network.startswith("eip155:")
    assert req1.extra["name"] == req2.extra["name"] and req1.extra["version"] == "2"
    print(f"{url}: v1 {req1.network} {req1.max_amount_required}, v2 {req2.network} {req2.amount}")


def main():
    urls = sys.argv[1:]
    if not urls:
        raise SystemExit(__doc__)
    for url in urls:
        check(url)
    print(f"ok {len(urls)} challenges")


if __name__ == "__main__":
    main()
