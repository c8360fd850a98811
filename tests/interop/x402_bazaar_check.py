"""Reads paygate's discovery data with the official x402 SDK (PyPI `x402`) and checks it with the
SDK's own bazaar validators, as a facilitator's catalogue would: the listing through
`with_bazaar(HTTPFacilitatorClientSync(...)).extensions.bazaar.list_resources`, and each item's and
one route challenge's `extensions.bazaar` through `validate_discovery_extension` (info against
its schema) and `validate_discovery_extension_spec` (the protocol's rules).

Usage: python x402_bazaar_check.py GATEWAY_BASE_URL ROUTE_URL
Prints one JSON line {items: [{resource, type, valid, errors, input}], challenge: {...}}.
"""

import base64
import json
import sys
import urllib.request
import urllib.error

from x402.extensions.bazaar import (
    ListDiscoveryResourcesParams,
    validate_discovery_extension,
    with_bazaar,
)
from x402.extensions.bazaar.facilitator import validate_discovery_extension_spec
from x402.extensions.bazaar.types import parse_discovery_extension
from x402.http import HTTPFacilitatorClientSync
from x402.schemas import parse_payment_required


def check(ext):
    both = validate_discovery_extension(parse_discovery_extension(ext))
    spec = validate_discovery_extension_spec(ext)
    return {
        "valid": both.valid and spec.valid,
        "errors": list(both.errors) + list(spec.errors),
        "input": ext.get("info", {}).get("input"),
    }


def main(base, route_url):
    client = with_bazaar(HTTPFacilitatorClientSync({"url": base}))
    listed = client.extensions.bazaar.list_resources(ListDiscoveryResourcesParams(limit=100))
    items = []
    for item in listed.items:
        ext = (item.extensions or {}).get("bazaar")
        items.append({"resource": item.resource, "type": item.type, **check(ext)})

    try:
        urllib.request.urlopen(route_url)
        raise SystemExit("the route answered without a payment")
    except urllib.error.HTTPError as e:
        header = e.headers["PAYMENT-REQUIRED"]
    required = parse_payment_required(json.loads(base64.b64decode(header)))
    challenge = check(required.extensions["bazaar"])

    print(json.dumps({"version": listed.x402_version, "items": items, "challenge": challenge}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
