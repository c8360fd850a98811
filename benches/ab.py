#!/usr/bin/env python3
"""A/B of two paygate builds on the hot path, in one session: each build is started in turn by
`make run`'s script (scripts/dev_env.py: anvil, the dev org and route), pinned to CPU 0, and
the builds alternate for --reps rounds, so both meet the same machine. Two measures:
- the unpaid call (the 402 challenge): `wrk` on CPU 1 asks the dev route for its challenge;
  requests a second (the gateway's CPU is the bottleneck, so the ratio is the inverse of the CPU
  a request costs);
- with --paid-load, the voucher (a payment channel's request, the busiest paid path): the
  load generator opens a channel per connection (before the clock), then sends --vouchers
  vouchers; the gateway's CPU time (utime + stime) per served voucher.
Prints each round and the median ratio B/A of each. Usage (what `make bench-ab` runs):

    python3 benches/ab.py --a OLD_BINARY --b NEW_BINARY --anvil ... --artifacts ... --contracts ...
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, ".run")
URL = "http://127.0.0.1:8402/gateway/acme/echo"


def start(binary, a):
    """The dev environment with `binary`, fresh, until it says it is running."""
    shutil.rmtree(RUN, ignore_errors=True)
    env = dict(os.environ, PAYGATE__LIMITS__CLIENT__PER_SECOND="0", PAYGATE__LIMITS__PAYER__PER_SECOND="0")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "scripts/dev_env.py"), "--binary", binary,
         "--anvil", a.anvil, "--artifacts", a.artifacts, "--contracts", a.contracts],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        stdin=subprocess.DEVNULL, start_new_session=True,
    )
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if "paygate is running" in line:
            break
        if time.monotonic() > deadline:
            break
    else:
        sys.exit(f"{binary} did not start")
    pid = int(open(os.path.join(RUN, "paygate.pid")).read())
    subprocess.run(["taskset", "-a", "-cp", "0", str(pid)], check=True, capture_output=True)
    return proc


def stop(proc):
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def api(method, path, key, body=None):
    import urllib.request
    req = urllib.request.Request(
        "http://127.0.0.1:8402" + path, method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"null")


def vouchers(a):
    """The gateway's CPU microseconds per served voucher, and how many were served."""
    facts = json.load(open(os.path.join(RUN, "dev.json")))
    key = facts["org"]["apiKey"]
    api("POST", "/api/routes", key, {
        "path": "/ab-vouchers", "priceUSD": "0.001", "network": facts["network"],
        "targetUrl": facts["echoUrl"], "schemes": ["batch-settlement"],
    })
    pid = int(open(os.path.join(RUN, "paygate.pid")).read())
    load = subprocess.Popen(
        ["taskset", "-c", "1", a.paid_load, "--url", "http://127.0.0.1:8402/gateway/acme/ab-vouchers",
         "--requests", str(a.vouchers), "--concurrency", str(a.conns // 2),
         "--scheme", "batch-settlement", "--wait-go"],
        env=dict(os.environ, PAID_LOAD_PAYER_KEY=facts["payerKeys"][0]),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    for line in load.stdout:
        if line.strip() == "ready":
            break
    before = cpu_seconds(pid)
    load.stdin.write("go\n")
    load.stdin.flush()
    report = json.loads(load.stdout.read().strip().splitlines()[-1])
    load.wait()
    after = cpu_seconds(pid)
    ok = report["ok"]
    return (after - before) * 1e6 / max(ok, 1), ok


def wrk(a):
    out = subprocess.run(
        ["taskset", "-c", "1", "wrk", "-t1", f"-c{a.conns}", f"-d{a.duration}s", URL],
        capture_output=True, text=True, check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rps, int(non2xx.group(1)) if non2xx else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="the baseline build")
    ap.add_argument("--b", required=True, help="the build measured against it")
    ap.add_argument("--anvil", required=True)
    ap.add_argument("--artifacts", required=True)
    ap.add_argument("--contracts", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--paid-load", help="the paid_load example: also measure vouchers")
    ap.add_argument("--vouchers", type=int, default=4000)
    a = ap.parse_args()
    rounds = {"a": [], "b": []}
    cpu = {"a": [], "b": []}
    for rep in range(a.reps):
        for which in ("a", "b") if rep % 2 == 0 else ("b", "a"):
            proc = start(getattr(a, which), a)
            try:
                wrk(a)  # warm-up: connections, caches
                rps, answered = wrk(a)
                line = f"round {rep + 1} {which}: 402 {rps:,.0f} req/s ({answered:,} answered)"
                if a.paid_load:
                    us, served = vouchers(a)
                    cpu[which].append(us)
                    line += f"; voucher {us:.1f} us of gateway CPU each ({served:,} served)"
            finally:
                stop(proc)
            rounds[which].append(rps)
            print(line, flush=True)
    ma, mb = statistics.median(rounds["a"]), statistics.median(rounds["b"])
    out = {"402_rps": {"a": rounds["a"], "b": rounds["b"], "ratio_b_over_a": round(mb / ma, 3)}}
    if a.paid_load:
        ca, cb = statistics.median(cpu["a"]), statistics.median(cpu["b"])
        out["voucher_cpu_us"] = {"a": cpu["a"], "b": cpu["b"], "ratio_b_over_a": round(cb / ca, 3)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
