#!/usr/bin/env python3
"""The seller's view at scale (issue 19), part of `make bench`: one organisation with --routes
routes, --payments gateway payments and --payouts payouts stored (benches/ledger_seed.rs writes
them through the store's own operations, the gateway stopped), then the gateway serves:

- filtered ledger pages (`GET /api/payments`: no filter, a route, a payer, a rare status, a
  one-day range 10 days back, a deep cursor, route and status together), a corridor's payouts
  page, a 10,000-row CSV export;
- the org metrics with one row per route (24h, 7d, 30d windows);
- the console's overview in headless Chromium (navigation to charts and every route row drawn).

Latencies are client-side over one kept connection, sequential; each set is set against
`GET /healthz` measured the same way in the same session (the baseline). Writes the "Seller's
view at scale" section of BENCHMARKS.md between its markers (appended when absent).
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import PAYER, ROOT, Paygate, call, in_work_dir, settling, start_chain, write_section  # noqa: E402

BEGIN, END = "<!-- seller:begin -->", "<!-- seller:end -->"


def timed(base, path, key, n):
    """n sequential GETs over one kept connection: sorted latencies in ms (all must be 200)."""
    host, port = base.removeprefix("http://").split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    out = []
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    for _ in range(n):
        t = time.perf_counter()
        c.request("GET", path, headers=headers)
        r = c.getresponse()
        body = r.read()
        out.append((time.perf_counter() - t) * 1000)
        if r.status != 200:
            sys.exit(f"GET {path}: {r.status} {body[:300]!r}")
    c.close()
    return sorted(out)


def pct(xs, p):
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def overview_render(base, key, reps):
    """Seconds from navigation to the overview drawn (charts and every route row)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,1000"):
        opts.add_argument(flag)
    d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        d.get(f"{base}/console")
        d.execute_script("sessionStorage.setItem('paygate.key', arguments[0])", key)
        times, rows = [], 0
        for _ in range(reps + 1):
            d.get("about:blank")
            t = time.perf_counter()
            d.get(f"{base}/console#/overview")
            WebDriverWait(d, 30).until(
                lambda drv: drv.find_elements(By.CSS_SELECTOR, "figure[data-chart='Revenue']")
                and len(drv.find_elements(By.CSS_SELECTOR, "main table tbody tr")) > 0)
            times.append(time.perf_counter() - t)
            rows = len(d.find_elements(By.CSS_SELECTOR, "main table tbody tr"))
        return sorted(times[1:]), rows  # the first warms the browser's cache
    finally:
        d.quit()


def run(a, work, procs):
    rpc = start_chain(a, work, procs, [PAYER[0]])
    pg = Paygate(a.paygate, work, "seller", settling(rpc))
    procs.append(pg)
    key = pg.org("acme")
    routes = []
    for i in range(a.routes):
        s, body, _ = call(pg.base, "POST", "/api/routes", key,
                          {"path": f"/api/{i}", "priceUSD": 0.01, "targetUrl": "http://127.0.0.1:9/x",
                           "network": "base-sepolia"})
        assert s == 201, body
        routes.append(body["id"])
    pg.stop()
    procs.remove(pg)
    seed = subprocess.run([a.seed, "--data", os.path.join(pg.dir, "data"), "--org", "acme",
                           "--payments", str(a.payments), "--payouts", str(a.payouts)],
                          capture_output=True, text=True, check=True)
    seeded = json.loads(seed.stdout.strip().splitlines()[-1])
    print("seeded", seeded, flush=True)
    pg = Paygate(a.paygate, work, "seller", settling(rpc))
    procs.append(pg)

    n = a.requests
    now = time.time()
    day = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
    s, mid, _ = call(pg.base, "GET", f"/api/payments?to={day(now - 15 * 86400)}&limit=1", key)
    assert s == 200 and mid["nextCursor"], mid
    corridor = seeded["corridor"]
    sets = [
        ("baseline: GET /healthz", "/healthz", None),
        ("ledger, newest page (50)", "/api/payments", key),
        ("ledger, one route", f"/api/payments?route={routes[7]}", key),
        ("ledger, one payer", "/api/payments?payer=0x000000000000000000000000000000000000a003", key),
        ("ledger, FAILED (1 in 50)", "/api/payments?status=FAILED", key),
        ("ledger, route and FAILED", f"/api/payments?route={routes[0]}&status=FAILED", key),
        ("ledger, one day 10 days back", f"/api/payments?from={day(now - 11 * 86400)}&to={day(now - 10 * 86400)}", key),
        ("ledger, deep cursor (15 days back)", f"/api/payments?cursor={mid['nextCursor']}", key),
        ("corridor payouts page (50)", f"/corridors/{corridor}/payments", key),
        (f"org metrics 24h, {a.routes} route rows", "/api/gateway/metrics?window=24h", key),
        (f"org metrics 7d, {a.routes} route rows", "/api/gateway/metrics?window=7d", key),
        (f"org metrics 30d, {a.routes} route rows", "/api/gateway/metrics?window=30d", key),
    ]
    results = []
    for name, path, k in sets:
        xs = timed(pg.base, path, k, n)
        results.append({"name": name, "path": path, "p50": pct(xs, 50), "p99": pct(xs, 99), "max": xs[-1]})
        print(f"{name}: p50 {pct(xs, 50):.2f} ms, p99 {pct(xs, 99):.2f} ms", flush=True)
    csv = timed(pg.base, "/api/payments?format=csv&limit=10000", key, 5)
    render, rows = overview_render(pg.base, key, a.render_reps)
    return {"seeded": seeded, "results": results, "csv": csv, "render": render, "rows": rows, "n": n}


def section(a, r):
    base = r["results"][0]["p99"]
    lines = [
        BEGIN,
        "## Seller's view at scale",
        "",
        f"`make bench` (`benches/ledger.py`, `benches/ledger_seed.rs`): one organisation with "
        f"{r['seeded']['routes']:,} routes, {r['seeded']['payments']:,} gateway payments (30 days, 16 payers, "
        f"1 in 50 failed) and {r['seeded']['payouts']:,} payouts stored on sled through the store's own "
        f"operations (seeding took {r['seeded']['paymentsSeconds']:.0f} s and {r['seeded']['payoutsSeconds']:.0f} s), "
        f"then {r['n']} sequential requests per line over one kept connection through the public "
        f"listener. Command: `python3 benches/ledger.py --paygate target/release/paygate --seed "
        f"target/release/examples/ledger_seed`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        f"Targets: a filtered ledger page p99 under 50 ms, the org metrics with 1,000 route rows "
        f"under 100 ms, the console overview drawn in under 1 s.",
        "",
        "| request | p50 ms | p99 ms | max ms | p99 / baseline p99 |",
        "|---|---:|---:|---:|---:|",
    ]
    for x in r["results"]:
        lines.append(f"| {x['name']} | {x['p50']:.2f} | {x['p99']:.2f} | {x['max']:.2f} | {x['p99'] / base:.1f}x |")
    c = r["csv"]
    lines += [
        "",
        f"CSV export of 10,000 rows: median {statistics.median(c):.0f} ms (5 runs). Console overview "
        f"in headless Chromium, navigation to both charts and all {r['rows']:,} route rows drawn: "
        f"median {statistics.median(r['render']) * 1000:.0f} ms, max {r['render'][-1] * 1000:.0f} ms "
        f"({len(r['render'])} runs after one warm-up).",
        END,
    ]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--paygate", required=True)
    ap.add_argument("--seed", required=True)
    ap.add_argument("--payments", type=int, default=1_000_000)
    ap.add_argument("--payouts", type=int, default=100_000)
    ap.add_argument("--routes", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--render-reps", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--anvil", required=True)
    ap.add_argument("--artifacts", required=True)
    ap.add_argument("--block-time", type=float, default=1.0)
    a = ap.parse_args()
    r = in_work_dir("paygate-ledger-", lambda work, procs: run(a, work, procs))
    text = section(a, r)
    print(text)
    if a.no_write:
        return
    write_section(os.path.join(ROOT, "BENCHMARKS.md"), text)


if __name__ == "__main__":
    main()
