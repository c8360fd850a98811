#!/usr/bin/env python3
"""The hot-path sweep of `make bench` (issue 21): paygate next to the bare Pingora floor and
nginx, on the 402, 404 and proxy paths, at several connection counts, in three layouts:

- `1 core pinned`: every server (and the upstream) on CPU 0, the load generator on CPU 1;
- `1 core unpinned`: the same one-thread servers, nothing pinned (the kernel places them);
- `2 cores`: paygate with two proxy threads, the floor with two, nginx with two workers, the
  x402-axum peer with two tokio workers, nothing pinned (the load generator shares the cores).

Each (layout, connections) cell runs every target once per repetition, the targets in turn, so
the ratios are taken per repetition between runs seconds apart. Writes the "Hot-path sweep"
section of BENCHMARKS.md (between its markers) and target/bench-sweep.json.
"""

import argparse
import json
import os
import statistics
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import (  # noqa: E402
    FLOOR_POOL,
    PAYER,
    RECEIVER,
    ROOT,
    Command,
    Nginx,
    Paygate,
    added_header_bytes,
    free_port,
    in_work_dir,
    settling,
    start_chain,
    wait_http,
    wrk,
    write_section,
)

BEGIN, END = "<!-- sweep:begin -->", "<!-- sweep:end -->"
FREE = ["x-paygate-bench-free: 1"]
# (path, contender): the gateways' rows; each path's floor and nginx are its baselines.
PATHS = ("402", "404", "proxy")


def spread(xs):
    return min(xs), statistics.median(xs), max(xs)


def set_affinity(pid, cpus):
    """Pins every thread of `pid` and of its child processes (nginx's workers) to `cpus`."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return
    for tid in tids:
        try:
            os.sched_setaffinity(int(tid), cpus)
            children = open(f"/proc/{pid}/task/{tid}/children").read().split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        for child in children:
            set_affinity(int(child), cpus)


def challenge_of(url):
    """Body and headers of the 402 (or 404) paygate answers at `url`."""
    try:
        urllib.request.urlopen(url)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers
    sys.exit(f"{url}: expected an error status")


def servers(a, work, procs, rpc, up, up_port, threads):
    """The servers one layout measures; {target: (url, headers, process)}."""
    tag = f"{threads}t"
    gw = Paygate(a.paygate, work, f"paygate-{tag}", settling(rpc), threads=threads, core=None)
    procs.append(gw)
    key = gw.org("bench")
    gw.route(key, "/r", up + "/")
    bgw = Paygate(a.bench_paygate, work, f"paygate-bench-{tag}", settling(rpc), threads=threads, core=None)
    procs.append(bgw)
    bgw.route(bgw.org("bench"), "/r", up + "/")
    status, body402, h = challenge_of(gw.base + "/gateway/bench/r")
    assert status == 402
    xreq, preq = h["X-Payment-Requirements"], h["PAYMENT-REQUIRED"]
    _, body404, h404 = challenge_of(gw.base + "/gateway/bench/nope")
    assert "'" not in body402 + xreq + preq + body404
    n_port = free_port()
    nginx = Nginx(
        work,
        f"nginx-{tag}",
        f"""upstream up {{ server 127.0.0.1:{up_port}; keepalive {FLOOR_POOL}; }}
            server {{ listen 127.0.0.1:{n_port};
            location = /gateway/bench/r {{ default_type application/json;
              add_header X-Payment-Requirements '{xreq}' always;
              add_header PAYMENT-REQUIRED '{preq}' always;
              return 402 '{body402}'; }}
            location = /gateway/bench/nope {{ default_type application/json;
              return 404 '{body404}'; }}
            location / {{ proxy_pass http://up; proxy_http_version 1.1;
                          proxy_set_header Connection ""; }} }}""",
        workers=threads,
        core=None,
    )
    procs.append(nginx)
    # The floor answers as many bytes as paygate: its body padded by every header paygate sends
    # beyond the floor's own (content-type, content-length, date, connection).
    floors = {}
    for mode, body, extra in (("402", body402, added_header_bytes(h)), ("404", body404, added_header_bytes(h404))):
        path = os.path.join(work, f"floor{mode}-{tag}.json")
        with open(path, "w") as f:
            f.write(body + " " * extra)
        port = free_port()
        floors[mode] = (port, Command(work, f"minimal-{mode}-{tag}", [a.minimal, f"127.0.0.1:{port}", "402", path, str(threads), FLOOR_POOL], core=None))
    port = free_port()
    floors["proxy"] = (port, Command(work, f"minimal-proxy-{tag}", [a.minimal, f"127.0.0.1:{port}", "proxy", f"127.0.0.1:{up_port}", str(threads), FLOOR_POOL], core=None))
    procs.extend(p for _, p in floors.values())
    peer_port = free_port()
    peer = Command(
        work,
        f"x402-axum-peer-{tag}",
        [a.peer, f"127.0.0.1:{peer_port}", up + "/", gw.base + "/facilitator/", RECEIVER, "10000"],
        env={"PEER_FACILITATOR_KEY": key, "TOKIO_WORKER_THREADS": str(threads)},
        core=None,
    )
    procs.append(peer)
    n = f"http://127.0.0.1:{n_port}"
    targets = {
        "nginx_402": (n + "/gateway/bench/r", [], nginx.proc),
        "pingora_402": (f"http://127.0.0.1:{floors['402'][0]}/", [], floors["402"][1].proc),
        "paygate_402": (gw.base + "/gateway/bench/r", [], gw.proc),
        "x402_axum_402": (f"http://127.0.0.1:{peer_port}/paid", [], peer.proc),
        "nginx_404": (n + "/gateway/bench/nope", [], nginx.proc),
        "pingora_404": (f"http://127.0.0.1:{floors['404'][0]}/", [], floors["404"][1].proc),
        "paygate_404": (gw.base + "/gateway/bench/nope", [], gw.proc),
        "nginx_proxy": (n + "/", [], nginx.proc),
        "pingora_proxy": (f"http://127.0.0.1:{floors['proxy'][0]}/", [], floors["proxy"][1].proc),
        "paygate_proxy": (bgw.base + "/gateway/bench/r", FREE, bgw.proc),
    }
    for url, _, _ in targets.values():
        wait_http(url)
    return targets


def measure(a, targets, others, layouts):
    """{layout: {conns: {target: [wrk result per repetition]}}}; `others` (the upstream) are
    placed with the servers."""
    out = {}
    for layout, (server_cpus, load_core) in layouts.items():
        for proc in [p for _, _, p in targets.values()] + others:
            set_affinity(proc.pid, server_cpus)
        out[layout] = {}
        for conns in a.conns:
            for url, h, _ in targets.values():
                wrk(url, conns, 1, h, core=load_core)  # warm-up: connections, pools
            cell = {name: [] for name in targets}
            for rep in range(a.reps):
                for name, (url, h, _) in targets.items():
                    res = wrk(url, conns, a.duration, h, core=load_core)
                    if res["errors"] and conns <= 256:
                        print(f"  {name} at {conns}: socket errors {res['errors']}", flush=True)
                    cell[name].append(res)
                print(
                    f"{layout:16s} c={conns:<5d} rep {rep + 1}: "
                    + "  ".join(f"{k} {v[-1]['rps']:,.0f}" for k, v in cell.items()),
                    flush=True,
                )
            out[layout][conns] = cell
    return out


def run(a, work, procs):
    up_port = free_port()
    upstream = Nginx(
        work, "upstream", f"server {{ listen 127.0.0.1:{up_port}; location / {{ return 200 \"ok\"; }} }}", core=None
    )
    procs.append(upstream)
    up = f"http://127.0.0.1:{up_port}"
    wait_http(up + "/")
    rpc = start_chain(a, work, procs, [PAYER[0]])
    kept = len(procs)
    results = {}
    one = servers(a, work, procs, rpc, up, up_port, 1)
    layouts = {"1 core pinned": ({0}, 1), "1 core unpinned": ({0, 1}, None)}
    results.update(measure(a, one, [upstream.proc], layouts))
    # The one-thread servers stop before the two-thread ones start (idle, they still wake).
    for p in procs[kept:]:
        p.stop()
    del procs[kept:]
    two = servers(a, work, procs, rpc, up, up_port, 2)
    results.update(measure(a, two, [upstream.proc], {"2 cores": ({0, 1}, None)}))
    return results


def ratios(cell, num, den):
    return [n["rps"] / d["rps"] for n, d in zip(cell[num], cell[den])]


def targets(r):
    """Issue 21's targets against the sweep: per layout, the median ratio at each connection count."""
    def med(cell, num, den):
        return statistics.median(ratios(cell, num, den))

    checks = [
        (f"paygate >= 0.95x floor, {p}", f"paygate_{p}", f"pingora_{p}", 0.95, None) for p in PATHS
    ] + [
        ("402 >= 0.9x nginx at 32 connections", "paygate_402", "nginx_402", 0.9, 32),
        ("402 >= 0.8x nginx at 1024 connections", "paygate_402", "nginx_402", 0.8, 1024),
        ("proxy >= 0.9x nginx `proxy_pass`", "paygate_proxy", "nginx_proxy", 0.9, None),
    ]
    out = ["| target | layout | measured | met |", "|---|---|---|---|"]
    for label, num, den, floor, only in checks:
        for layout, cells in r.items():
            got = {c: med(cell, num, den) for c, cell in cells.items() if only in (None, int(c))}
            if not got:
                continue
            text = ", ".join(f"{c}: {x:.2f}" for c, x in got.items())
            met = "yes" if min(got.values()) >= floor else f"no (short by {floor - min(got.values()):.2f})"
            out.append(f"| {label} | {layout} | {text} | {met} |")
    return out


def write(a, r):
    if not getattr(a, "commit", None):
        a.commit = os.popen(f"git -C {ROOT} rev-parse --short HEAD").read().strip()
        a.at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        BEGIN,
        "## Hot-path sweep (issue 21)",
        "",
        f"Command: `make bench-sweep` (`python3 benches/sweep.py --reps {a.reps} --duration {a.duration}"
        f" --conns {','.join(map(str, a.conns))}`), commit `{a.commit}`, {a.at}.",
        f"Load: `wrk -t1 -c<conns> -d{a.duration}s --latency`; in each cell every target runs once per",
        "repetition, in turn, and ratios are taken per repetition, then summarised as min / median / max.",
        "Targets: `nginx` answers paygate's exact 402 and 404 (body and headers copied) and proxies with",
        "`proxy_pass` (keepalive 1024, as paygate's and the floor's upstream pool); `pingora` is `minimal_pingora`, a bare Pingora service answering a",
        "fixed body padded to paygate's answer's size (every header paygate adds counted as body) or",
        "proxying to the same upstream; `paygate_proxy` is the bench build with the payment step taken",
        "out (`x-paygate-bench-free`); `x402_axum_402` is the x402-axum 2.0.2 middleware's unpaid answer.",
        "Layouts: `1 core pinned`: every server and the upstream on CPU 0, wrk on CPU 1; `1 core",
        "unpinned`: the same one-thread servers, nothing pinned; `2 cores`: two proxy threads (paygate,",
        "floor), two nginx workers, two tokio workers (peer), nothing pinned, wrk sharing the cores.",
        "",
        "### Requests per second (min / median / max)",
        "",
    ]
    names = list(next(iter(next(iter(r.values())).values())).keys())
    lines.append("| layout | conns | " + " | ".join(f"`{n}`" for n in names) + " |")
    lines.append("|---|---|" + "---|" * len(names))
    for layout, cells in r.items():
        for conns, cell in cells.items():
            row = [" / ".join(f"{x / 1000:.1f}k" for x in spread([x["rps"] for x in cell[n]])) for n in names]
            lines.append(f"| {layout} | {conns} | " + " | ".join(row) + " |")
    lines += [
        "",
        "### Ratios (median, with every repetition's ratio)",
        "",
        "Targets (issue 21): paygate >= 0.95x of the Pingora floor on every path at every connection",
        "count; the 402 path >= 0.9x nginx at 32 connections and >= 0.8x at 1024; the proxy path within",
        "0.9x of nginx `proxy_pass`.",
        "",
        "| layout | conns | path | paygate / floor | floor / nginx | paygate / nginx | p99 ms paygate / floor / nginx |",
        "|---|---|---|---|---|---|---|",
    ]
    for layout, cells in r.items():
        for conns, cell in cells.items():
            for path in PATHS:
                g, f, n = f"paygate_{path}", f"pingora_{path}", f"nginx_{path}"
                row = []
                for num, den in ((g, f), (f, n), (g, n)):
                    xs = ratios(cell, num, den)
                    row.append(f"**{statistics.median(xs):.2f}** ({', '.join(f'{x:.2f}' for x in xs)})")
                p99 = " / ".join(f"{statistics.median(x['p99'] for x in cell[t]):.2f}" for t in (g, f, n))
                lines.append(f"| {layout} | {conns} | {path} | " + " | ".join(row) + f" | {p99} |")
            ax = ratios(cell, "x402_axum_402", "nginx_402")
            lines.append(
                f"| {layout} | {conns} | 402, x402-axum | | | **{statistics.median(ax):.2f}** ({', '.join(f'{x:.2f}' for x in ax)}) | "
                f"{statistics.median(x['p99'] for x in cell['x402_axum_402']):.2f} |"
            )
    lines += ["", "### Targets (medians of the per-repetition ratios, by connections)", ""]
    lines += targets(r)
    lines += ["", END]
    section = "\n".join(lines)
    write_section(a.out, section)
    with open(os.path.join(ROOT, "target", "bench-sweep.json"), "w") as f:
        json.dump({"args": vars(a), "results": {k: {str(c): v for c, v in cells.items()} for k, cells in r.items()}}, f)
    print(section)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--paygate", required=True)
    ap.add_argument("--bench-paygate", required=True, help="the paygate-bench binary (the free pass on)")
    ap.add_argument("--minimal", required=True, help="the minimal_pingora example (the Pingora floor)")
    ap.add_argument("--peer", required=True, help="the x402-axum peer binary")
    ap.add_argument("--anvil", required=True)
    ap.add_argument("--artifacts", required=True)
    ap.add_argument("--block-time", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--duration", type=int, default=2)
    ap.add_argument("--conns", type=lambda s: [int(x) for x in s.split(",")], default=[1, 32, 256, 1024])
    ap.add_argument("--out", default=os.path.join(ROOT, "BENCHMARKS.md"))
    ap.add_argument("--rewrite", metavar="JSON", help="write the section again from a saved target/bench-sweep.json")
    a = ap.parse_args()
    if a.rewrite:
        saved = json.load(open(a.rewrite))
        for k in ("reps", "duration", "conns", "commit", "at"):
            setattr(a, k, saved["args"].get(k))
        write(a, saved["results"])
        return
    write(a, in_work_dir("paygate-sweep-", lambda work, procs: run(a, work, procs)))


if __name__ == "__main__":
    main()
