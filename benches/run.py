#!/usr/bin/env python3
"""`make bench`: paygate next to nginx on this machine, measured side by side, written to
BENCHMARKS.md. Every figure is also a ratio against a baseline measured in the same run.

Servers (nginx, paygate, the trivial upstream) are pinned to CPU 0 and the load generator (wrk)
to CPU 1, so they do not compete for a core. Each comparison is repeated --reps times,
interleaved, and reported as min / median / max.
"""

import argparse
import base64
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# paygate's `server.upstream_keepalive_pool_size` default, given to the floor too: the floor is a
# bare Pingora service with paygate's server settings.
FLOOR_POOL = "1024"
ADMIN = "bench-admin-token"
RECEIVER = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"


def added_header_bytes(headers):
    """Bytes of the headers paygate sends beyond the floor's own (content-type, content-length,
    date, connection): the floor pads its body by this much, so both answer as many bytes."""
    own = ("content-type", "content-length", "date", "connection")
    return sum(len(k) + len(v) + 4 for k, v in headers.items() if k.lower() not in own)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def pin(core):
    """taskset's prefix pinning a command to `core` (None: no pinning)."""
    if core is None or not shutil.which("taskset"):
        return []
    return ["taskset", "-c", str(core)]


def wait_http(url, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return
        except Exception:
            time.sleep(0.05)
    sys.exit(f"{url} did not come up")


def wait_healthy(url, timeout=60):
    """Until `url` answers 200 (a node waiting for its database answers 503)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(url, timeout=1).status == 200:
                return
        except Exception:
            pass
        time.sleep(0.05)
    sys.exit(f"{url} did not become healthy")


def call(base, method, path, token, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("content-type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null"), r.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null"), e.headers


class Nginx:
    def __init__(self, work, name, server_block, workers=1, core=0):
        self.dir = os.path.join(work, name)
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        conf = f"""
worker_processes {workers};
daemon off;
pid {self.dir}/nginx.pid;
error_log {self.dir}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path {self.dir}/body;
  proxy_temp_path {self.dir}/proxy;
  fastcgi_temp_path {self.dir}/fastcgi;
  uwsgi_temp_path {self.dir}/uwsgi;
  scgi_temp_path {self.dir}/scgi;
  {server_block}
}}
"""
        path = os.path.join(self.dir, "nginx.conf")
        open(path, "w").write(conf)
        self.proc = subprocess.Popen(
            pin(core) + ["nginx", "-c", path, "-p", self.dir],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.dir, "stderr.log"), "w"),
        )

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


class Command:
    """A plain server process pinned to the servers' core."""

    def __init__(self, work, name, argv, env=None, core=0):
        log = open(os.path.join(work, f"{name}.log"), "w")
        self.proc = subprocess.Popen(
            pin(core) + argv,
            stdout=log,
            stderr=log,
            env=dict(os.environ, **(env or {})),
        )

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            # A leftover would take CPU from every later measurement.
            self.proc.kill()
            self.proc.wait()


class Paygate:
    def __init__(self, binary, work, name, extra_env=None, threads=1, core=0):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir, exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "PAYGATE__SERVER__LISTEN": f"127.0.0.1:{self.port}",
            "PAYGATE__SERVER__THREADS": str(threads),
            # One load generator is one client address: the limits would be what is measured.
            "PAYGATE__LIMITS__CLIENT__PER_SECOND": "0",
            "PAYGATE__SERVER__GRACE_PERIOD_SECONDS": "0",
            "PAYGATE__LIMITS__PAYER__PER_SECOND": "0",
            "PAYGATE__STORAGE__PATH": os.path.join(self.dir, "data"),
            "PAYGATE_ADMIN_TOKEN": ADMIN,
            "PAYGATE_LOG": "warn",
            "PAYGATE__UPSTREAM__ALLOW_PRIVATE_NETWORKS": '["127.0.0.0/8"]',
            "PAYGATE__NETWORKS__BASE__RPC_URL": "",
        }
        env.update(extra_env or {})
        self.proc = subprocess.Popen(
            pin(core) + [binary, "serve"],
            env=env,
            stdout=open(os.path.join(self.dir, "log"), "w"),
            stderr=subprocess.STDOUT,
        )
        wait_healthy(self.base + "/healthz")

    def org(self, slug):
        s, body, _ = call(self.base, "POST", "/admin/orgs", ADMIN, {"slug": slug, "receiverWallet": RECEIVER})
        assert s == 201, body
        return body["apiKey"]

    def route(self, key, path, target, streaming=False, price=0.01):
        s, body, _ = call(
            self.base,
            "POST",
            "/api/routes",
            key,
            {"path": path, "priceUSD": price, "targetUrl": target, "network": "base-sepolia", "streaming": streaming},
        )
        assert s == 201, body
        return body

    def rss_kb(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def wrk(url, conns, duration, headers=(), core=1):
    cmd = pin(core) + ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency"]
    for h in headers:
        cmd += ["-H", h]
    out = subprocess.run(cmd + [url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))

    def pct(p):
        m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        return float(m.group(1)) * UNITS[m.group(2)]

    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {
        "rps": rps,
        "p50": pct(50),
        "p99": pct(99),
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
        "errors": errors.group(1) if errors else "",
        "cmd": " ".join(cmd[len(pin(core)) :] + [url]),
    }


def spread(xs):
    return (min(xs), statistics.median(xs), max(xs))


def fmt3(t, digits=0):
    f = f"{{:,.{digits}f}}"
    return " / ".join(f.format(x) for x in t)


def ttfb_ms(host, port, path, headers, n):
    """Time from sending a request to the first byte of the response body, n sequential times."""
    out = []
    req = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n" + "".join(f"{h}\r\n" for h in headers) + "Connection: close\r\n\r\n"
    for _ in range(n):
        s = socket.create_connection((host, port))
        t0 = time.perf_counter()
        s.sendall(req.encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(65536)
        head, _, rest = buf.partition(b"\r\n\r\n")
        if not rest:
            rest = s.recv(65536)
        t1 = time.perf_counter()
        s.close()
        out.append((t1 - t0) * 1000)
    return statistics.median(out)


def criterion_ns(name):
    # criterion names its directories after the benchmark id with '/' replaced by '_'.
    path = os.path.join(ROOT, "target", "criterion", name.replace("/", "_"), "new", "estimates.json")
    return json.load(open(path))["median"]["point_estimate"]


def machine():
    cpu = "unknown"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = open("/proc/meminfo").readline().split()[1]
    nginx = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
    wrk_v = subprocess.run(["wrk", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "mem_gib": round(int(mem) / 1024 / 1024, 1),
        "kernel": platform.release(),
        "nginx": nginx,
        "wrk": wrk_v,
        "commit": commit,
    }


def write_section(path, section):
    """Puts `section` (which starts with its begin marker and ends with its end marker) in place
    of the same markers' section of the file at `path`, or appends it."""
    begin, end = section.split("\n", 1)[0], section.rstrip("\n").rsplit("\n", 1)[-1]
    text = open(path).read() if os.path.exists(path) else ""
    if begin in text and end in text:
        text = text[: text.index(begin)] + section + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    open(path, "w").write(text)


def in_work_dir(prefix, body, keep=False):
    """body(work, procs) in a fresh work directory (readable by nginx's unprivileged workers),
    every process it appended to procs stopped afterwards, the directory removed unless kept."""
    work = tempfile.mkdtemp(prefix=prefix)
    os.chmod(work, 0o755)
    procs = []
    try:
        return body(work, procs)
    finally:
        for p in procs:
            try:
                p.stop()
            except Exception:
                pass
        if keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--paygate", required=True)
    ap.add_argument("--bench-paygate", required=True, help="the paygate-bench binary (the free pass on)")
    ap.add_argument("--minimal", required=True, help="the minimal_pingora example (the Pingora floor)")
    ap.add_argument("--anvil", required=True)
    ap.add_argument("--artifacts", required=True, help="stablecoin-evm artifacts/hardhat/contracts")
    ap.add_argument("--paid-load", required=True, help="the paid_load example (pre-signed payments)")
    ap.add_argument("--peer", required=True, help="the x402-axum peer binary")
    ap.add_argument("--paid-requests", type=int, default=1500)
    ap.add_argument("--paid-conns", type=int, default=256)
    ap.add_argument("--block-time", type=float, default=1.0, help="anvil's interval mining, seconds")
    ap.add_argument("--paid-only", action="store_true", help="only the paid path (no report written)")
    ap.add_argument("--keep-work", action="store_true", help="keep the work directory (logs) for inspection")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--routes", type=int, default=10000)
    ap.add_argument("--stream-mib", type=int, default=1024)
    ap.add_argument("--out", default=os.path.join(ROOT, "BENCHMARKS.md"))
    a = ap.parse_args()
    results = in_work_dir("paygate-bench-", lambda work, procs: run(a, work, procs), a.keep_work)
    if a.paid_only:
        print(json.dumps(results["paid"], indent=1))
    else:
        write_report(a, results)


# anvil's well-known development accounts: the relayer pays gas, the payer signs the payments.
RELAYER_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
PAYER = ("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a")


def settle_seconds(base):
    """(sum, count) of paygate's settle-latency histogram, over all routes."""
    req = urllib.request.Request(base + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"})
    text = urllib.request.urlopen(req).read().decode()
    total = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        for k in total:
            if line.startswith(f"paygate_settle_latency_seconds_{k}"):
                total[k] += float(line.rsplit(" ", 1)[1])
    return total["sum"], total["count"]


def cpu_seconds(proc):
    """User + system CPU time a process has used so far."""
    fields = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def paid_load(a, url, requests, scheme="exact", conns=None, rate=None):
    """`paid_load --scheme scheme` (every answer must be a 200 with a receipt, but for `free`),
    paced at `rate` requests per second when given."""
    out = subprocess.run(
        pin(1) + [a.paid_load, "--url", url, "--requests", str(requests),
                  "--concurrency", str(conns or a.paid_conns), "--scheme", scheme]
        + (["--rate", str(rate)] if rate else []),
        env=dict(os.environ, PAID_LOAD_PAYER_KEY=PAYER[1]),
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        sys.exit(f"paid_load {url} failed: {out.stderr}")
    res = json.loads(out.stdout)
    if res["ok"] != res["requests"] or (scheme != "free" and res["receipts"] != res["requests"]):
        sys.exit(f"paid_load {url} ({scheme}): not every payment was served with a receipt: {res}")
    return res


def start_chain(a, work, procs, mint_to, contracts=None):
    """anvil mining every --block-time seconds, keeping no history, with USDC minted to
    `mint_to` (and the batch-settlement contract placed, given its compiled `contracts`); its
    RPC URL."""
    rpc_port = free_port()
    rpc = f"http://127.0.0.1:{rpc_port}"
    anvil = [a.anvil, "--host", "127.0.0.1", "--port", str(rpc_port), "--chain-id", "84532", "--prune-history"]
    procs.append(Command(work, "anvil", anvil + ["--block-time", str(a.block_time)]))
    wait_http(rpc)
    subprocess.run(
        [a.paygate, "devchain", "setup", "--rpc", rpc, "--artifacts", a.artifacts, "--mint-to", ",".join(mint_to)]
        + (["--contracts", contracts] if contracts else []),
        env=dict(os.environ, PAYGATE_DEVCHAIN_DEPLOYER_KEY=RELAYER_KEY),
        check=True,
        capture_output=True,
    )
    return rpc


def settling(rpc, relayer=RELAYER_KEY):
    """Environment for a paygate settling on the chain at `rpc`: a route can only be created on
    a network the deployment settles, so every benchmarked gateway settles (most never do)."""
    return {"PAYGATE__NETWORKS__BASE-SEPOLIA__RPC_URL": rpc, "PAYGATE_RELAYER_KEY": relayer}


def paid_path(a, work, procs, up, rpc):
    """Verify + settle + proxy on anvil: paygate (embedded facilitator) vs the x402-axum peer
    settling through paygate's facilitator API (same relayer, chain and nonce manager).

    anvil mines a block every --block-time seconds (Base mines every 2 s) and keeps no history,
    so it does not slow down as the run goes on (automine makes a block per transaction and
    degraded to a third of its speed within a few thousand payments)."""
    gw = Paygate(a.paygate, work, "paygate-paid", settling(rpc))
    procs.append(gw)
    key = gw.org("paid")
    gw.route(key, "/r", up + "/", price=0.001)
    peer_port = free_port()
    peer = Command(
        work,
        "x402-axum-peer",
        [a.peer, f"127.0.0.1:{peer_port}", up + "/", gw.base + "/facilitator/", RECEIVER, "1000"],
        env={"PEER_FACILITATOR_KEY": key},
    )
    procs.append(peer)
    peer_url = f"http://127.0.0.1:{peer_port}/paid"
    wait_http(peer_url)
    # Gateway-side CPU: paygate alone, or the peer plus paygate's facilitator API serving it.
    targets = {
        "paygate_paid": (gw.base + "/gateway/paid/r", [gw]),
        "x402_axum_paid": (peer_url, [peer, gw]),
    }
    for url, _ in targets.values():
        paid_load(a, url, a.paid_conns)  # warm-up: connections, nonce manager, caches
    runs = {k: [] for k in targets}
    for rep in range(a.reps):
        # Alternate who goes first, so neither always meets the chain in the same state.
        order = list(targets.items())
        for name, (url, cpu_of) in order if rep % 2 == 0 else reversed(order):
            before = settle_seconds(gw.base)
            cpu0 = sum(cpu_seconds(p.proc) for p in cpu_of)
            res = paid_load(a, url, a.paid_requests)
            res["cpu_ms_per_request"] = 1000 * (sum(cpu_seconds(p.proc) for p in cpu_of) - cpu0) / a.paid_requests
            if name == "paygate_paid":
                after = settle_seconds(gw.base)
                res["settle_mean_ms"] = 1000 * (after[0] - before[0]) / max(1, after[1] - before[1])
            runs[name].append(res)
            print(
                f"rep {rep + 1} {name:14s} {res['rps']:>8,.1f} req/s  p50 {res['p50_ms']:.1f} ms  "
                f"p99 {res['p99_ms']:.1f} ms  gateway CPU {res['cpu_ms_per_request']:.2f} ms/req",
                flush=True,
            )
    return runs


def run(a, work, procs):
    r = {"machine": machine()}
    # The trivial upstream: nginx answering 200 "ok" (and a 1 GiB file, and a tiny SSE body).
    big = os.path.join(work, "big.bin")
    with open(big, "wb") as f:
        f.truncate(a.stream_mib * 1024 * 1024)
    os.chmod(big, 0o644)
    up_port = free_port()
    upstream = Nginx(
        work,
        "upstream",
        f"""server {{ listen 127.0.0.1:{up_port};
            location = /big {{ alias {big}; }}
            location = /sse {{ default_type text/event-stream; return 200 "data: hello\\n\\n"; }}
            location / {{ return 200 "ok"; }} }}""",
    )
    procs.append(upstream)
    up = f"http://127.0.0.1:{up_port}"
    wait_http(up + "/")
    rpc = start_chain(a, work, procs, [PAYER[0]])
    r["paid"] = paid_path(a, work, procs, up, rpc)
    if a.paid_only:
        return r

    gw = Paygate(a.paygate, work, "paygate", settling(rpc))
    procs.append(gw)
    key = gw.org("bench")
    gw.route(key, "/r", up + "/")
    # The challenge paygate renders, copied byte for byte into nginx's `return 402`.
    try:
        urllib.request.urlopen(gw.base + "/gateway/bench/r")
        sys.exit("expected a 402")
    except urllib.error.HTTPError as e:
        body = e.read().decode()
        xreq = e.headers["X-Payment-Requirements"]
        preq = e.headers["PAYMENT-REQUIRED"]
        pad = added_header_bytes(e.headers)
    assert "'" not in body + xreq + preq
    n402_port = free_port()
    n402 = Nginx(
        work,
        "nginx402",
        f"""server {{ listen 127.0.0.1:{n402_port};
            location / {{ default_type application/json;
              add_header X-Payment-Requirements '{xreq}' always;
              add_header PAYMENT-REQUIRED '{preq}' always;
              return 402 '{body}'; }} }}""",
    )
    procs.append(n402)
    nproxy_port = free_port()
    nproxy = Nginx(
        work,
        "nginxproxy",
        f"""upstream up {{ server 127.0.0.1:{up_port}; keepalive 128; }}
            server {{ listen 127.0.0.1:{nproxy_port};
            location / {{ proxy_pass http://up; proxy_http_version 1.1;
                          proxy_set_header Connection ""; }} }}""",
    )
    procs.append(nproxy)
    bgw = Paygate(a.bench_paygate, work, "paygate-bench", settling(rpc))
    procs.append(bgw)
    bkey = bgw.org("bench")
    bgw.route(bkey, "/r", up + "/")
    bgw.route(bkey, "/sse", up + "/sse", streaming=True)
    bgw.route(bkey, "/big", up + "/big", streaming=True)
    wait_http(f"http://127.0.0.1:{n402_port}/")
    wait_http(f"http://127.0.0.1:{nproxy_port}/")
    # The Pingora floor: a bare Pingora service answering a 402 of the same size, and a bare
    # Pingora proxy to the same upstream (same listener settings as paygate, one thread).
    floor_body = os.path.join(work, "floor402.json")
    with open(floor_body, "w") as f:
        f.write(body + " " * pad)
    min402_port, minproxy_port = free_port(), free_port()
    for port, mode, arg in ((min402_port, "402", floor_body), (minproxy_port, "proxy", f"127.0.0.1:{up_port}")):
        procs.append(Command(work, f"minimal-{mode}", [a.minimal, f"127.0.0.1:{port}", mode, arg, "1", FLOOR_POOL]))
        wait_http(f"http://127.0.0.1:{port}/")

    free = ["x-paygate-bench-free: 1"]
    targets = {
        "nginx_402": (f"http://127.0.0.1:{n402_port}/gateway/bench/r", []),
        "paygate_402": (gw.base + "/gateway/bench/r", []),
        "paygate_404": (gw.base + "/gateway/bench/nope", []),
        "direct": (up + "/", []),
        "nginx_proxy": (f"http://127.0.0.1:{nproxy_port}/", []),
        "paygate_proxy": (bgw.base + "/gateway/bench/r", free),
        "pingora_402": (f"http://127.0.0.1:{min402_port}/", []),
        "pingora_proxy": (f"http://127.0.0.1:{minproxy_port}/", []),
    }
    for url, h in targets.values():
        wrk(url, a.conns, 2, h)  # warm-up
    runs = {k: [] for k in targets}
    for rep in range(a.reps):
        for name, (url, h) in targets.items():
            res = wrk(url, a.conns, a.duration, h)
            runs[name].append(res)
            print(f"rep {rep + 1} {name:14s} {res['rps']:>10,.0f} req/s  p50 {res['p50']:.3f} ms  p99 {res['p99']:.3f} ms", flush=True)
    r["http"] = runs
    # Added latency without queueing: one connection, one request at a time.
    solo = {"direct": targets["direct"], "nginx_proxy": targets["nginx_proxy"], "paygate_proxy": targets["paygate_proxy"]}
    r["solo"] = {k: [] for k in solo}
    for rep in range(a.reps):
        for name, (url, h) in solo.items():
            r["solo"][name].append(wrk(url, 1, a.duration, h))

    # Streaming: added time to first byte, and memory while 1 GiB flows through.
    r["ttfb_direct_ms"] = ttfb_ms("127.0.0.1", up_port, "/sse", [], 200)
    r["ttfb_paygate_ms"] = ttfb_ms("127.0.0.1", bgw.port, "/gateway/bench/sse", free, 200)
    base_rss = bgw.rss_kb()
    peak = [base_rss]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak.append(bgw.rss_kb())
            time.sleep(0.05)

    t = threading.Thread(target=sample)
    t.start()
    t0 = time.perf_counter()
    out = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}", "-H", free[0], bgw.base + "/gateway/bench/big"],
        capture_output=True,
        text=True,
        check=True,
    )
    secs = time.perf_counter() - t0
    done.set()
    t.join()
    if out.stdout.split()[0] != "200":
        sys.exit(f"streaming the big file answered {out.stdout}")
    r["stream"] = {
        "bytes": int(out.stdout.split()[1]),
        "seconds": secs,
        "rss_before_kb": base_rss,
        "rss_peak_kb": max(peak),
    }

    # Control plane: a PATCH's 200 vs the proxy serving the change; management throughput.
    s, routes, _ = call(gw.base, "GET", "/api/routes", key)
    rid = routes[0]["id"]
    seen = 0
    trials = 100
    for i in range(trials):
        price = round(0.02 + i / 1000, 3)
        s, _, _ = call(gw.base, "PATCH", f"/api/routes/{rid}", key, {"priceUSD": price})
        assert s == 200
        try:
            urllib.request.urlopen(gw.base + "/gateway/bench/r")
        except urllib.error.HTTPError as e:
            doc = json.loads(base64.b64decode(e.headers["PAYMENT-REQUIRED"]))
            if doc["accepts"][0]["amount"] == str(round(price * 1_000_000)):
                seen += 1
    r["propagation"] = {"trials": trials, "seen_on_first_request": seen}
    t0 = time.perf_counter()
    for i in range(a.routes):
        s, body, _ = call(
            gw.base,
            "POST",
            "/api/routes",
            key,
            {"path": f"/bulk/{i}", "priceUSD": 0.01, "targetUrl": up + "/", "network": "base-sepolia"},
        )
        assert s == 201, body
    r["create_per_s"] = a.routes / (time.perf_counter() - t0)
    r["mgmt_get"] = [
        wrk(gw.base + f"/api/routes/{rid}", 16, a.duration, [f"Authorization: Bearer {key}"]) for _ in range(a.reps)
    ]
    r["mgmt_402_after"] = wrk(gw.base + "/gateway/bench/r", a.conns, a.duration)

    # Verification cost (criterion estimates from `cargo bench --bench verify`).
    names = [
        "payment/decode_hash_recover",
        "payment/eip712_hash",
        "recover/libsecp256k1_bare",
        "recover/k256",
        "challenge/render",
    ]
    r["criterion"] = {n: criterion_ns(n) for n in names}
    with open(os.path.join(ROOT, "target", "bench-results.json"), "w") as f:
        json.dump(r, f, indent=1)
    return r


def write_report(a, r):
    m = r["machine"]
    runs = r["http"]

    def col(name, key):
        return [x[key] for x in runs[name]]

    def ratio(num, den, key):
        return [n[key] / d[key] for n, d in zip(runs[num], runs[den])]

    lines = []
    w = lines.append
    w("# Benchmarks")
    w("")
    w(f"Produced by `make bench` (`python3 benches/run.py --reps {a.reps} --duration {a.duration} --conns {a.conns}`")
    w(f"plus `cargo bench --bench verify`) at commit `{m['commit']}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.")
    w("")
    w(f"Machine: {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB, Linux {m['kernel']}; {m['nginx']}; {m['wrk']}.")
    w("Servers (nginx with `worker_processes 1`, paygate with `server.threads = 1`, the upstream) run on")
    w("CPU 0, the load generator on CPU 1 (`taskset`). Access logs off on both sides (paygate `PAYGATE_LOG=warn`).")
    w(f"Load: `wrk -t1 -c{a.conns} -d{a.duration}s --latency`, each target {a.reps} times, interleaved;")
    w("figures are min / median / max over the repetitions. Ratios are computed per repetition (same")
    w("moment, same machine) and then summarised.")
    w("")
    w("## HTTP paths")
    w("")
    w("| target | what | req/s | p50 ms | p99 ms |")
    w("|---|---|---|---|---|")
    what = {
        "nginx_402": "nginx `return 402` with paygate's exact challenge body and headers",
        "paygate_402": "paygate: unpaid request to a paid route (challenge)",
        "paygate_404": "paygate: unknown route (`ROUTE_NOT_FOUND`)",
        "direct": "the trivial upstream, hit directly",
        "nginx_proxy": "nginx `proxy_pass` (keepalive) to the upstream",
        "paygate_proxy": "paygate forwarding to the upstream, payment step taken out (bench build)",
        "pingora_402": "the Pingora floor: a bare Pingora service answering a fixed 402 of the same size",
        "pingora_proxy": "the Pingora floor: a bare Pingora proxy to the same upstream",
    }
    for name in runs:
        w(f"| `{name}` | {what[name]} | {fmt3(spread(col(name, 'rps')))} | {fmt3(spread(col(name, 'p50')), 3)} | {fmt3(spread(col(name, 'p99')), 3)} |")
    w("")
    w("Exact commands (ports vary per run):")
    w("")
    for name in runs:
        w(f"- `{name}`: `{runs[name][0]['cmd']}`")
    w("")
    rps402 = spread(ratio("paygate_402", "nginx_402", "rps"))
    p99402 = spread(ratio("paygate_402", "nginx_402", "p99"))
    rps404 = spread(ratio("paygate_404", "nginx_402", "rps"))
    rpsprox = spread(ratio("paygate_proxy", "nginx_proxy", "rps"))
    added50 = spread([(p - d) * 1000 for p, d in zip(col("paygate_proxy", "p50"), col("direct", "p50"))])
    added50n = spread([(p - d) * 1000 for p, d in zip(col("nginx_proxy", "p50"), col("direct", "p50"))])
    added99 = spread([(p - d) * 1000 for p, d in zip(col("paygate_proxy", "p99"), col("direct", "p99"))])
    w("## Ratios against the baselines (min / median / max)")
    w("")
    w("| figure | measured | target | met |")
    w("|---|---|---|---|")
    w(f"| unpaid 402 req/s, paygate / nginx | {fmt3(rps402, 2)} | >= 1.0 | {'yes' if rps402[1] >= 1.0 else 'no'} |")
    w(f"| unpaid 402 p99, paygate / nginx | {fmt3(p99402, 2)} | <= 1.2 | {'yes' if p99402[1] <= 1.2 else 'no'} |")
    w(f"| 404 req/s, paygate / nginx 402 | {fmt3(rps404, 2)} | (reported) | |")
    w(f"| proxied req/s, paygate / nginx proxy_pass | {fmt3(rpsprox, 2)} | >= 0.9 | {'yes' if rpsprox[1] >= 0.9 else 'no'} |")
    w(f"| added p50 over direct at {a.conns} connections (queueing included), paygate (us) | {fmt3(added50)} | (reported) | |")
    w(f"| added p50 over direct, nginx proxy_pass (us) | {fmt3(added50n)} | (baseline) | |")
    w(f"| added p99 over direct, paygate (us) | {fmt3(added99)} | (reported) | |")
    solo = r["solo"]
    scol = lambda n, k: [x[k] for x in solo[n]]
    solo50 = spread([(p - d) * 1000 for p, d in zip(scol("paygate_proxy", "p50"), scol("direct", "p50"))])
    solo50n = spread([(p - d) * 1000 for p, d in zip(scol("nginx_proxy", "p50"), scol("direct", "p50"))])
    solo99 = spread([(p - d) * 1000 for p, d in zip(scol("paygate_proxy", "p99"), scol("direct", "p99"))])
    w(f"| added p50 over direct, one connection, paygate (us) | {fmt3(solo50)} | <= 100 | {'yes' if solo50[1] <= 100 else 'no'} |")
    w(f"| added p50 over direct, one connection, nginx proxy_pass (us) | {fmt3(solo50n)} | (baseline) | |")
    w(f"| added p99 over direct, one connection, paygate (us) | {fmt3(solo99)} | (reported) | |")
    w(f"| Pingora floor 402 req/s / nginx | {fmt3(spread(ratio('pingora_402', 'nginx_402', 'rps')), 2)} | (what Pingora allows) | |")
    w(f"| paygate 402 req/s / Pingora floor | {fmt3(spread(ratio('paygate_402', 'pingora_402', 'rps')), 2)} | (paygate's own share) | |")
    w(f"| Pingora floor proxy req/s / nginx proxy_pass | {fmt3(spread(ratio('pingora_proxy', 'nginx_proxy', 'rps')), 2)} | (what Pingora allows) | |")
    w(f"| paygate proxy req/s / Pingora floor | {fmt3(spread(ratio('paygate_proxy', 'pingora_proxy', 'rps')), 2)} | (paygate's own share) | |")
    w("")
    w("Where the time goes, the sweep over connection counts and core layouts, and which of issue 21's")
    w("targets are met: \"The hot path under load\" and \"Hot-path sweep\" below (`make bench-sweep`).")
    w("")
    c = r["criterion"]
    w("## Verification cost (criterion, median per operation)")
    w("")
    w("| operation | time |")
    w("|---|---|")
    for n, ns in c.items():
        w(f"| `{n}` | {ns / 1000:.2f} us |")
    vr = c["payment/decode_hash_recover"] / c["recover/libsecp256k1_bare"]
    kr = c["recover/k256"] / c["recover/libsecp256k1_bare"]
    w("")
    w(f"- decode + EIP-712 hash + recovery / bare libsecp256k1 recovery: **{vr:.2f}x** (target <= 1.3x: {'met' if vr <= 1.3 else 'missed'}).")
    w(f"- k256 recovery / libsecp256k1 recovery: {kr:.2f}x (paygate uses libsecp256k1 through alloy-primitives' `secp256k1` feature).")
    w("")
    s = r["stream"]
    w("## Streaming")
    w("")
    added_ttfb = r["ttfb_paygate_ms"] - r["ttfb_direct_ms"]
    w(f"- Time to first byte on a streaming route (median of 200 sequential requests, new connection each):")
    w(f"  direct {r['ttfb_direct_ms']:.3f} ms, through paygate {r['ttfb_paygate_ms']:.3f} ms: added **{added_ttfb:.3f} ms** (target <= 1 ms: {'met' if added_ttfb <= 1 else 'missed'}).")
    growth_mb = (s["rss_peak_kb"] - s["rss_before_kb"]) / 1024
    w(f"- {s['bytes'] / 2**30:.2f} GiB streamed through paygate in {s['seconds']:.1f} s ({s['bytes'] / 2**20 / s['seconds']:.0f} MiB/s):")
    w(f"  RSS {s['rss_before_kb'] / 1024:.1f} MiB before, peak {s['rss_peak_kb'] / 1024:.1f} MiB: growth **{growth_mb:.1f} MiB** (target <= 20 MiB: {'met' if growth_mb <= 20 else 'missed'}).")
    w("")
    p = r["propagation"]
    w("## Control plane")
    w("")
    w(f"- Route change propagation: {p['seen_on_first_request']}/{p['trials']} PATCHes of a route's price were served by the proxy")
    w("  on the very first request sent after the PATCH's `200` (the table is republished before the API answers: zero by design).")
    mg = [x["rps"] for x in r["mgmt_get"]]
    w(f"- With {a.routes:,} routes stored: `GET /api/routes/{{id}}` {fmt3(spread(mg))} req/s (wrk -c16);")
    w(f"  route creation (sequential, each durable before its `201`) {r['create_per_s']:,.0f} routes/s;")
    w(f"  unpaid 402 with {a.routes:,} routes in the table: {r['mgmt_402_after']['rps']:,.0f} req/s.")
    w("")
    paid = r["paid"]
    pcol = lambda n, k: [x[k] for x in paid[n]]
    prps = spread([g["rps"] / x["rps"] for g, x in zip(paid["paygate_paid"], paid["x402_axum_paid"])])
    pcpu = spread([x["cpu_ms_per_request"] / g["cpu_ms_per_request"] for g, x in zip(paid["paygate_paid"], paid["x402_axum_paid"])])
    w("## Paid path (verify + settle + proxy on anvil)")
    w("")
    w(f"anvil (`--block-time {a.block_time:g} --prune-history`, Circle's FiatTokenV2_2 at the Base Sepolia address) on CPU 0 with")
    w("the gateways and the upstream; the load generator (`paid_load`, pre-signed EIP-3009 payments, one")
    w(f"nonce each) on CPU 1: {a.paid_requests} paid requests per run with {a.paid_conns} in flight, each target {a.reps} times, the order")
    w("alternating per repetition. Every request must come back `200` with a settlement receipt, or the run")
    w("fails. The peer is the x402-axum 2.0.2 middleware (x402-rs, `settle_before_execution`, as paygate")
    w("settles before forwarding) in front of the same upstream, whose facilitator client calls")
    w("paygate's facilitator API (`/facilitator/settle`): the same relayer key, nonce manager, RPC client")
    w("and chain. Gateway CPU is paygate's CPU time per request, or the peer's plus paygate's (its")
    w("facilitator) for the peer; the chain and the load generator are not counted.")
    w("")
    w("| target | req/s | p50 ms | p99 ms | gateway CPU ms/request |")
    w("|---|---|---|---|---|")
    for name in paid:
        w(f"| `{name}` | {fmt3(spread(pcol(name, 'rps')), 1)} | {fmt3(spread(pcol(name, 'p50_ms')), 1)} | {fmt3(spread(pcol(name, 'p99_ms')), 1)} | {fmt3(spread(pcol(name, 'cpu_ms_per_request')), 2)} |")
    w("")
    settle = spread(pcol("paygate_paid", "settle_mean_ms"))
    w(f"- Latency split of paygate's paid request (means): verify {c['payment/decode_hash_recover'] / 1e6:.3f} ms (local signature check,")
    w(f"  criterion above); settle {fmt3(settle, 1)} ms (simulate, send, wait for the block: paygate's settle-latency")
    w("  histogram over the run); the rest of the client's latency is waiting for a settlement slot under this")
    w("  load and the upstream (a direct upstream request takes the `direct` p50 above).")
    w(f"- paygate / x402-axum requests/s: **{fmt3(prps, 2)}** (target >= 1.5: {'met' if prps[1] >= 1.5 else 'missed'}).")
    w(f"- x402-axum / paygate gateway CPU per paid request: **{fmt3(pcpu, 2)}** (paygate's capacity advantage once the chain is not the limit).")
    w('- Why the 1.5x target is missed: both sides settle through the same facilitator (one relayer,')
    w('  one nonce manager, the same anvil), and on this 2-core machine anvil spends several ms of CPU')
    w('  per transfer (simulation, inclusion, receipts), which caps both at 100-140 settlements/s; at')
    w('  that cap the gateway in front does not decide the throughput. What paygate saves shows in the')
    w("  gateway CPU per paid request (the peer path's ratio above: it adds an HTTP round trip with JSON")
    w('  encoding to the facilitator per payment). What would show it in requests/s: a chain that is not')
    w("  the bottleneck (a node on its own cores, or a real network's RPC), and fewer RPC calls per")
    w('  settlement on both sides (the fee estimate, `eth_feeHistory`, is still read per transaction and')
    w('  could be cached per block).')
    w("- Command: `" + " ".join(["target/release/examples/paid_load", "--url", "<url>", "--requests", str(a.paid_requests), "--concurrency", str(a.paid_conns)]) + "`")
    w("")
    # Everything from the first section another benchmark (or a hand-written reading) keeps
    # between markers on is kept as it is.
    old = open(a.out).read() if os.path.exists(a.out) else ""
    first = re.search(r"<!-- \w+:begin -->", old)
    open(a.out, "w").write("\n".join(lines) + ("\n\n" + old[first.start():] if first else "\n"))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
