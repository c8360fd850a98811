#!/usr/bin/env python3
"""The payment channels part of `make bench` (issue 29): voucher-paid requests next to free and
`exact`-paid ones through the same gateway, in the same session. Writes the "Payment channels"
section of BENCHMARKS.md (between its markers; appended when absent).

One paygate (the bench build, one worker thread, sled) and the trivial nginx upstream on CPU 0;
the load generator (`paid_load`, the same client for every mode, payments signed before the
clock starts) on CPU 1; anvil mining every second. One route offers both schemes at $0.001:

- free: the bench build's `x-paygate-bench-free` pass (no payment; the proxy path's floor);
- voucher: every connection its own channel (opened by a deposit before the clock), then one
  cumulative voucher a request (one signature recovery, one store write);
- exact: one EIP-3009 payment a request, settled on chain before the answer;
- mpp: one MPP `charge` credential a request (`Authorization: Payment`, its EIP-3009
  authorization settled as exact's), each for a challenge of its own (issue 53: within 1.1x of
  exact);
- escrow: one `auth-capture` payment a request (held in escrow before forwarding, captured for
  what was served; issue 54: within 1.1x of exact).

Reported as min / median / max over --reps alternated repetitions: requests per second, the
gateway's CPU per request (from /proc), p50 / p99 latency; ratios voucher/free and
voucher/exact; then one claim of every channel the runs opened (one transaction).

Then the cluster (unless --no-cluster): three nodes (the same build, one worker thread each,
unpinned) on one PostgreSQL on this machine, each with its own load generator and channels
(a channel's requests on one node, the common case), all at once: their voucher-paid rate
against the single sled node's, and what PostgreSQL did per voucher (transactions committed,
rows of `channels` updated, from its statistics views).
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
import dev_cluster  # noqa: E402
from cluster import RELAYERS, postgres_cpu  # noqa: E402
from run import (  # noqa: E402
    PAYER, ROOT, Nginx, Paygate, call, cpu_seconds, free_port, in_work_dir, machine, paid_load,
    settling, spread, start_chain, wait_http, write_section,
)

BEGIN, END = "<!-- channels:begin -->", "<!-- channels:end -->"
MASTER_KEY = "6b1f0e3c2a4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7"


def run(a, work, procs):
    up_port = free_port()
    procs.append(Nginx(work, "upstream", f"server {{ listen 127.0.0.1:{up_port}; location / {{ return 200 \"ok\"; }} }}"))
    up = f"http://127.0.0.1:{up_port}"
    wait_http(up + "/")
    rpc = start_chain(a, work, procs, [PAYER[0]], contracts=a.contracts)
    env = settling(rpc)
    env["PAYGATE_MASTER_KEY"] = MASTER_KEY
    gw = Paygate(a.bench_paygate, work, "paygate-channels", env)
    procs.append(gw)
    key = gw.org("chan")
    s, body, _ = call(gw.base, "POST", "/api/routes", key, {
        "path": "/r", "priceUSD": "0.001", "targetUrl": up + "/", "network": "base-sepolia",
        "schemes": ["exact", "batch-settlement", "auth-capture"]})
    assert s == 201, body
    url = gw.base + "/gateway/chan/r"
    modes = {
        "free": (a.requests, a.conns),
        "voucher": (a.requests, a.conns),
        "exact": (a.exact_requests, a.conns),
        "mpp": (a.exact_requests, a.conns),
        "escrow": (a.exact_requests, a.conns),
    }
    # Warm-up: connections, the relayer's nonces, caches.
    for scheme, n in (("free", a.conns * 4), ("batch-settlement", a.conns * 4), ("exact", a.conns),
                      ("mpp", a.conns), ("auth-capture", a.conns)):
        paid_load(a, url, n, scheme, a.conns)
    runs = {m: [] for m in modes}
    for rep in range(a.reps):
        order = list(modes.items())
        for mode, (n, c) in order if rep % 2 == 0 else reversed(order):
            scheme = {"voucher": "batch-settlement", "escrow": "auth-capture"}.get(mode, mode)
            cpu0 = cpu_seconds(gw.proc)
            res = paid_load(a, url, n, scheme, c)
            res["cpu_us_per_request"] = 1e6 * (cpu_seconds(gw.proc) - cpu0) / res["requests"]
            runs[mode].append(res)
            print(f"rep {rep + 1} {mode:8s} {res['rps']:>9,.1f} req/s  p50 {res['p50_ms']:.2f} ms  "
                  f"p99 {res['p99_ms']:.2f} ms  gateway CPU {res['cpu_us_per_request']:.0f} us/req", flush=True)
    # Latency and CPU at a rate both paths sustain (paced, so queueing under saturation is not
    # what is measured, and both paths' event loops wake as often): a voucher's own added time
    # and CPU.
    paced = {"free": [], "voucher": []}
    for rep in range(a.paced_reps):
        for mode in ("free", "voucher") if rep % 2 == 0 else ("voucher", "free"):
            scheme = {"voucher": "batch-settlement"}.get(mode, mode)
            cpu0 = cpu_seconds(gw.proc)
            res = paid_load(a, url, a.paced_requests, scheme, a.conns, rate=a.paced_rate)
            res["cpu_us_per_request"] = 1e6 * (cpu_seconds(gw.proc) - cpu0) / res["requests"]
            paced[mode].append(res)
            print(f"paced rep {rep + 1} {mode:8s} at {a.paced_rate:,.0f} req/s: p50 {res['p50_ms']:.2f} ms  "
                  f"p99 {res['p99_ms']:.2f} ms  gateway CPU {res['cpu_us_per_request']:.0f} us/req", flush=True)
    # Every channel the runs opened, claimed now: one transaction per claim batch.
    t = time.time()
    s, claimed, _ = call(gw.base, "POST", "/api/channels/claim", key, {})
    assert s == 200, claimed
    claim_seconds = time.time() - t
    s, listed, _ = call(gw.base, "GET", "/api/channels", key)
    txs = {c["claimTransaction"] for c in listed["channels"] if c["claimTransaction"]}
    gas = []
    for tx in txs:
        rcpt = json.loads(subprocess.run(
            ["curl", "-s", "-H", "content-type: application/json", "-d",
             json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_getTransactionReceipt", "params": [tx]}), rpc],
            capture_output=True, text=True, check=True).stdout)["result"]
        gas.append(int(rcpt["gasUsed"], 16))
    requests_claimed = sum(c["requests"] for c in listed["channels"])
    return {
        "machine": machine(),
        "runs": runs,
        "paced": paced,
        "cluster": None if a.no_cluster else cluster(a, work, procs, rpc, up),
        "claim": {
            "channels": claimed["claimedChannels"],
            "transactions": len(txs),
            "gas": sum(gas),
            "requests": requests_claimed,
            "seconds": claim_seconds,
        },
    }


class Postgres:
    """A throwaway PostgreSQL cluster (stopped with the bench's other processes)."""

    def __init__(self, work):
        self.dir = os.path.join(work, "pg")
        self.url = dev_cluster.start_postgres(self.dir)

    def stats(self):
        """Transactions committed and rows of `channels` updated so far."""
        out = dev_cluster.pg(
            "psql", "-h", self.dir, "-U", "paygate", "-d", "paygate", "-Atc",
            "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), "
            "(SELECT coalesce(sum(n_tup_upd + n_tup_ins), 0) FROM pg_stat_user_tables WHERE relname = 'channels')",
        ).stdout.strip()
        commits, channel_rows = out.split("|")
        return int(commits), int(channel_rows)

    def stop(self):
        dev_cluster.stop_postgres(self.dir)


def voucher_load(a, url, requests, conns, wait_go=False):
    """paid_load paying by voucher, unpinned (the nodes, the database and the loads share the
    machine's cores), started now and waited for by the caller. `wait_go`: it prepares its
    payments, prints `ready` and starts its clock on a line on its standard input."""
    return subprocess.Popen(
        [a.paid_load, "--url", url, "--requests", str(requests), "--concurrency", str(conns),
         "--scheme", "batch-settlement"] + (["--wait-go"] if wait_go else []),
        env=dict(os.environ, PAID_LOAD_PAYER_KEY=PAYER[1]),
        stdin=subprocess.PIPE if wait_go else None,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def cluster(a, work, procs, rpc, up):
    pg = Postgres(work)
    procs.append(pg)
    nodes = []
    for i in range(3):
        env = settling(rpc, relayer=RELAYERS[1 + i])
        env.update({"PAYGATE_MASTER_KEY": MASTER_KEY, "PAYGATE__STORAGE__BACKEND": "postgres",
                    "PAYGATE_DATABASE_URL": pg.url})
        node = Paygate(a.bench_paygate, work, f"node{i}", env, core=None)
        procs.append(node)
        nodes.append(node)
    key = nodes[0].org("chan")
    s, body, _ = call(nodes[0].base, "POST", "/api/routes", key, {
        "path": "/r", "priceUSD": "0.001", "targetUrl": up + "/", "network": "base-sepolia",
        "schemes": ["exact", "batch-settlement"]})
    assert s == 201, body
    urls = [n.base + "/gateway/chan/r" for n in nodes]
    for url in urls:  # the route reaches every node (LISTEN/NOTIFY), then channels open
        deadline = time.time() + 10
        while call(url.rsplit("/gateway", 1)[0], "GET", "/gateway/chan/r", None)[0] != 402:
            assert time.time() < deadline, f"the route never reached {url}"
            time.sleep(0.1)
    conns = max(1, a.conns // 3)
    for p in [voucher_load(a, url, conns * 4, conns) for url in urls]:
        out, err = p.communicate()
        assert p.returncode == 0, err
    per_node = a.requests // 3 // conns * conns  # paid_load sends a multiple of its connections
    runs = []
    for rep in range(a.reps):
        # Every load opens its channels and signs its vouchers first; then all start at once,
        # and the rate is what they served from the first start to the last end (their
        # preparation, deposits waiting for blocks included, is not what is measured).
        loads = [voucher_load(a, url, per_node, conns, wait_go=True) for url in urls]
        for p in loads:
            ready = p.stdout.readline()
            assert ready.strip() == "ready", (ready, p.stderr.read() if p.poll() is not None else "")
        time.sleep(1.5)  # PostgreSQL publishes its counters about once a second
        before = pg.stats()
        cpu0 = ([cpu_seconds(n.proc) for n in nodes], postgres_cpu())
        for p in loads:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in loads:
            out, err = p.communicate()
            assert p.returncode == 0, err
            res = json.loads(out)
            assert res["ok"] == res["receipts"] == per_node, res
            results.append(res)
        seconds = max(r["ended_unix"] for r in results) - min(r["started_unix"] for r in results)
        cpu1 = ([cpu_seconds(n.proc) for n in nodes], postgres_cpu())
        time.sleep(1.5)  # PostgreSQL publishes its counters about once a second
        after = pg.stats()
        n = per_node * len(urls)
        run = {
            "rps": n / seconds,
            "node_cpu_us": 1e6 * (sum(cpu1[0]) - sum(cpu0[0])) / n,
            "pg_cpu_us": 1e6 * (cpu1[1] - cpu0[1]) / n,
            "p99_ms": max(r["p99_ms"] for r in results),
            "commits_per_voucher": (after[0] - before[0]) / n,
            "channel_writes_per_voucher": (after[1] - before[1]) / n,
        }
        runs.append(run)
        print(f"cluster rep {rep + 1}: {run['rps']:,.1f} req/s over 3 nodes, p99 {run['p99_ms']:.2f} ms, "
              f"{run['commits_per_voucher']:.2f} commits and {run['channel_writes_per_voucher']:.2f} channel "
              f"row writes per voucher, CPU per voucher: nodes {run['node_cpu_us']:.0f} us, PostgreSQL "
              f"{run['pg_cpu_us']:.0f} us", flush=True)
    return {"runs": runs, "conns_per_node": conns}


def med(runs, key):
    return spread([r[key] for r in runs])


def cluster_lines(r, rps):
    cl = r["cluster"]
    if not cl:
        return []
    runs = cl["runs"]
    total = med(runs, "rps")
    r = dict(r, cpu_voucher=med(r["runs"]["voucher"], "cpu_us_per_request")[1])
    return [
        f"- Three nodes on one PostgreSQL (this machine's two cores shared by the nodes, the database and the "
        f"loads; {cl['conns_per_node']} connections per node, each its own channel on its node; the loads open "
        "their channels and sign their vouchers first, then start together, and the rate is their requests over "
        "the first start to the last end; until this session their preparation was inside the window, which "
        "reported 0.54x): "
        f"**{' / '.join(f'{x:,.1f}' for x in total)} req/s** together, **{total[1] / rps['voucher'][1]:.2f}x** "
        "the single sled node's median (target: at least 0.6x); per voucher, PostgreSQL committed "
        f"{med(runs, 'commits_per_voucher')[1]:.2f} transactions and wrote {med(runs, 'channel_writes_per_voucher')[1]:.2f} "
        "rows of `channels` (target: at most one database write per voucher in this common case; the other "
        "commits are the nodes' background work: metrics, leases, route notifications). A voucher reads nothing "
        "from the database while its node holds the channel's lease: its compare-and-set UPDATE, sent in "
        "one statement with the node's other vouchers waiting then (so the commits per voucher are "
        "fewer than one). "
        f"CPU per voucher: the nodes {med(runs, 'node_cpu_us')[1]:.0f} us together, PostgreSQL "
        f"{med(runs, 'pg_cpu_us')[1]:.0f} us (its commits, the UPDATEs of the rows and their WAL), against "
        f"{r['cpu_voucher']:.0f} us on the sled node (the load generators take the rest of the two cores).",
    ]


def write_report(a, r):
    runs = r["runs"]
    f = lambda t, d=0: " / ".join(f"{x:,.{d}f}" for x in t)  # noqa: E731
    rps = {m: med(runs[m], "rps") for m in runs}
    cpu = {m: med(runs[m], "cpu_us_per_request") for m in runs}
    p99 = {m: med(runs[m], "p99_ms") for m in runs}
    ratio = lambda x, y: [x / y for x, y in zip(sorted(x), sorted(y))]  # noqa: E731
    c = r["claim"]
    m = r["machine"]
    lines = [
        BEGIN,
        "## Payment channels (`batch-settlement`, issue 29)",
        "",
        f"Command: `make bench-channels` (benches/channels.py: {a.reps} alternated repetitions, "
        f"{a.requests} requests for free and voucher runs, {a.exact_requests} for exact, {a.conns} connections; "
        "paygate bench build, one worker thread, sled, on CPU 0 with the nginx upstream; `paid_load` on CPU 1; "
        f"anvil mining every second). Machine: {m['cpu']}, {m['cores']} cores, kernel {m['kernel']}, commit "
        f"{m['commit']}. Figures min / median / max.",
        "",
        "| mode | requests/s | gateway CPU per request (us) | p50 (ms) | p99 (ms) |",
        "|---|---|---|---|---|",
    ]
    for m, label in (("free", "free (no payment)"), ("voucher", "voucher (a channel per connection)"),
                     ("exact", "exact (settled on chain)"),
                     ("mpp", "MPP charge (settled on chain)"),
                     ("escrow", "escrow (`auth-capture`: held, then captured)")):
        lines.append(f"| {label} | {f(rps[m], 1)} | {f(cpu[m])} | {f(med(runs[m], 'p50_ms'), 2)} | {f(p99[m], 2)} |")
    paced_p50 = {m: med(r["paced"][m], "p50_ms") for m in r["paced"]}
    paced_p99 = {m: med(r["paced"][m], "p99_ms") for m in r["paced"]}
    paced_cpu = {m: med(r["paced"][m], "cpu_us_per_request") for m in r["paced"]}
    v_over_e = rps["voucher"][1] / rps["exact"][1]
    v_over_f = rps["voucher"][1] / rps["free"][1]
    mpp_time = [x / y for x, y in zip(sorted(med(runs["mpp"], "mean_ms")), sorted(med(runs["exact"], "mean_ms")))]
    escrow_time = [x / y for x, y in zip(sorted(med(runs["escrow"], "mean_ms")), sorted(med(runs["exact"], "mean_ms")))]
    cpu_added = cpu["voucher"][1] - cpu["free"][1]
    lines += [
        "",
        f"- Voucher-paid against exact-paid requests per second: **{v_over_e:,.0f}x** (target: at least 100x).",
        f"- MPP's charge against x402 `exact` (issue 53's goal: within 1.1x): mean latency of a paid request "
        f"**{f(mpp_time, 2)}x**, requests/s {f(ratio(rps['mpp'], rps['exact']), 2)}x, gateway CPU per request "
        f"{f(ratio(cpu['mpp'], cpu['exact']), 2)}x (each credential's challenge is asked before the clock starts, but the gateway's CPU is read around the whole run, so MPP's figure also pays a `402` or more per credential: the charge itself costs what `exact` does).",
        f"- Escrow (`auth-capture`) against `exact` (issue 54's goal: within 1.1x): mean latency of a paid request "
        f"**{f(escrow_time, 2)}x**, requests/s **{f(ratio(rps['escrow'], rps['exact']), 2)}x**, gateway CPU per "
        f"request {f(ratio(cpu['escrow'], cpu['exact']), 2)}x (the escrow's `402` is rendered afresh for its "
        "deadlines; one was asked before the clock).",
        f"- Voucher-paid against free requests per second: **{v_over_f:.2f}x** (a voucher costs one secp256k1 "
        "recovery, about as much as the free path's whole request: bounded near 0.5 on one core).",
        f"- Gateway CPU a voucher adds to a free request: **{cpu_added:.0f} us** at saturation (median against "
        "median; target: one signature recovery, `benches/verify.rs`, plus 15 us); "
        f"**{paced_cpu['voucher'][1] - paced_cpu['free'][1]:.0f} us** at {a.paced_rate:,.0f} requests per second "
        f"paced (free {paced_cpu['free'][1]:.0f}, voucher {paced_cpu['voucher'][1]:.0f} us a request, medians: at "
        "this rate the event loop wakes for fewer requests at a time, so every request costs more); "
        f"voucher / free at saturation **{cpu['voucher'][1] / cpu['free'][1]:.2f}x**.",
        f"- Added p99 latency of a voucher over a free request at {a.conns} connections, paced at "
        f"{a.paced_rate:,.0f} requests per second ({a.paced_reps} alternated repetitions of {a.paced_requests} "
        "requests, latency counted from each "
        f"request's due time): **{paced_p99['voucher'][1] - paced_p99['free'][1]:.2f} ms** (target: at most 1 ms; "
        f"free p50 / p99 {paced_p50['free'][1]:.2f} / {paced_p99['free'][1]:.2f} ms, voucher "
        f"{paced_p50['voucher'][1]:.2f} / {paced_p99['voucher'][1]:.2f} ms, medians; the client's timer wakes to the "
        "millisecond, which both paths' figures include). At saturation (the table) "
        f"the p99s differ by {p99['voucher'][1] - p99['free'][1]:.2f} ms: a closed loop's latency there is its "
        "connections over its rate, so that difference restates the rates.",
    ] + cluster_lines(r, rps) + [
        f"- Claim: {c['channels']} channels ({c['requests']:,} requests) claimed and settled in "
        f"{c['transactions']} transaction(s), {c['gas']:,} gas: {c['gas'] / max(1, c['requests']):.1f} gas per "
        f"served request, {c['gas'] / max(1, c['channels']):,.0f} per channel.",
        "- Store writes: one compare-and-swap per voucher of the channel's charges entry alone (what a served "
        "request moves: charged, the voucher, requests, the lease; about 300 bytes), not a transaction over the "
        "whole record and its unclaimed index (deposits, claims, refunds and lease take-overs still write those). A "
        "channel's requests on one node read nothing from the store while its lease holds. Before the answer the "
        "entry is appended to sled's voucher journal with one `write` (in the kernel's page cache: a killed "
        "process loses nothing; the journal is synced to disk every `storage.voucher_sync_ms`, 100 ms, so a power "
        "loss loses at most that long's charges; `voucher_sync_ms = 0` makes each answer wait for a flush of "
        "sled's log instead, concurrent vouchers sharing flushes).",
        "- The store's share, measured alone (`cargo run --release -p paygate-store --example channel_writes "
        "[writes] [writers] [flush]`, one thread, sled in a temp dir): 5.5-5.8 us of CPU per voucher write with "
        "the journal, alike for 1 and 32 writers; with a flush per answer (`flush`) 8.8 us a write when 32 writers "
        "share flushes and 100 us for one writer alone (each sled flush wakes all seven of sled 0.34's idle IO "
        "threads, then the kernel's `fsync` costs 65-80 us of CPU on this VM by itself). The journal, measured "
        "A/B in its session (two gateway builds side by side on one chain, 3 alternated repetitions): added CPU "
        "over a free request 98 to 92 us at saturation (6,500 to 7,035 req/s), 174 to 117 us at 2,000 req/s "
        "paced, and the paced p99 added 1.23 to 0.28 ms. Before the charges-only write (BENCHMARKS of commit "
        "10d7743) a voucher cost 307 us of gateway CPU and the rate was 3,118 req/s.",
        "- On PostgreSQL a node's concurrent voucher writes share statements (one `UPDATE ... FROM UNNEST` over the waiting writers' rows, each conditional on its own version). Measured alone (`PAYGATE_DATABASE_URL=... cargo run --release -p paygate-store --example channel_writes`, one thread): 32 writers cost the node 6 us and PostgreSQL 16-23 us of CPU per voucher, against 40 and 110 us with a statement and commit each; 10 writers 12 and 38 against 36 and 90. In the three-node run above this took PostgreSQL from 173 to 69 us a voucher and the nodes from 250 to 188 us, and the commits per voucher from 0.96 to 0.19 (before: BENCHMARKS of commit 9ca38ae, 3,156 req/s, 0.49x). The cluster's rate varies most between repetitions here: three nodes, PostgreSQL and three load generators share two cores.",
        "- Where a voucher's gateway CPU goes (perf on the bench build at saturation, 32 connections, the free "
        "path profiled alike and subtracted, us a request with perf's own overhead in them): the secp256k1 "
        "recovery 46; the kernel 14 (the journal's `write` 4.4, the larger answer's `send` 3.5, the rest spread); "
        "malloc and memcpy 10 (the larger request and answer, the payload and receipt strings); sled's "
        "compare-and-set 4; JSON 3 (payload, charges entry, receipt); tokio 2.5; the EIP-712 hashing 1.5; base64 "
        "1. Taken out in earlier sessions, each measured A/B: a channel's configuration parsed once per node and "
        "two copies of the channel's record per charge (105.8 to 97.8 us added); overlapping flushes of sled's "
        "group commit (98.5 to 89.0 us). The 15 us target is not met at saturation: beyond the recovery, what "
        "remains is the protocol's own weight (a 1 KB payment header read, decoded and hashed, a receipt header "
        "written, the charge written and journaled), none of it above 5 us on its own. "
        "The exact path here waits for anvil's one-second blocks (Base mines every two "
        "seconds, which would halve the exact rate and double the first ratio).",
        END,
    ]
    write_section(a.out, "\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-paygate", required=True, help="the paygate-bench binary (the free pass on)")
    ap.add_argument("--paygate", required=True, help="for devchain setup")
    ap.add_argument("--paid-load", required=True)
    ap.add_argument("--anvil", required=True)
    ap.add_argument("--artifacts", required=True)
    ap.add_argument("--contracts", required=True, help="the compiled batch-settlement contracts")
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--exact-requests", type=int, default=400)
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--block-time", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keep-work", action="store_true")
    ap.add_argument("--no-cluster", action="store_true", help="skip the three PostgreSQL nodes")
    ap.add_argument("--paced-rate", type=float, default=2000.0, help="requests per second of the latency runs")
    ap.add_argument("--paced-requests", type=int, default=10000)
    ap.add_argument("--paced-reps", type=int, default=5,
                    help="alternated repetitions of the paced runs (their p99 moves most between runs)")
    ap.add_argument("--out", default=os.path.join(ROOT, "BENCHMARKS.md"))
    a = ap.parse_args()
    write_report(a, in_work_dir("paygate-channels-", lambda work, procs: run(a, work, procs), a.keep_work))


if __name__ == "__main__":
    main()
