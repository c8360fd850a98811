#!/usr/bin/env python3
"""`make run`: the whole development environment on one machine.

Starts anvil on 127.0.0.1:8545 as chain 84532 with Circle's USDC placed at the Base Sepolia
address (1,000 test USDC minted to each of the ten development accounts), paygate
(conf/paygate.toml, admin token `dev-admin-token`, relayer = anvil account 0, data in .run/data)
settling on that chain, and a small echo upstream; makes sure the development org `acme` and
its route `/echo` exist, prints how to try it (including paying with the official x402 client), writes the same facts to .run/dev.json, and stops everything on Ctrl-C. A second run
resumes with the same data; leftovers of an earlier run are stopped first.
"""

import argparse
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where the run's data and facts live (a test of README's commands points it elsewhere).
RUN = os.environ.get("PAYGATE_DEV_RUN") or os.path.join(ROOT, ".run")
ADMIN_TOKEN = "dev-admin-token"
LISTEN = "127.0.0.1:8402"
SANDBOX_ADDR = "127.0.0.1:8404"
BASE = f"http://{LISTEN}"
ECHO_ADDR = ("127.0.0.1", 8403)
# anvil's well-known development accounts (mnemonic "test test ... junk").
ACCOUNTS = [
    ("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266", "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"),
    ("0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"),
    ("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a"),
    ("0x90F79bf6EB2c4f870365E785982E1f101E93b906", "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6"),
    ("0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65", "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a"),
    ("0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc", "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba"),
    ("0x976EA74026E726554dB657fA54763abd0C3a0aa9", "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e"),
    ("0x14dC79964da2C08b23698B3D3cc7Ca32193d9955", "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356"),
    ("0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f", "0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97"),
    ("0xa0Ee7A142d267C1f36714E4a8F75612F20a79720", "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6"),
]
RELAYER_KEY = ACCOUNTS[0][1]
RECEIVER_WALLET = ACCOUNTS[9][0]
PAYER_WALLET = ACCOUNTS[2][0]
DEV_NETWORK = "base-sepolia"
# Where the sandbox payout provider asks the USDC of a payout to be sent on chain (account 8; it
# holds the key, so a payout whose fiat leg fails gets its USDC back).
PROVIDER_FUNDING = ACCOUNTS[8]
USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
# The dev chain's test token without EIP-3009 (paid through Permit2), placed by `devchain setup`.
TDOL = "0x7E57D011A0000000000000000000000000000D01"
WALLET_FACTORY = "0x6492fac700000000000000000000000000006492"
RPC_ADDR = "127.0.0.1:8545"
RPC_URL = f"http://{RPC_ADDR}"


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers every request with what it received, as JSON. Like an LLM API sold by usage, it
    states what a call cost (`X-Paygate-Charge`, decimal USD) when asked in the query: `cost=X`,
    or by the request's size for `/llm` paths ($0.00001 per byte of path and body)."""

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
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        if "cost" in query:
            self.send_header("x-paygate-charge", query["cost"][0])
        elif "/llm" in self.path:
            self.send_header("x-paygate-charge", f"{(len(self.path) + len(body)) / 100000:.5f}")
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


def ports_free():
    """Exits with what to do when one of make run's fixed ports is taken (another `make run`
    still stopping, or started from another checkout): anvil would otherwise fail to bind and the
    setup would talk to the other run's chain."""
    taken = []
    for host, port in (RPC_ADDR.split(":"), LISTEN.split(":"), SANDBOX_ADDR.split(":"), ECHO_ADDR):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex((host, int(port))) == 0:
                taken.append(f"{host}:{port}")
    if taken:
        sys.exit(f"make run needs {', '.join(taken)}, which another process listens on (another "
                 "`make run` still stopping, or from another checkout?); stop it and run again")


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


class Started:
    """What a dev script started, stopped in reverse order on any exit: Ctrl-C, a failure
    half-way (a node that never became healthy, a chain that did not deploy) or an error."""

    def __init__(self):
        self.steps = []

    def add(self, stop):
        self.steps.append(stop)

    def stop(self):
        while self.steps:
            step = self.steps.pop()
            try:
                step()
            except Exception as e:  # one failed stop must not keep the others running
                print(f"stopping: {e}", file=sys.stderr, flush=True)


def stop_on_signals():
    """Ctrl-C and SIGTERM end the script through its `finally`, which stops what it started."""

    def stop(*_):
        print("\nstopping ...", flush=True)
        raise SystemExit(0)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def stop_all(procs):
    """SIGTERM to every process, then a wait (15 s each) and SIGKILL for any still running."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()


def remove_files(*paths):
    for f in paths:
        try:
            os.remove(f)
        except OSError:
            pass


def wait_healthy(proc, log_path, base=None, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"paygate exited early; see {log_path}:\n" + open(log_path).read()[-3000:])
        try:
            with urllib.request.urlopen((base or BASE) + "/healthz", timeout=1) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.1)
    sys.exit(f"paygate did not become healthy; see {log_path}")


def wait_rpc(proc):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}).encode()
    deadline = time.time() + 20
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit("anvil exited early; see .run/anvil.log (is port 8545 taken?)")
        try:
            req = urllib.request.Request(RPC_URL, data=body, headers={"content-type": "application/json"})
            with urllib.request.urlopen(req, timeout=1):
                return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.1)
    sys.exit("anvil did not start")


def master_key():
    """The key that seals payer wallets: the environment's, else one kept in .run/ so a second
    `make run` can still open the wallet stored by the first."""
    if os.environ.get("PAYGATE_MASTER_KEY"):
        return os.environ["PAYGATE_MASTER_KEY"]
    path = os.path.join(RUN, "master.key")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(os.urandom(32).hex())
        os.chmod(path, 0o600)
    return open(path).read().strip()


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
    # The payer wallet MCP tool calls spend from (sealed under the master key).
    status, body = call("PUT", "/admin/orgs/acme/payer-wallet", ADMIN_TOKEN, {"privateKey": ACCOUNTS[2][1]})
    assert status == 200, body
    status, routes = call("GET", "/api/routes", api_key)
    assert status == 200, routes
    dev_routes = [
        {"path": "/echo", "description": "Echoes the request back (development upstream)"},
        # An access window: one payment, then five more calls within the hour by signing in.
        {"path": "/dataset", "description": "Echo sold by the hour: pay once, sign in for 5 more calls",
         "accessWindowSeconds": 3600, "accessWindowCalls": 5},
        # Priced in the test token without EIP-3009: paid through Permit2.
        {"path": "/report", "description": "Echo paid in TDOL through Permit2", "token": "TDOL"},
        # Sold by usage: the payer authorizes $0.01 at most, the origin states what a call cost.
        {"path": "/llm", "description": "LLM-like echo charging by request size, at most $0.01",
         "schemes": ["upto"], "pricing": "usage", "targetUrl": f"http://{ECHO_ADDR[0]}:{ECHO_ADDR[1]}/llm"},
    ]
    for extra in dev_routes:
        if any(r["path"] == extra["path"] for r in routes):
            continue
        status, route = call(
            "POST",
            "/api/routes",
            api_key,
            {
                "priceUSD": 0.01,
                "targetUrl": f"http://{ECHO_ADDR[0]}:{ECHO_ADDR[1]}/echo",
                "network": DEV_NETWORK,
                **extra,
            },
        )
        assert status == 201, route
    return api_key


def fund_payout_wallet(api_key, binary, whole_usdc=1000):
    """The dev organisation's payout wallet (GET /api/payout-wallet), given test USDC when it
    holds less than 100; its address."""
    status, wallet = call("GET", "/api/payout-wallet", api_key)
    assert status == 200, wallet
    if float(wallet["usdcBalance"]) < 100:
        env = dict(os.environ, PAYGATE_DEVCHAIN_DEPLOYER_KEY=RELAYER_KEY)
        subprocess.run(
            [binary, "devchain", "fund", wallet["address"], "--amount", str(whole_usdc), "--rpc", RPC_URL],
            env=env, check=True, stdout=subprocess.DEVNULL,
        )
    return wallet["address"]


def ensure_corridor(api_key):
    """A BRL corridor for acme, KYC approved, so quotes and payouts work at once."""
    status, corridor = call("POST", "/corridors", api_key, {"destCurrency": "BRL"})
    assert status in (200, 201), corridor
    status, corridor = call("POST", f"/admin/corridors/{corridor['id']}/approve-kyc", ADMIN_TOKEN)
    assert status == 200, corridor
    return corridor["id"]


class Phases:
    """Says what `make run` did and how long each step took, as it goes, so a newcomer sees
    progress rather than silence."""

    def __init__(self):
        self.start = self.last = time.monotonic()

    def done(self, what):
        now = time.monotonic()
        print(f"  {what}: {now - self.last:.1f} s", flush=True)
        self.last = now


def start_chain(args, pid_file, started):
    """anvil on RPC_ADDR with Circle's USDC set up and minted to every development account, and the
    batch-settlement contract with its deposit collector at their canonical addresses. Returns
    the anvil process and the contracts placed (name -> address, for .run/dev.json)."""
    anvil_log = open(os.path.join(RUN, "anvil.log"), "w")
    anvil = subprocess.Popen(
        [args.anvil, "--host", "127.0.0.1", "--port", RPC_ADDR.split(":")[1], "--chain-id", "84532"],
        stdout=anvil_log,
        stderr=anvil_log,
        stdin=subprocess.DEVNULL,
    )
    open(pid_file, "w").write(str(anvil.pid))
    started.add(lambda: stop_all([anvil]))
    started.add(lambda: remove_files(pid_file))
    wait_rpc(anvil)
    setup = subprocess.run(
        [args.binary, "devchain", "setup", "--rpc", RPC_URL, "--artifacts", args.artifacts,
         "--mint-to", ",".join(a for a, _ in ACCOUNTS), "--contracts", args.contracts,
         # Every development account may relay for the deployment-wide escrow operator.
         "--operator-relayers", ",".join(a for a, _ in ACCOUNTS)],
        env=dict(os.environ, PAYGATE_DEVCHAIN_DEPLOYER_KEY=RELAYER_KEY),
        capture_output=True,
        text=True,
    )
    if setup.returncode != 0:
        sys.exit("setting up USDC on anvil failed:\n" + setup.stderr)
    return anvil, json.loads(setup.stdout).get("contracts", {})


def gateway_env():
    """The environment every development gateway shares (its own storage, listener and relayer
    are added by the caller)."""
    env = dict(os.environ)
    env.update(
        {
            "PAYGATE_ADMIN_TOKEN": ADMIN_TOKEN,
            "PAYGATE__NETWORKS__BASE-SEPOLIA__RPC_URL": RPC_URL,
            "PAYGATE_MASTER_KEY": master_key(),
            # The echo upstream is on loopback, which routes may not target by default (SSRF).
            "PAYGATE__UPSTREAM__ALLOW_PRIVATE_NETWORKS": '["127.0.0.0/8", "::1/128"]',
            # Development settles on the local chain only (no Base mainnet RPC needed).
            "PAYGATE__NETWORKS__BASE__RPC_URL": "",
            # Payouts go through the Circle Payments Network adapter to the built-in provider
            # simulator: CPN's quote and payment shapes, the beneficiary encrypted (JWE), RFIs,
            # webhooks signed as CPN signs them (ECDSA, its key served by id).
            "PAYGATE__PAYOUT__PROVIDER": "cpn",
            "PAYGATE__PAYOUT__SANDBOX__WEBHOOK_SIGNING": "circle",
            # Payouts move real (test) USDC: the organisation's payout wallet pays the sandbox
            # provider's address on the local chain, which the sandbox checks before it accepts.
            "PAYGATE__PAYOUT__FUNDING_NETWORK": DEV_NETWORK,
            "PAYGATE__PAYOUT__SANDBOX__FUNDING_ADDRESS": PROVIDER_FUNDING[0],
            "PAYGATE_SANDBOX_FUNDING_KEY": PROVIDER_FUNDING[1],
            # The test token routes may price in besides USDC ([networks.<name>.tokens.TDOL]).
            "PAYGATE__NETWORKS__BASE-SEPOLIA__TOKENS__TDOL__ADDRESS": TDOL,
            "PAYGATE__NETWORKS__BASE-SEPOLIA__TOKENS__TDOL__DECIMALS": "6",
            "PAYGATE__NETWORKS__BASE-SEPOLIA__TOKENS__TDOL__EIP712_NAME": '"Test Dollar"',
            "PAYGATE__NETWORKS__BASE-SEPOLIA__TOKENS__TDOL__EIP712_VERSION": '"1"',
            "PAYGATE__NETWORKS__BASE-SEPOLIA__TOKENS__TDOL__EIP3009": "false",
            # Counterfactual smart wallets (ERC-6492) of the dev chain's wallet factory are
            # deployed by the relayer when they first pay.
            "PAYGATE__NETWORKS__BASE-SEPOLIA__SMART_WALLET_FACTORIES": f'["{WALLET_FACTORY}"]',
            # The local chain has no public explorer: the ledger links no transaction (Base
            # Sepolia's explorer would show nothing for them).
            "PAYGATE__NETWORKS__BASE-SEPOLIA__EXPLORER_TX_URL": '""',
        }
    )
    return env


def main():
    started = Started()
    try:
        run(started)
    finally:
        started.stop()


def run(started):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/debug/paygate"))
    ap.add_argument("--anvil", required=True, help="the anvil binary")
    ap.add_argument("--artifacts", required=True, help="stablecoin-evm artifacts/hardhat/contracts")
    ap.add_argument("--contracts", required=True, help="the compiled dev-chain contracts (.tools/contracts)")
    args = ap.parse_args()
    os.makedirs(RUN, exist_ok=True)
    pid_file = os.path.join(RUN, "paygate.pid")
    anvil_pid_file = os.path.join(RUN, "anvil.pid")
    stop_leftover(pid_file)
    stop_leftover(anvil_pid_file)
    ports_free()

    stop_on_signals()
    phase = Phases()
    anvil, contracts = start_chain(args, anvil_pid_file, started)
    phase.done("chain: anvil, Circle's USDC and the dev contracts")
    echo = http.server.ThreadingHTTPServer(ECHO_ADDR, Echo)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    started.add(echo.shutdown)

    log_path = os.path.join(RUN, "paygate.log")
    env = gateway_env()
    env.update(
        {
            "PAYGATE__STORAGE__PATH": os.path.join(RUN, "data"),
            "PAYGATE__SERVER__LISTEN": LISTEN,
            "PAYGATE_RELAYER_KEY": RELAYER_KEY,
            # The sandbox payout provider on a known port (webhooks come back to paygate).
            "PAYGATE__PAYOUT__SANDBOX__LISTEN": SANDBOX_ADDR,
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
    started.add(lambda: stop_all([proc]))
    started.add(lambda: remove_files(pid_file))
    wait_healthy(proc, log_path)
    phase.done("gateway: started and healthy")

    dev_json = os.path.join(RUN, "dev.json")
    previous = {}
    if os.path.exists(dev_json):
        try:
            previous = json.load(open(dev_json))
        except ValueError:
            previous = {}
    api_key = ensure_dev_org(previous)
    corridor = ensure_corridor(api_key)
    payout_wallet = fund_payout_wallet(api_key, args.binary)
    phase.done("seed: dev org, route, corridor, payout wallet")
    facts = {
        "baseUrl": BASE,
        "rpcUrl": RPC_URL,
        "chainId": 84532,
        "network": DEV_NETWORK,
        "asset": USDC,
        "contracts": contracts,
        "adminToken": ADMIN_TOKEN,
        "org": {"slug": "acme", "apiKey": api_key, "receiverWallet": RECEIVER_WALLET, "payerWallet": PAYER_WALLET},
        "payerKeys": [k for _, k in ACCOUNTS[1:9]],
        "relayer": ACCOUNTS[0][0],
        "echoUrl": f"http://{ECHO_ADDR[0]}:{ECHO_ADDR[1]}/echo",
        "corridorId": corridor,
        "payoutWallet": payout_wallet,
        "sandboxProviderUrl": f"http://{SANDBOX_ADDR}",
        "consoleUrl": f"{BASE}/console",
    }
    with open(dev_json, "w") as f:
        json.dump(facts, f, indent=2)

    print(
        f"""
paygate is running
  gateway + APIs   {BASE}            (log: .run/paygate.log, data: .run/data)
  console          {BASE}/console    (sign in with the dev org's API key below; the operator
                                                   view takes the admin token)
  local chain      {RPC_URL} (anvil, chain 84532, USDC at {USDC}; log: .run/anvil.log)
  echo upstream    {facts['echoUrl']}
  payout provider  http://{SANDBOX_ADDR} (CPN simulator; BRL corridor {corridor} is ACTIVE)
  admin token      {ADMIN_TOKEN}
  dev org          acme   API key: {api_key}
  facts as JSON    .run/dev.json

Try it:
  # the paid route answers 402 with x402 payment requirements
  curl -i {BASE}/gateway/acme/echo
  # pay it with the official x402 Python client (test USDC of anvil account 2; `make py-deps`
  # installs the Python clients once: `make run` itself needs none)
  .venv/bin/python tests/interop/x402_python_pay.py {BASE}/gateway/acme/echo {ACCOUNTS[2][1]}
  # as an agent developer: a wallet of your own with test USDC, then pay with the CLI
  export PAYGATE_PAYER_KEY=$(python3 -c 'import secrets;print("0x"+secrets.token_hex(32))')
  PAYGATE_DEVCHAIN_DEPLOYER_KEY={RELAYER_KEY} {args.binary} devchain fund
  {args.binary} pay {BASE}/gateway/acme/echo
  # an access window with the official npm clients (`make client-deps` installs them once:
  # `make run` itself needs none): pays once, signs in for 5 calls, pays again
  NODE_PATH=.tools/node_modules node tests/interop/x402_window_pay.cjs {BASE}/gateway/acme/dataset {ACCOUNTS[3][1]} {RPC_URL} 7
  curl -s {BASE}/api/access-windows -H 'Authorization: Bearer {api_key}'
  # a token without EIP-3009, paid through Permit2 by the official npm clients: the first try
  # answers 412 permit2_allowance_required; with "approve" the payer approves Permit2 once
  NODE_PATH=.tools/node_modules node tests/interop/x402_permit2_pay.cjs '{{"url":"{BASE}/gateway/acme/report","key":"{ACCOUNTS[4][1]}","rpc":"{RPC_URL}","allow":["{TDOL}"]}}'
  NODE_PATH=.tools/node_modules node tests/interop/x402_permit2_pay.cjs '{{"url":"{BASE}/gateway/acme/report","key":"{ACCOUNTS[4][1]}","rpc":"{RPC_URL}","allow":["{TDOL}"],"approve":"{TDOL}"}}'
  # upto: authorizes $0.01, settles what the LLM-like origin states (receipt "amount"); no
  # approval first: the client signs USDC's permit to Permit2 with it (eip2612GasSponsoring)
  NODE_PATH=.tools/node_modules node tests/interop/x402_permit2_pay.cjs '{{"url":"{BASE}/gateway/acme/llm?prompt=hello","key":"{ACCOUNTS[5][1]}","rpc":"{RPC_URL}"}}'
  # MCP: the org's routes as paid tools (legacy SSE stream; Streamable HTTP is at {BASE}/mcp)
  curl -N {BASE}/mcp/sse -H 'Authorization: Bearer {api_key}'
  .venv/bin/python tests/interop/mcp_sse_client.py {BASE}/mcp/sse {api_key} --call echo --args '{{"query":{{"hi":"there"}}}}'
  # payout corridor: the payout wallet (test USDC in it), a quote of 100 USDC to BRL, then pay it
  # (the USDC moves on chain to the provider; its CPN-signed webhook settles it; beneficiary
  # "Sandbox Fail" fails, "Sandbox Hold" goes through COMPLIANCE_HOLD, "Sandbox Rfi" waits in
  # COMPLIANCE_HOLD for answers: the payout's page in the console, or POST .../rfi)
  curl -s {BASE}/api/payout-wallet -H 'Authorization: Bearer {api_key}'
  curl -s '{BASE}/corridors/{corridor}/quote?amount=100' -H 'Authorization: Bearer {api_key}'
  curl -s -X POST {BASE}/corridors/{corridor}/pay -H 'Authorization: Bearer {api_key}' \\
       -H "Idempotency-Key: $(python3 -c 'import uuid;print(uuid.uuid4())')" -H 'content-type: application/json' \\
       -d '{{"quoteId":"<quoteId>","fromAddress":"{payout_wallet}","amountUSDC":"100","beneficiary":{{"name":"Ana Souza","bankName":"Banco Teste","pixKey":"ana@example.com","country":"BR","currency":"BRL"}}}}'
  curl -s {BASE}/corridors/{corridor}/payments/<paymentId> -H 'Authorization: Bearer {api_key}'
  # the facilitator API paygate serves to other x402 servers
  curl -s {BASE}/facilitator/supported
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
