"""Validates paygate's /openapi.json with openapi-spec-validator, generates a Python client from
it with openapi-python-client (PyPI, an independent generator) and uses it against the running gateway: the operator creates an
organisation, the organisation creates a route and reads it back, and a bad route gets the
documented error. Nothing of paygate's code on the client side; the generated package is built
into a temporary directory, removed at the end.

Usage: python openapi_client.py BASE_URL ADMIN_TOKEN
Prints one JSON line {operations, org, route, read, refused}.
"""

import importlib
import json
import uuid
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from openapi_spec_validator import validate


def main(base, admin_token):
    doc = urllib.request.urlopen(f"{base}/openapi.json").read()
    validate(json.loads(doc))
    with tempfile.TemporaryDirectory() as work:
        run(base, admin_token, doc, Path(work))


def run(base, admin_token, doc, work):
    (work / "openapi.json").write_bytes(doc)
    subprocess.run(
        [
            str(Path(sys.executable).parent / "openapi-python-client"),
            "generate",
            "--path",
            str(work / "openapi.json"),
            "--meta",
            "none",
            "--output-path",
            str(work / "paygate_client"),
        ],
        check=True,
        capture_output=True,
    )
    sys.path.insert(0, str(work))
    client_mod = importlib.import_module("paygate_client")
    create_org = importlib.import_module("paygate_client.api.admin.create_org")
    routes_create = importlib.import_module("paygate_client.api.routes.routes_create")
    routes_get_one = importlib.import_module("paygate_client.api.routes.routes_get_one")
    models = importlib.import_module("paygate_client.models")

    admin = client_mod.AuthenticatedClient(base_url=base, token=admin_token)
    org = create_org.sync(
        client=admin,
        body=models.OrgCreate.from_dict(
            {"slug": f"genco-{uuid.uuid4().hex[:8]}", "receiverWallet": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"}
        ),
    )
    key = org.api_key
    seller = client_mod.AuthenticatedClient(base_url=base, token=key)
    body = models.RouteCreate.from_dict(
        {
            "path": "/gen",
            "priceUSD": "0.05",
            "targetUrl": "https://api.example.com/gen",
            "network": "base-sepolia",
            "description": "made by a generated client",
        }
    )
    route = routes_create.sync(client=seller, body=body)
    read = routes_get_one.sync(id=route.id, client=seller)
    bad = models.RouteCreate.from_dict(
        {"path": "/bad", "priceUSD": 0, "targetUrl": "ftp://x", "network": "base-sepolia"}
    )
    refused = routes_create.sync_detailed(client=seller, body=bad)
    print(
        json.dumps(
            {
                "operations": sum(1 for _ in (work / "paygate_client" / "api").rglob("*.py")),
                "org": org.slug,
                "route": route.to_dict(),
                "read": read.to_dict(),
                "refused": {"status": int(refused.status_code), "body": json.loads(refused.content)},
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
