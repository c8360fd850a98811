"""An origin behind paygate, as docs/forwarding.md "Proof of payment for the origin" describes one: it
checks X-Paygate-Signature with the organisation's origin secret and deduplicates by
X-Paygate-Payment-Id, so a payment forwarded again after a crash has its effect once.

Usage: origin.py SECRETS_FILE  (one accepted secret per line, reread on every request; prints
the port it listens on). GET /_stats (unsigned) answers what it saw, GET /health (unsigned)
answers 200. A path ending in /slow
holds a payment's first request for HOLD_SECONDS before answering.
"""

import hashlib
import hmac
import http.server
import json
import sys
import threading
import time

HOLD_SECONDS = 3


def verify(secret, headers, method, path, tolerance=300):
    """The payment id if X-Paygate-Signature is good, else None."""
    pid = headers.get("X-Paygate-Payment-Id", "")
    sig = headers.get("X-Paygate-Signature", "")
    parts = [p.strip().split("=", 1) for p in sig.split(",") if "=" in p]
    t = next((v for k, v in parts if k == "t"), "0")
    if not t.isdigit() or abs(time.time() - int(t)) > tolerance:
        return None
    msg = f"{t}\n{method}\n{path}\n{pid}".encode()
    good = hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()
    return pid if any(k == "v1" and hmac.compare_digest(good, v) for k, v in parts) else None


secrets_file = sys.argv[1]
lock = threading.Lock()
done = {}  # payment id -> the answer given (the effect happened once)
seen = {}  # payment id -> how many times it arrived
effects = 0


class Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self):
        global effects
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.path == "/_stats":
            with lock:
                return self.answer(200, {"effects": effects, "seen": seen})
        if self.path == "/health":
            return self.answer(200, {"status": "ok"})
        with open(secrets_file) as f:
            secrets = [s.strip() for s in f if s.strip()]
        pid = next(
            (p for s in secrets if (p := verify(s, self.headers, self.command, self.path))), None
        )
        if pid is None:
            return self.answer(401, {"error": "bad or missing X-Paygate-Signature"})
        with lock:
            seen[pid] = seen.get(pid, 0) + 1
            first = seen[pid] == 1
            if pid in done:
                return self.answer(200, dict(done[pid], replayed=True))
        if first and self.path.endswith("/slow"):
            time.sleep(HOLD_SECONDS)
        with lock:
            if pid not in done:
                effects += 1
                done[pid] = {"paymentId": pid, "effect": effects, "path": self.path}
            doc = dict(done[pid], replayed=False)
        self.answer(200, doc)

    do_GET = do_POST = do_PUT = do_DELETE = handle_any


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
print(server.server_address[1], flush=True)
server.serve_forever()
