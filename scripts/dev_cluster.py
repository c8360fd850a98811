#!/usr/bin/env python3
"""`make cluster`: three paygate nodes on one PostgreSQL, on one machine.

A throwaway PostgreSQL cluster (Debian's package) under .run/cluster/pg, listening on a Unix
socket only and started as the unprivileged `postgres` user when run as root; anvil with USDC and
the echo upstream as in `make run`; three nodes on 127.0.0.1:8402, :8412 and :8422, each with its
own relayer account (a relayer is one node's alone), sharing the database and the master key.
Node 1 runs the built-in CPN provider simulator; the others reach it through the same CPN adapter, and
its webhooks come back through node 1 into the shared database. Makes the development org `acme`,
its route `/echo` and an ACTIVE BRL corridor, writes .run/cluster.json, and stops everything on
Ctrl-C. Every run starts from an empty database.
"""

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import http.server

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dev_env  # noqa: E402
from dev_env import ACCOUNTS, ADMIN_TOKEN, ECHO_ADDR, RPC_URL, RUN, USDC  # noqa: E402

CLUSTER = os.path.join(RUN, "cluster")
PG_DIR = os.path.join(CLUSTER, "pg")
NODES = ["127.0.0.1:8402", "127.0.0.1:8412", "127.0.0.1:8422"]
SANDBOX_ADDR = "127.0.0.1:8404"
# Relayers: accounts 0, 7 and 8 (gas only); payers: accounts 1 to 6.
RELAYERS = [ACCOUNTS[0], ACCOUNTS[7], ACCOUNTS[8]]
WEBHOOK_SECRET = "dev-cluster-webhook-secret"
# The deployment-wide escrow operator `paygate devchain setup` places (auth_capture.rs).
DEV_OPERATOR = "0x5e11e700000000000000000000000000000000e0"


def pg_bin(program):
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/" + program),
        key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0,
    )
    if not found:
        sys.exit("PostgreSQL is not installed (make installs Debian's postgresql)")
    return found[-1]


def as_pg_user(cmd):
    """PostgreSQL refuses to run as root: run its programs as `postgres` then."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--"] + cmd
    return cmd


def pg(program, *args, check=True):
    out = subprocess.run(as_pg_user([pg_bin(program), *args]), capture_output=True, text=True)
    if check and out.returncode != 0:
        sys.exit(f"{program} failed:\n{out.stdout}{out.stderr}")
    return out


def start_postgres(pg_dir=PG_DIR):
    """A new, empty PostgreSQL cluster in `pg_dir` (socket only); its database URL."""
    data = os.path.join(pg_dir, "data")
    if os.path.exists(os.path.join(data, "postmaster.pid")):
        pg("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop", check=False)
    shutil.rmtree(pg_dir, ignore_errors=True)
    os.makedirs(pg_dir)
    if os.geteuid() == 0:
        shutil.chown(pg_dir, "postgres", "postgres")
    pg("initdb", "-D", data, "-U", "paygate", "--auth=trust", "-E", "UTF8", "--no-sync")
    pg(
        "pg_ctl", "-D", data, "-l", os.path.join(pg_dir, "log"), "-w", "start",
        "-o", f"-k {pg_dir} -c listen_addresses='' -c max_connections=200",
    )
    pg("createdb", "-h", pg_dir, "-U", "paygate", "paygate")
    return f"postgres://paygate@localhost/paygate?host={pg_dir}"


def stop_postgres(pg_dir=PG_DIR):
    pg("pg_ctl", "-D", os.path.join(pg_dir, "data"), "-m", "fast", "-w", "stop", check=False)


def start_node(args, i, database_url, fresh=True):
    data = os.path.join(CLUSTER, f"node{i + 1}")
    if fresh:
        shutil.rmtree(data, ignore_errors=True)
    os.makedirs(data, exist_ok=True)
    env = dev_env.gateway_env()
    env.update(
        {
            "PAYGATE__STORAGE__BACKEND": "postgres",
            "PAYGATE_DATABASE_URL": database_url,
            "PAYGATE__STORAGE__PATH": data,
            "PAYGATE__SERVER__LISTEN": NODES[i],
            "PAYGATE_RELAYER_KEY": RELAYERS[i][1],
            "PAYGATE_WEBHOOK_SECRETS": WEBHOOK_SECRET,
            # One escrow operator for the three nodes (the contract `devchain setup` placed):
            # any node captures, voids and refunds any `auth-capture` payment.
            "PAYGATE__FACILITATOR__OPERATOR": DEV_OPERATOR,
        }
    )
    if i == 0:
        env["PAYGATE__PAYOUT__SANDBOX__LISTEN"] = SANDBOX_ADDR
    else:
        # The same CPN adapter, pointed at node 1's simulator.
        env["PAYGATE__PAYOUT__CPN__BASE_URL"] = f"http://{SANDBOX_ADDR}"
    log_path = os.path.join(CLUSTER, f"node{i + 1}.log")
    log = open(log_path, "a")
    proc = subprocess.Popen(
        [args.binary, "serve", "--config", os.path.join(dev_env.ROOT, "conf/paygate.toml")],
        env=env,
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
    )
    open(os.path.join(CLUSTER, f"node{i + 1}.pid"), "w").write(str(proc.pid))
    return proc, log_path


def main():
    started = dev_env.Started()
    try:
        run(started)
    finally:
        started.stop()


def run(started):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", default=os.path.join(dev_env.ROOT, "target/debug/paygate"))
    ap.add_argument("--anvil", required=True, help="the anvil binary")
    ap.add_argument("--artifacts", required=True, help="stablecoin-evm artifacts/hardhat/contracts")
    ap.add_argument("--contracts", required=True, help="the compiled dev-chain contracts (.tools/contracts)")
    args = ap.parse_args()
    os.makedirs(CLUSTER, exist_ok=True)
    for i in range(len(NODES)):
        dev_env.stop_leftover(os.path.join(CLUSTER, f"node{i + 1}.pid"))
    anvil_pid_file = os.path.join(CLUSTER, "anvil.pid")
    dev_env.stop_leftover(anvil_pid_file)

    dev_env.stop_on_signals()
    started.add(stop_postgres)
    database_url = start_postgres()
    _, contracts = dev_env.start_chain(args, anvil_pid_file, started)
    echo = http.server.ThreadingHTTPServer(ECHO_ADDR, dev_env.Echo)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    started.add(echo.shutdown)
    # All three at once: they apply the migrations once between them.
    nodes = []
    started.add(lambda: dev_env.stop_all([proc for proc, _ in nodes]))
    nodes.extend(start_node(args, i, database_url) for i in range(len(NODES)))
    bases = [f"http://{n}" for n in NODES]
    for (proc, log_path), base in zip(nodes, bases):
        dev_env.wait_healthy(proc, log_path, base=base, seconds=60)

    dev_env.BASE = bases[0]
    api_key = dev_env.ensure_dev_org({})
    corridor = dev_env.ensure_corridor(api_key)
    dev_env.fund_payout_wallet(api_key, args.binary)
    facts = {
        "nodes": bases,
        "databaseUrl": database_url,
        "rpcUrl": RPC_URL,
        "chainId": 84532,
        "network": dev_env.DEV_NETWORK,
        "asset": USDC,
        "contracts": contracts,
        "adminToken": ADMIN_TOKEN,
        "org": {"slug": "acme", "apiKey": api_key, "receiverWallet": dev_env.RECEIVER_WALLET,
                "payerWallet": dev_env.PAYER_WALLET},
        "corridor": {"id": corridor},
        "payerKeys": [k for _, k in ACCOUNTS[1:7]],
        "relayers": [a for a, _ in RELAYERS],
        "echoUrl": f"http://{ECHO_ADDR[0]}:{ECHO_ADDR[1]}/echo",
        "sandboxProviderUrl": f"http://{SANDBOX_ADDR}",
    }
    with open(os.path.join(RUN, "cluster.json"), "w") as f:
        json.dump(facts, f, indent=2)
    print(
        f"""
paygate cluster is running: three nodes on one PostgreSQL
  nodes            {'  '.join(bases)}   (logs: .run/cluster/node*.log)
  database         {database_url}
  local chain      {RPC_URL} (anvil, chain 84532, USDC at {USDC})
  payout provider  http://{SANDBOX_ADDR} (CPN simulator on node 1; BRL corridor {corridor} is ACTIVE)
  admin token      {ADMIN_TOKEN}
  dev org          acme   API key: {api_key}
  facts as JSON    .run/cluster.json

Try it:
  # a route made through one node is served by every node
  curl -s -X POST {bases[1]}/api/routes -H 'Authorization: Bearer {api_key}' -H 'content-type: application/json' \\
       -d '{{"path":"/hello","priceUSD":0.02,"targetUrl":"{facts['echoUrl']}","network":"base-sepolia"}}'
  curl -i {bases[2]}/gateway/acme/hello
  # pay on one node; the same payment on another is a replay (`make py-deps` installs the client)
  .venv/bin/python tests/interop/x402_python_pay.py {bases[0]}/gateway/acme/echo {ACCOUNTS[2][1]}
  # which node does the cluster's reconciliation now
  for n in {' '.join(bases)}; do curl -s $n/healthz; echo; done

Ctrl-C stops everything. A node that stops (try kill -9 on one) is reported and the
others keep serving; kill -USR1 {os.getpid()} starts it again.""",
        flush=True,
    )
    # A node that exits (killed to watch failover, or failed) is reported; the others keep
    # serving. SIGUSR1 starts every stopped node again, on its own data directory.
    restart = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: restart.set())
    reported = set()
    while True:
        for i, (proc, log_path) in enumerate(nodes):
            code = proc.poll()
            if code is not None and i not in reported:
                reported.add(i)
                alive = [f"{j + 1}" for j, (p, _) in enumerate(nodes) if p.poll() is None]
                print(
                    f"node {i + 1} ({bases[i]}) exited with status {code} (log: {log_path}); "
                    f"node(s) {', '.join(alive) or 'none'} keep serving. "
                    f"Start it again: kill -USR1 {os.getpid()}",
                    flush=True,
                )
        if restart.is_set():
            restart.clear()
            for i in sorted(reported):
                nodes[i] = start_node(args, i, database_url, fresh=False)
                dev_env.wait_healthy(nodes[i][0], nodes[i][1], base=bases[i], seconds=60)
                print(f"node {i + 1} ({bases[i]}) is serving again", flush=True)
            reported.clear()
        time.sleep(0.5)


if __name__ == "__main__":
    main()
