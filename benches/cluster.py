#!/usr/bin/env python3
"""The cluster part of `make bench` (issue 17): paygate on PostgreSQL next to paygate on sled,
and nodes sharing one database. Writes the "Cluster on PostgreSQL" section of BENCHMARKS.md
(between its markers; appended when absent). Every figure is a ratio against a baseline run in
the same session, alternated over --reps repetitions:

- unpaid 402 on a PostgreSQL node against a sled node (target: at least 0.98x; the unpaid path
  must not touch the database);
- gateway CPU per paid request on PostgreSQL against sled (target: at most 1.2x), on anvil;
- cross-node propagation of a route change: PATCH on node A, polled on node B (target: p99 at
  most 100 ms);
- paid throughput with 1, 2 and 3 nodes on one database, each node offered the same load (it
  must not fall as nodes are added).
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
import dev_cluster  # noqa: E402
from run import ROOT, Command, Paygate, call, cpu_seconds, free_port, start_chain, wait_http, write_section, wrk  # noqa: E402

# anvil's development accounts: relayers (gas only) and payers (minted USDC).
RELAYERS = [
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
    "0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
    "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
]
# Anvil's account 4 (gas only): the relayer of the nodes of the unpaid runs.
UNPAID_RELAYER = "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a"
PAYERS = [
    ("0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"),
    ("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a"),
    ("0x90F79bf6EB2c4f870365E785982E1f101E93b906", "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6"),
]
BEGIN, END = "<!-- cluster:begin -->", "<!-- cluster:end -->"


def spread(xs):
    return min(xs), statistics.median(xs), max(xs)


def fmt(t, digits=2):
    return " / ".join(f"{x:.{digits}f}" for x in t)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def paid_load(a, url, requests, conns, payer):
    """Runs the paid_load example (unpinned: nodes and loads share the machine's cores)."""
    return subprocess.Popen(
        [a.paid_load, "--url", url, "--requests", str(requests), "--concurrency", str(conns)],
        env=dict(os.environ, PAID_LOAD_PAYER_KEY=payer),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(proc, url, requests):
    out, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"paid_load {url} failed: {err}")
    res = json.loads(out)
    if res["ok"] != requests or res["receipts"] != requests:
        sys.exit(f"paid_load {url}: not every payment was served with a receipt: {res}")
    return res


def node(a, work, name, database_url=None, relayer=None, rpc=None):
    # Unlimited plan: the runs pay for more requests than the free plan's month holds.
    env = {"PAYGATE_LOG": "warn", "PAYGATE__PLANS__FREE__MONTHLY_REQUESTS": "0"}
    # One load generator is one client address: the rate limits would be what is measured.
    env.update({"PAYGATE__LIMITS__CLIENT__PER_SECOND": "0", "PAYGATE__LIMITS__PAYER__PER_SECOND": "0",
                "PAYGATE__SERVER__GRACE_PERIOD_SECONDS": "0"})
    if database_url:
        env.update({"PAYGATE__STORAGE__BACKEND": "postgres", "PAYGATE_DATABASE_URL": database_url})
    if relayer:
        env.update({"PAYGATE_RELAYER_KEY": relayer, "PAYGATE__NETWORKS__BASE-SEPOLIA__RPC_URL": rpc})
    return Paygate(a.paygate, work, name, env)


def unpaid(a, work, procs, database_url, up, rpc):
    # Routes are only created on a network the node settles: these settle too (never used).
    sled = node(a, work, "sled", relayer=UNPAID_RELAYER, rpc=rpc)
    pgn = node(a, work, "pg-unpaid", database_url, relayer=UNPAID_RELAYER, rpc=rpc)
    procs += [sled, pgn]
    for gw in (sled, pgn):
        gw.route(gw.org("u" + str(gw.port)), "/r", up)
    urls = {"sled": sled.base + f"/gateway/u{sled.port}/r", "postgres": pgn.base + f"/gateway/u{pgn.port}/r"}
    runs = {k: [] for k in urls}
    for rep in range(a.reps):
        order = list(urls.items()) if rep % 2 == 0 else list(reversed(urls.items()))
        for name, url in order:
            r = wrk(url, a.conns, a.duration)
            assert r["non2xx"] > 0 and not r["errors"], r
            runs[name].append(r["rps"])
            print(f"rep {rep + 1} unpaid 402 {name:9s} {r['rps']:>9,.0f} req/s", flush=True)
    for gw in (sled, pgn):
        gw.stop()
        procs.remove(gw)
    return runs


def postgres_cpu():
    """CPU seconds used so far by every PostgreSQL server process (the database's share of a
    paid request on a node that stores in it)."""
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        if "(postgres)" not in stat:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def paid_cpu(a, work, procs, database_url, rpc, up):
    sled = node(a, work, "sled-paid", relayer=RELAYERS[0], rpc=rpc)
    pgn = node(a, work, "pg-paid", database_url, relayer=RELAYERS[1], rpc=rpc)
    procs += [sled, pgn]
    urls = {}
    for name, gw in (("sled", sled), ("postgres", pgn)):
        slug = f"p{gw.port}"
        gw.route(gw.org(slug), "/r", up, price=0.001)
        urls[name] = (gw, gw.base + f"/gateway/{slug}/r")
    for gw, url in urls.values():
        finished(paid_load(a, url, a.paid_conns, a.paid_conns, PAYERS[0][1]), url, a.paid_conns)  # warm-up
    runs = {k: [] for k in urls}
    for rep in range(a.reps):
        order = list(urls.items()) if rep % 2 == 0 else list(reversed(urls.items()))
        for name, (gw, url) in order:
            cpu0, db0 = cpu_seconds(gw.proc), postgres_cpu()
            res = finished(paid_load(a, url, a.paid_requests, a.paid_conns, PAYERS[0][1]), url, a.paid_requests)
            cpu = 1000 * (cpu_seconds(gw.proc) - cpu0) / a.paid_requests
            db = 1000 * (postgres_cpu() - db0) / a.paid_requests
            runs[name].append({"cpu_ms": cpu, "db_ms": db, "rps": res["rps"]})
            print(
                f"rep {rep + 1} paid {name:9s} {res['rps']:>7,.1f} req/s  gateway CPU {cpu:.3f} ms/req  "
                f"PostgreSQL CPU {db:.3f} ms/req",
                flush=True,
            )
    for gw in (sled, pgn):
        gw.stop()
        procs.remove(gw)
    return runs


def get_price(conn, path):
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    if r.status != 402:
        return None
    return json.loads(body)["accepts"][0]["maxAmountRequired"]


def propagation(a, nodes):
    """PATCH a route's price on node 0, then poll node 1 (keep-alive) until it charges it."""
    key = nodes[0].org("prop")
    route = nodes[0].route(key, "/r", "http://127.0.0.1:9/")
    path = "/gateway/prop/r"
    host, port = nodes[1].base.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    for _ in range(200):  # the route reaches node 1 first
        if get_price(conn, path):
            break
        time.sleep(0.01)
    seen = []
    for i in range(a.changes):
        price = round(0.01 + (i + 1) * 0.001, 3)
        want = str(int(round(price * 1_000_000)))
        s, body, _ = call(nodes[0].base, "PATCH", f"/api/routes/{route['id']}", key, {"priceUSD": price})
        assert s == 200, body
        t0 = time.perf_counter()
        while get_price(conn, path) != want:
            if time.perf_counter() - t0 > 10:
                sys.exit("a route change did not reach the other node within 10 s")
        seen.append(1000 * (time.perf_counter() - t0))
    print(f"propagation over {len(seen)} changes: p50 {pct(seen, 50):.2f} ms  p99 {pct(seen, 99):.2f} ms", flush=True)
    return seen


def busy():
    """The machine's (busy, total) CPU ticks so far, from /proc/stat."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = f[3] + f[4]
    return sum(f) - idle, sum(f)


def scale(a, nodes, up):
    """Paid throughput with 1, 2 and 3 nodes, each offered the same load."""
    key = nodes[0].org("scale")
    nodes[0].route(key, "/r", up, price=0.001)
    urls = [gw.base + "/gateway/scale/r" for gw in nodes]
    for gw in nodes:
        host, port = gw.base.split("//")[1].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        while not get_price(conn, "/gateway/scale/r"):
            time.sleep(0.01)
    runs = {k: [] for k in (1, 2, 3)}
    used = {k: [] for k in (1, 2, 3)}
    for rep in range(a.reps):
        for k in ((1, 2, 3) if rep % 2 == 0 else (3, 2, 1)):
            t0, b0 = time.perf_counter(), busy()
            loads = [paid_load(a, urls[i], a.paid_requests, a.paid_conns, PAYERS[i][1]) for i in range(k)]
            for i, p in enumerate(loads):
                finished(p, urls[i], a.paid_requests)
            rps = k * a.paid_requests / (time.perf_counter() - t0)
            b1 = busy()
            share = (b1[0] - b0[0]) / max(1, b1[1] - b0[1])
            runs[k].append(rps)
            used[k].append(share)
            print(f"rep {rep + 1} paid with {k} node(s) {rps:>7,.1f} req/s  machine CPU busy {share:.0%}", flush=True)
    return runs, used


def report(a, r):
    u, p, seen, (sc, used) = r["unpaid"], r["paid"], r["propagation"], r["scale"]
    unpaid_ratio = [x / y for x, y in zip(u["postgres"], u["sled"])]
    cpu_ratio = [x["cpu_ms"] / y["cpu_ms"] for x, y in zip(p["postgres"], p["sled"])]
    with_db = [(x["cpu_ms"] + x["db_ms"]) / y["cpu_ms"] for x, y in zip(p["postgres"], p["sled"])]
    lines = [
        BEGIN,
        "## Cluster on PostgreSQL (issue 17)",
        "",
        f"Produced by `make bench` (its cluster part alone: `make bench-cluster`, which runs "
        f"`python3 benches/cluster.py --reps {a.reps} --duration {a.duration} --conns {a.conns} "
        f"--paid-requests {a.paid_requests} --paid-conns {a.paid_conns} --changes {a.changes}`), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, this machine (2 cores). PostgreSQL is "
        "Debian's, a throwaway cluster on a Unix socket (fsync on). Ratios are per repetition, "
        "min / median / max; runs alternate their order.",
        "",
        "| measure | sled | PostgreSQL | ratio | target |",
        "|---|---|---|---|---|",
        f"| unpaid `402`, req/s (wrk -c{a.conns}, {a.duration} s; gateway pinned to CPU 0, wrk to CPU 1) "
        f"| {fmt(spread(u['sled']), 0)} | {fmt(spread(u['postgres']), 0)} | {fmt(spread(unpaid_ratio))} | ≥ 0.98 |",
        f"| gateway CPU per paid request, ms ({a.paid_requests} payments, {a.paid_conns} in flight, anvil "
        f"mining every {a.block_time} s) | {fmt(spread([x['cpu_ms'] for x in p['sled']]), 3)} | "
        f"{fmt(spread([x['cpu_ms'] for x in p['postgres']]), 3)} | {fmt(spread(cpu_ratio))} | ≤ 1.2 |",
        f"| the same, PostgreSQL's server processes added (the database's share, on this machine) "
        f"| {fmt(spread([x['cpu_ms'] for x in p['sled']]), 3)} | "
        f"{fmt(spread([x['cpu_ms'] + x['db_ms'] for x in p['postgres']]), 3)} | {fmt(spread(with_db))} | |",
        "",
        f"Cross-node propagation of a route change (PATCH on node A, then node B polled over one "
        f"keep-alive connection until its `402` carries the new price), {len(seen)} changes: "
        f"p50 {pct(seen, 50):.2f} ms, p99 {pct(seen, 99):.2f} ms, max {max(seen):.2f} ms "
        f"(target: p99 ≤ 100 ms).",
        "",
        f"Paid throughput with nodes on one database, each node offered the same load "
        f"({a.paid_requests} payments, {a.paid_conns} in flight, its own relayer and payer); the "
        f"nodes are pinned to CPU 0 like every server here (one proxy thread each); PostgreSQL, anvil "
        "and the load generators are not pinned:",
        "",
        "| nodes | paid req/s (min / median / max) | ratio to 1 node (median) | machine CPU busy (median) |",
        "|---|---|---|---|",
    ]
    base = statistics.median(sc[1])
    for k in (1, 2, 3):
        lines.append(
            f"| {k} | {fmt(spread(sc[k]), 1)} | {statistics.median(sc[k]) / base:.2f} | "
            f"{statistics.median(used[k]):.0%} |"
        )
    lines += ["", END]
    section = "\n".join(lines)
    write_section(a.out, section)
    print(section)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--paygate", required=True)
    ap.add_argument("--paid-load", required=True)
    ap.add_argument("--anvil", required=True)
    ap.add_argument("--artifacts", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--paid-requests", type=int, default=600)
    ap.add_argument("--paid-conns", type=int, default=64)
    ap.add_argument("--block-time", type=float, default=1.0)
    ap.add_argument("--changes", type=int, default=200)
    ap.add_argument("--out", default=os.path.join(ROOT, "BENCHMARKS.md"))
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="paygate-cluster-bench-")
    os.chmod(work, 0o755)
    pg_dir = os.path.join(work, "pg")
    procs = []
    try:
        database_url = dev_cluster.start_postgres(pg_dir)
        up_port = free_port()
        conf = os.path.join(work, "up.conf")
        open(conf, "w").write(
            f"daemon off; worker_processes 1; pid {work}/up.pid; error_log {work}/up.err;\n"
            f"events {{}} http {{ access_log off; server {{ listen 127.0.0.1:{up_port}; "
            f"location / {{ return 200 'ok'; }} }} }}\n"
        )
        procs.append(Command(work, "upstream", ["nginx", "-c", conf, "-p", work]))
        up = f"http://127.0.0.1:{up_port}/"
        wait_http(up)
        rpc = start_chain(a, work, procs, [p for p, _ in PAYERS])
        r = {"unpaid": unpaid(a, work, procs, database_url, up, rpc)}
        r["paid"] = paid_cpu(a, work, procs, database_url, rpc, up)
        nodes = [node(a, work, f"node{i}", database_url, RELAYERS[1 + i], rpc) for i in range(3)]
        procs += nodes
        r["propagation"] = propagation(a, nodes)
        r["scale"] = scale(a, nodes, up)
        report(a, r)
    finally:
        for p in procs:
            try:
                p.stop()
            except Exception:
                pass
        dev_cluster.stop_postgres(pg_dir)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
