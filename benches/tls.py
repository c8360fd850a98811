#!/usr/bin/env python3
"""The TLS part of `make bench` (issue 18): paygate's TLS listener next to nginx with the same
certificate, the same unpaid 402 answer, servers pinned to CPU 0 and the load to CPU 1, each
target --reps times, alternated. Writes the "TLS and HTTP/2" section of BENCHMARKS.md (between
its markers; appended when absent). Every figure is a ratio against nginx in the same session:

- full handshakes per second: `wrk` over https with `Connection: close` (a new TLS connection,
  full handshake, per request);
- 402s per second on kept connections over HTTP/1.1 (`wrk`, https) and over HTTP/2 (`h2load`);
- the plain-text 402 ratio of the same session, which the TLS ratios are to match or beat.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import PAYER, ROOT, Nginx, Paygate, free_port, in_work_dir, pin, settling, start_chain, wait_http, write_section, wrk  # noqa: E402

BEGIN, END = "<!-- tls:begin -->", "<!-- tls:end -->"


def spread(xs):
    return min(xs), statistics.median(xs), max(xs)


def fmt(t, digits=2):
    return " / ".join(f"{x:,.{digits}f}" for x in t)


def h2load(url, conns, streams, duration):
    cmd = pin(1) + ["h2load", "-t1", f"-c{conns}", f"-m{streams}", f"-D{duration}", url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"finished in [\d.]+\w*, ([\d.]+) req/s", out)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if not m or not codes or int(codes.group(3)) == 0 or int(codes.group(4)) != 0:
        sys.exit(f"h2load {url}: unexpected output\n{out}")
    return {"rps": float(m.group(1)), "cmd": " ".join(cmd[len(pin(1)):])}


def certificate(work):
    cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-keyout", key, "-out", cert],
        check=True,
        capture_output=True,
    )
    os.chmod(key, 0o644)
    return cert, key


def run(a, work, procs):
    cert, key = certificate(work)
    tls_port = free_port()
    rpc = start_chain(a, work, procs, [PAYER[0]])
    gw = Paygate(a.paygate, work, "paygate-tls", {
        "PAYGATE__SERVER__TLS__LISTEN": f"127.0.0.1:{tls_port}",
        "PAYGATE__SERVER__TLS__CERT": cert,
        "PAYGATE__SERVER__TLS__KEY": key,
        **settling(rpc),
    })
    procs.append(gw)
    key_ = gw.org("bench")
    gw.route(key_, "/r", "http://127.0.0.1:9/")
    # paygate's challenge, byte for byte, as nginx's `return 402` on both of its listeners.
    try:
        urllib.request.urlopen(gw.base + "/gateway/bench/r")
        sys.exit("expected a 402")
    except urllib.error.HTTPError as e:
        body = e.read().decode()
        hdrs = {k: e.headers[k] for k in ("X-Payment-Requirements", "PAYMENT-REQUIRED")}
    assert "'" not in body + "".join(hdrs.values())
    n_plain, n_tls = free_port(), free_port()
    add = "".join(f"add_header {k} '{v}' always; " for k, v in hdrs.items())
    nginx = Nginx(work, "nginx-tls", f"""
        server {{
          listen 127.0.0.1:{n_plain};
          listen 127.0.0.1:{n_tls} ssl http2;
          ssl_certificate {cert};
          ssl_certificate_key {key};
          ssl_session_cache off;
          ssl_session_tickets off;
          location / {{ default_type application/json; {add} return 402 '{body}'; }}
        }}""")
    procs.append(nginx)
    try:
        wait_http(f"http://127.0.0.1:{n_plain}/")
    except SystemExit:
        sys.exit(open(os.path.join(nginx.dir, "stderr.log")).read())
    path = "/gateway/bench/r"
    targets = {
        "plain": (f"http://127.0.0.1:{n_plain}{path}", f"{gw.base}{path}"),
        "tls_h1": (f"https://localhost:{n_tls}{path}", f"https://localhost:{tls_port}{path}"),
    }
    r = {"plain": [], "tls_h1": [], "handshake": [], "tls_h2": []}
    for rep in range(a.reps):
        for name, (nginx_url, gw_url) in targets.items():
            pair = [wrk(u, a.conns, a.duration)["rps"] for u in (nginx_url, gw_url)]
            r[name].append(pair)
            print(f"rep {rep + 1} {name:10s} nginx {pair[0]:>9,.0f}  paygate {pair[1]:>9,.0f} req/s", flush=True)
        close = ["Connection: close"]
        pair = [wrk(u, a.conns, a.duration, close)["rps"] for u in (targets["tls_h1"][0], targets["tls_h1"][1])]
        r["handshake"].append(pair)
        print(f"rep {rep + 1} handshake  nginx {pair[0]:>9,.0f}  paygate {pair[1]:>9,.0f} conn/s", flush=True)
        pair = [h2load(u, a.conns, 10, a.duration)["rps"] for u in (targets["tls_h1"][0], targets["tls_h1"][1])]
        r["tls_h2"].append(pair)
        print(f"rep {rep + 1} tls_h2     nginx {pair[0]:>9,.0f}  paygate {pair[1]:>9,.0f} req/s", flush=True)
    return r


def write(a, r):
    rows = [
        ("plain", "402 over plain HTTP/1.1, kept connections (the ratio to match)", "req/s"),
        ("tls_h1", "402 over TLS, HTTP/1.1, kept connections", "req/s"),
        ("tls_h2", "402 over TLS, HTTP/2 (10 streams per connection)", "req/s"),
        ("handshake", "full TLS handshakes (a new connection per request)", "conn/s"),
    ]
    plain = statistics.median(p / n for n, p in r["plain"])
    lines = [
        BEGIN,
        "## TLS and HTTP/2 (issue 18)",
        "",
        f"Command: `make bench-tls` (`python3 benches/tls.py`), {a.reps} repetitions of {a.duration} s per",
        f"target, {a.conns} connections, nginx and paygate alternated; both serve the same self-signed",
        "P-256 certificate (nginx with session resumption off, so every `Connection: close` request is",
        "a full handshake on both) and paygate's exact 402. Servers on CPU 0 (nginx one worker, paygate",
        "one proxy thread), load on CPU 1: `wrk -t1` for HTTP/1.1, `h2load -t1 -m10` for HTTP/2.",
        "",
        "| path | nginx (median) | paygate (median) | paygate / nginx min / median / max | target |",
        "|---|---|---|---|---|",
    ]
    for key, label, unit in rows:
        ratios = spread([p / n for n, p in r[key]])
        nginx = statistics.median(n for n, _ in r[key])
        gw = statistics.median(p for _, p in r[key])
        target = "(baseline)" if key == "plain" else f">= {plain:.2f} (plain) : {'met' if ratios[1] >= plain else 'missed'}"
        lines.append(f"| {label} | {nginx:,.0f} {unit} | {gw:,.0f} {unit} | {fmt(ratios)} | {target} |")
    lines += ["", END]
    write_section(a.out, "\n".join(lines))
    print(json.dumps(r))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--paygate", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=int, default=6)
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--out", default=os.path.join(ROOT, "BENCHMARKS.md"))
    ap.add_argument("--anvil", required=True)
    ap.add_argument("--artifacts", required=True)
    ap.add_argument("--block-time", type=float, default=1.0)
    a = ap.parse_args()
    write(a, in_work_dir("paygate-tls-bench-", lambda work, procs: run(a, work, procs)))


if __name__ == "__main__":
    main()
