#!/usr/bin/env python3
"""`make run`: the whole development environment on one machine.

Starts paygate (conf/paygate.toml, admin token `dev-admin-token`, data in .run/data) and a small
echo upstream, makes sure the development org `acme` and its route `/echo` exist, prints how to
try it, writes the same facts to .run/dev.json, and stops everything on Ctrl-C. A second run
resumes with the same data; leftovers of an earlier run are stopped first.
"""

import argparse
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, ".run")
ADMIN_TOKEN = "dev-admin-token"
LISTEN = "127.0.0.1:8402"
BASE = f"http://{LISTEN}"
ECHO_ADDR = ("127.0.0.1", 8403)
# anvil's well-known development accounts (mnemonic "test test ... junk").
RECEIVER_WALLET = "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"  # account 9
PAYER_WALLET = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"  # account 2
DEV_NETWORK = "base-sepolia"


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers every request with what it received, as JSON."""

    def _answer(self):
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n).decode("utf-8", "replace") if n else ""
        out = json.dumps(
            {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, *args):
        pass


def call(method, path, token, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, json.loads(raw) if raw else None


def stop_leftover(pid_file):
    try:
        pid = int(open(pid_file).read().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:
        pass


def wait_healthy(proc, log_path):
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"paygate exited early; see {log_path}:\n" + open(log_path).read()[-3000:])
        try:
            with urllib.request.urlopen(BASE + "/healthz", timeout=1) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.1)
    sys.exit(f"paygate did not become healthy; see {log_path}")


def ensure_dev_org(previous):
    status, org = call("GET", "/admin/orgs/acme", ADMIN_TOKEN)
    api_key = None
    if status == 404:
        status, org = call(
            "POST",
            "/admin/orgs",
            ADMIN_TOKEN,
            {"slug": "acme", "name": "Acme (development)", "receiverWallet": RECEIVER_WALLET},
        )
        assert status == 201, org
        api_key = org["apiKey"]
    else:
        old = (previous.get("org") or {}).get("apiKey")
        if old and call("GET", "/api/routes", old)[0] == 200:
            api_key = old
        else:
            status, key = call("POST", "/admin/orgs/acme/keys", ADMIN_TOKEN)
            assert status == 201, key
            api_key = key["apiKey"]
    status, routes = call("GET", "/api/routes", api_key)
    assert status == 200, routes
    if not any(r["path"] == "/echo" for r in routes):
        status, route = call(
            "POST",
            "/api/routes",
            api_key,
            {
                "path": "/echo",
                "priceUSD": 0.01,
                "targetUrl": f"http://{ECHO_ADDR[0]}:{ECHO_ADDR[1]}/echo",
                "network": DEV_NETWORK,
                "description": "Echoes the request back (development upstream)",
            },
        )
        assert status == 201, route
    return api_key


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/paygate"))
    args = ap.parse_args()
    os.makedirs(RUN, exist_ok=True)
    pid_file = os.path.join(RUN, "paygate.pid")
    stop_leftover(pid_file)

    echo = http.server.ThreadingHTTPServer(ECHO_ADDR, Echo)
    threading.Thread(target=echo.serve_forever, daemon=True).start()

    log_path = os.path.join(RUN, "paygate.log")
    env = dict(os.environ)
    env.update(
        {
            "PAYGATE_ADMIN_TOKEN": ADMIN_TOKEN,
            "PAYGATE__STORAGE__PATH": os.path.join(RUN, "data"),
            "PAYGATE__SERVER__LISTEN": LISTEN,
        }
    )
    log = open(log_path, "a")
    proc = subprocess.Popen(
        [args.binary, "serve", "--config", os.path.join(ROOT, "conf/paygate.toml")],
        env=env,
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
    )
    open(pid_file, "w").write(str(proc.pid))

    def shutdown(*_):
        print("\nstopping paygate ...", flush=True)
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        echo.shutdown()
        try:
            os.remove(pid_file)
        except OSError:
            pass
        sys.exit(0)

    signal.signal(signal.SIGINT, shutdown)
    signal.signal(signal.SIGTERM, shutdown)
    wait_healthy(proc, log_path)

    dev_json = os.path.join(RUN, "dev.json")
    previous = {}
    if os.path.exists(dev_json):
        try:
            previous = json.load(open(dev_json))
        except ValueError:
            previous = {}
    api_key = ensure_dev_org(previous)
    facts = {
        "baseUrl": BASE,
        "rpcUrl": None,
        "network": DEV_NETWORK,
        "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        "adminToken": ADMIN_TOKEN,
        "org": {"slug": "acme", "apiKey": api_key, "receiverWallet": RECEIVER_WALLET, "payerWallet": PAYER_WALLET},
        "payerKeys": [],
        "echoUrl": f"http://{ECHO_ADDR[0]}:{ECHO_ADDR[1]}/echo",
    }
    with open(dev_json, "w") as f:
        json.dump(facts, f, indent=2)

    print(
        f"""
paygate is running
  gateway + APIs   {BASE}            (log: .run/paygate.log, data: .run/data)
  echo upstream    {facts['echoUrl']}
  admin token      {ADMIN_TOKEN}
  dev org          acme   API key: {api_key}
  facts as JSON    .run/dev.json

Try it:
  # the paid route answers 402 with x402 payment requirements
  curl -i {BASE}/gateway/acme/echo
  # the public sandbox route
  curl -i {BASE}/gateway/demo/demo
  # list and create routes
  curl -s {BASE}/api/routes -H 'Authorization: Bearer {api_key}'
  curl -s -X POST {BASE}/api/routes -H 'Authorization: Bearer {api_key}' \\
       -H 'content-type: application/json' \\
       -d '{{"path":"/weather","priceUSD":0.05,"targetUrl":"https://api.example.com/weather","network":"base-sepolia"}}'
  # create another organisation
  curl -s -X POST {BASE}/admin/orgs -H 'Authorization: Bearer {ADMIN_TOKEN}' \\
       -H 'content-type: application/json' -d '{{"slug":"globex","receiverWallet":"{RECEIVER_WALLET}"}}'

Ctrl-C stops everything.""",
        flush=True,
    )
    while proc.poll() is None:
        time.sleep(0.5)
    sys.exit(f"paygate exited with {proc.returncode}; see {log_path}")


if __name__ == "__main__":
    main()
