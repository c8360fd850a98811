"""The console in a real browser: Debian's headless Chromium driven by Selenium through
chromium-driver, against a running paygate (tests/e2e/console.rs starts it on anvil).

A seller signs in with its API key (by keyboard), creates a route and sees its 402 challenge;
the official x402 Python client pays it; the payment shows in the ledger with its transaction
link and the overview's charts move; the seller opens a corridor, the operator approves its KYC,
the seller quotes (the fee breakdown before confirming) and pays out, and watches the payout
reach SETTLED; an agent pays a channel route twice over one deposit (`paygate pay --channel`)
and the seller sees the channel, claims it and refunds the rest; then rotates an API key. Every
page is screenshotted into SCREENSHOTS. Before the keys, the official npm client pays an escrowed
(auth-capture) route and the seller refunds part of the payment from its page.

Environment: BASE (gateway URL), ORG_KEY, ADMIN_TOKEN, UPSTREAM (the route's target),
PAYER_KEY (a funded anvil key), PAY_SCRIPT (x402_python_pay.py), PAYGATE_BIN (the binary),
SCREENSHOTS (a directory), RPC, NODE_PAY_SCRIPT (x402_permit2_pay.cjs), NODE_PAYER_KEY and
NODE_PATH (the npm clients).
Prints one JSON line with what it saw; exits non-zero on the first failed expectation.
"""

import json
import os
import subprocess
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

BASE = os.environ["BASE"]
SHOTS = os.environ["SCREENSHOTS"]
seen = {}


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--window-size=1280,1000",
    ):
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={os.path.join(SHOTS, '.profile')}")
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


d = browser()
wait = WebDriverWait(d, 20)


def shot(name):
    d.save_screenshot(os.path.join(SHOTS, f"{name}.png"))


def go(hash_):
    d.get(f"{BASE}/console{hash_}")


def text_of(css):
    return wait.until(EC.visibility_of_element_located((By.CSS_SELECTOR, css))).text


def new_text_of(css, old):
    """The text of `css` once it is not `old`, read again when the page re-renders it."""
    def changed(_):
        try:
            t = d.find_element(By.CSS_SELECTOR, css).text
        except (NoSuchElementException, StaleElementReferenceException):
            return False
        return t if t and t != old else False
    return wait.until(changed)


def fill(name, value):
    e = wait.until(EC.visibility_of_element_located((By.NAME, name)))
    e.clear()
    e.send_keys(value)
    return e


def submit(label):
    wait.until(EC.element_to_be_clickable((By.XPATH, f"//button[normalize-space()='{label}']"))).click()


def heading(words):
    wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, "main h1"), words))


def chart_total(name):
    return float(wait.until(EC.presence_of_element_located(
        (By.CSS_SELECTOR, f"figure[data-chart='{name}']"))).get_attribute("data-total"))


def unlabelled():
    """Form controls without a label (accessibility: every control is named)."""
    return d.execute_script(
        "return [...document.querySelectorAll('main input, main select')]"
        ".filter(i => !i.labels || i.labels.length === 0).map(i => i.name)")


try:
    # Sign in by keyboard alone: the key, then Enter.
    go("")
    key_field = wait.until(EC.visibility_of_element_located((By.NAME, "apiKey")))
    assert unlabelled() == [], unlabelled()
    key_field.send_keys(os.environ["ORG_KEY"], Keys.ENTER)
    heading("Overview")
    revenue_before = chart_total("Revenue")
    requests_before = chart_total("Requests")
    shot("overview-empty")
    assert "?" not in d.current_url.split("#")[0] and os.environ["ORG_KEY"] not in d.current_url

    # A route, created in the form; its page shows the 402 challenge.
    go("#/routes")
    heading("Routes")
    assert unlabelled() == [], unlabelled()
    fill("path", "/weather")
    fill("priceUSD", "0.05")
    fill("targetUrl", f"{os.environ['UPSTREAM']}/weather")
    fill("description", "Weather for agents")
    submit("Create route")
    heading("Route /weather")
    assert text_of("#challenge-status") == "402", text_of("#challenge-status")
    challenge = json.loads(text_of("#challenge-body"))
    accepts = challenge["accepts"][0]
    assert accepts["maxAmountRequired"] == "50000", accepts
    seen["challenge"] = accepts["payTo"]
    shot("route")

    # The official x402 client pays it.
    url = f"{BASE}/gateway/acme/weather"
    paid = subprocess.run([sys.executable, os.environ["PAY_SCRIPT"], url, os.environ["PAYER_KEY"]],
                          capture_output=True, text=True, timeout=120)
    assert paid.returncode == 0, paid.stdout + paid.stderr
    receipt = json.loads(paid.stdout.strip().splitlines()[-1])["paymentResponse"]
    seen["transaction"] = receipt["transaction"]

    # The ledger lists it, with its transaction link.
    go("#/payments")
    heading("Payments")
    row = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "tr[data-payment]")))
    assert "0.050000" in row.text and "SETTLED" in row.text, row.text
    assert "x402" in row.text, row.text  # the protocol it came in
    Select(d.find_element(By.NAME, "status")).select_by_value("FAILED")
    submit("Filter")
    wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, "main"), "No payments match."))
    go("#/payments")
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "tr[data-payment] a"))).click()
    heading("Payment")
    link = wait.until(EC.presence_of_element_located((By.ID, "tx-link")))
    assert link.get_attribute("href").endswith(receipt["transaction"]), link.get_attribute("href")
    shot("payment")
    go("#/payments")
    heading("Payments")
    shot("payments")

    # The overview's charts moved (figures include the last seconds).
    go("#/overview")
    heading("Overview")
    deadline = time.time() + 10
    while chart_total("Revenue") <= revenue_before and time.time() < deadline:
        time.sleep(0.3)
        d.refresh()
        heading("Overview")
    seen["revenue"] = (revenue_before, chart_total("Revenue"))
    seen["requests"] = (requests_before, chart_total("Requests"))
    assert abs(seen["revenue"][1] - revenue_before - 0.05) < 1e-9, seen
    assert seen["requests"][1] > requests_before, seen
    shot("overview")
    d.set_window_size(390, 900)
    d.refresh()
    heading("Overview")
    width = d.execute_script("return document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways on a narrow screen: {width}px"
    shot("overview-narrow")
    d.set_window_size(1280, 1000)

    # A corridor: created PENDING_KYC, approved by the operator. The payout wallet (100 USDC in
    # it) is on the corridors page.
    go("#/corridors")
    heading("Corridors")
    wallet_text = text_of("#payout-wallet")
    assert "100.000000 USDC" in wallet_text, wallet_text
    Select(d.find_element(By.NAME, "destCurrency")).select_by_value("BRL")
    submit("Create corridor")
    heading("Corridor to BRL")
    corridor = d.current_url.rsplit("/", 1)[-1]
    go("#/operator")
    fill("token", os.environ["ADMIN_TOKEN"])
    submit("Sign in as operator")
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "tr[data-org='acme']")))
    fill("corridor", corridor)
    submit("Approve KYC")
    wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "ACTIVE"))
    shot("operator")

    # Quote first (the breakdown), then pay; the payout reaches SETTLED.
    go(f"#/corridors/{corridor}")
    heading("Corridor to BRL")
    fill("amount", "25")
    submit("Get quote")
    dest = text_of("#dest-amount")
    assert dest.endswith("BRL"), dest
    quote_text = text_of("#quote")
    for word in ("Platform fee", "Rail fee", "All fees", "Rate"):
        assert word in quote_text, quote_text
    shot("corridor-quote")
    # The payout comes from the payout wallet: the form names it and will not take another.
    from_field = d.find_element(By.NAME, "fromAddress")
    assert from_field.get_attribute("value").startswith("0x"), from_field.get_attribute("value")
    assert from_field.get_attribute("readonly") is not None
    fill("name", "Ana Souza")
    fill("bankName", "Banco Teste")
    fill("accountNumber", "0001-23456-7")
    submit("Confirm payout of 25.000000 USDC")
    heading("Payout")
    WebDriverWait(d, 30).until(EC.text_to_be_present_in_element((By.ID, "payout-status"), "SETTLED"))
    page_text = d.find_element(By.TAG_NAME, "main").text
    assert "Funded on chain" in page_text and "24.875000 USDC" in page_text, page_text
    seen["timeline"] = [li.text for li in d.find_elements(By.CSS_SELECTOR, ".timeline li")]
    assert len(seen["timeline"]) >= 2, seen["timeline"]
    shot("payout")

    # A payout the provider holds with a request for information: it waits in COMPLIANCE_HOLD
    # with the questions until the seller answers them here; a wrong answer is refused with the
    # field named; the right one moves the payout on to SETTLED.
    go(f"#/corridors/{corridor}")
    heading("Corridor to BRL")
    fill("amount", "10")
    submit("Get quote")
    text_of("#dest-amount")
    fill("name", "Sandbox Rfi")
    fill("bankName", "Banco Teste")
    fill("accountNumber", "0001-23456-7")
    submit("Confirm payout of 10.000000 USDC")
    heading("Payout")
    WebDriverWait(d, 30).until(EC.text_to_be_present_in_element((By.ID, "rfi-status"), "INFORMATION_REQUIRED"))
    assert "COMPLIANCE_HOLD" in text_of("#payout-status")
    assert unlabelled() == [], unlabelled()
    fill("ORIGINATOR_DATE_OF_FORMATION", "31/01/2020")
    fill("SOURCE_OF_FUNDS", "API sales")
    submit("Send answer")
    refused = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, ".form-errors .error")))
    assert "VALIDATION_ERROR" in refused.text and "ORIGINATOR_DATE_OF_FORMATION" in refused.text, refused.text
    shot("payout-rfi")
    fill("ORIGINATOR_DATE_OF_FORMATION", "2020-01-31")
    submit("Send answer")
    WebDriverWait(d, 30).until(EC.text_to_be_present_in_element((By.ID, "payout-status"), "SETTLED"))
    assert "APPROVED" in text_of("#rfi-status")

    # A payment channel: a route offering batch-settlement, paid twice over one deposit.
    req = urllib.request.Request(f"{BASE}/api/routes", method="POST", data=json.dumps({
        "path": "/search", "priceUSD": "0.001", "targetUrl": f"{os.environ['UPSTREAM']}/search",
        "network": "base-sepolia", "schemes": ["exact", "batch-settlement"]}).encode(),
        headers={"Authorization": f"Bearer {os.environ['ORG_KEY']}", "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()
    for _ in range(2):
        paid = subprocess.run(
            [os.environ["PAYGATE_BIN"], "pay", f"{BASE}/gateway/acme/search", "--channel", "--deposit-usd", "0.01"],
            env=dict(os.environ, PAYGATE_PAYER_KEY=os.environ["PAYER_KEY"]), capture_output=True, text=True, timeout=120)
        assert paid.returncode == 0, paid.stdout + paid.stderr
    go("#/channels")
    heading("Payment channels")
    assert unlabelled() == [], unlabelled()
    row = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "tr[data-channel]")))
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    assert cells[1:9] == ["open", "0.01", "0.002", "0", "0.002", "0", "0.01", "2"], cells
    submit("Claim now")
    wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "1 channel(s) claimed."))
    row = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "tr[data-channel]")))
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    assert cells[4:6] == ["0.002", "0"], cells
    row.find_element(By.XPATH, ".//button[normalize-space()='Refund']").click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "Refunded $0.008"))
    row = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "tr[data-channel]")))
    seen["channel"] = [td.text for td in row.find_elements(By.TAG_NAME, "td")][1:9]
    assert seen["channel"][5:7] == ["0.008", "0.002"], seen["channel"]
    assert "null" not in d.find_element(By.CSS_SELECTOR, "main").text, "a placeholder leaked into the page"
    shot("channels")

    # An access window: a route sold by the hour, paid once; the payer's window is listed.
    req = urllib.request.Request(f"{BASE}/api/routes", method="POST", data=json.dumps({
        "path": "/hourly", "priceUSD": "0.01", "targetUrl": f"{os.environ['UPSTREAM']}/hourly",
        "network": "base-sepolia", "accessWindowSeconds": 3600, "accessWindowCalls": 5}).encode(),
        headers={"Authorization": f"Bearer {os.environ['ORG_KEY']}", "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()
    paid = subprocess.run([sys.executable, os.environ["PAY_SCRIPT"], f"{BASE}/gateway/acme/hourly", os.environ["PAYER_KEY"]],
                          capture_output=True, text=True, timeout=120)
    assert paid.returncode == 0, paid.stdout + paid.stderr
    payer = json.loads(paid.stdout.strip().splitlines()[-1])["paymentResponse"]["payer"].lower()
    go("#/windows")
    heading("Access windows")
    assert unlabelled() == [], unlabelled()
    row = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "tr[data-window]")))
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    assert cells[0] == payer and cells[1] == "/hourly" and cells[4:6] == ["0", "5"], cells
    fill("payer", "0x" + "ab" * 20)
    submit("Show")
    wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, "main"), "This payer has no active access window."))
    fill("payer", payer.upper().replace("0X", "0x"))
    submit("Show")
    row = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "tr[data-window]")))
    seen["window"] = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    shot("windows")

    # Webhooks: an endpoint added in the form (its secret shown once), a route created through
    # the API reaches it as route.changed, its delivery log shows it delivered, and a replay queues it again.
    go("#/webhooks")
    heading("Webhooks")
    fill("url", f"{os.environ['UPSTREAM']}/hooks")
    for box in d.find_elements(By.CSS_SELECTOR, "input[name=events]"):
        if box.get_attribute("value") != "route.changed" and box.is_selected():
            box.click()
    submit("Add endpoint")
    secret = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "[data-secret]"))).get_attribute("data-secret")
    assert secret.startswith("whsec_"), secret
    req = urllib.request.Request(
        f"{BASE}/api/routes", method="POST", data=json.dumps({
            "path": "/hooked", "priceUSD": "0.01", "targetUrl": f"{os.environ['UPSTREAM']}/hooked",
            "network": "base-sepolia"}).encode(),
        headers={"Authorization": f"Bearer {os.environ['ORG_KEY']}", "Content-Type": "application/json"})
    urllib.request.urlopen(req).read()
    d.find_element(By.CSS_SELECTOR, "tr[data-endpoint] a").click()
    heading("Webhook deliveries")
    for _ in range(60):
        rows = d.find_elements(By.XPATH, "//tr[@data-delivery][td/span[normalize-space()='DELIVERED']]")
        if rows:
            break
        time.sleep(0.5)
        d.refresh()
        heading("Webhook deliveries")
    assert rows, d.find_element(By.CSS_SELECTOR, "main").text
    seen["webhook"] = "DELIVERED"
    submit_replay = wait.until(EC.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Replay']")))
    submit_replay.click()
    wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "Queued again."))
    shot("webhooks")

    # API keys: a new one is shown once.
    # An escrowed (auth-capture) route with a refund window, paid by the official npm client;
    # the payment refunded in part from its page: the refund listed, the refunded total shown.
    req = urllib.request.Request(f"{BASE}/api/routes", method="POST", data=json.dumps({
        "path": "/escrowed", "priceUSD": "0.01", "targetUrl": f"{os.environ['UPSTREAM']}/escrowed",
        "network": "base-sepolia", "schemes": ["auth-capture"], "refundWindowSeconds": 3600}).encode(),
        headers={"Authorization": f"Bearer {os.environ['ORG_KEY']}", "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()
    paid = subprocess.run(["node", os.environ["NODE_PAY_SCRIPT"], json.dumps({
        "url": f"{BASE}/gateway/acme/escrowed", "key": os.environ["NODE_PAYER_KEY"],
        "rpc": os.environ["RPC"], "calls": 1})], capture_output=True, text=True, timeout=120)
    assert paid.returncode == 0, paid.stdout + paid.stderr
    assert json.loads(paid.stdout.strip().splitlines()[-1])["results"][0]["status"] == 200, paid.stdout
    req = urllib.request.Request(f"{BASE}/api/payments?limit=1",
                                 headers={"Authorization": f"Bearer {os.environ['ORG_KEY']}"})
    escrowed = json.loads(urllib.request.urlopen(req, timeout=30).read())["payments"][0]["id"]
    go(f"#/payments/{escrowed}")
    heading("Payment")
    amount = wait.until(EC.visibility_of_element_located((By.NAME, "amount")))
    amount.send_keys("0.004")
    submit("Refund to payer")
    wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "Refunded 0.004000 USDC"))
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "tr[data-refund]")))
    assert "0.004000 USDC" in d.find_element(By.TAG_NAME, "main").text
    seen["refund"] = "0.004000"
    shot("payment-refund")
    # The overview counts the refund against revenue (counted within the aggregator's drain).
    refunded = ""
    for _ in range(20):
        go("#/overview")
        heading("Overview")
        refunded = text_of("[data-tile='refunded'] .v")
        if refunded == "0.004000 USDC":
            break
        time.sleep(0.25)
    seen["refundedTile"] = refunded

    go("#/keys")
    heading("API keys")
    submit("Create key")
    created = text_of("#created-key")
    assert created.startswith("pgk_"), created
    shot("keys")

    # A read-only key, made in the form: it drives the overview and the ledger, and a change
    # (creating a key) is refused with the role it needs.
    Select(wait.until(EC.visibility_of_element_located((By.NAME, "role")))).select_by_value("read")
    submit("Create key")
    read_key = new_text_of("#created-key", created)
    row = wait.until(EC.presence_of_element_located((By.XPATH, "//tr[td/span[normalize-space()='read']]")))
    assert "never" in row.text, row.text
    d.find_element(By.ID, "sign-out").click()
    key_field = wait.until(EC.visibility_of_element_located((By.NAME, "apiKey")))
    key_field.send_keys(read_key, Keys.ENTER)
    heading("Overview")
    go("#/payments")
    heading("Payments")
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "tr[data-payment]")))
    go("#/keys")
    heading("API keys")
    submit("Create key")
    wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, "main"), "role is read"))
    seen["readKey"] = "refused"
    shot("keys-read-only")

    # The audit log lists the changes made above, the read-only key's refused one not among them.
    go("#/audit")
    heading("Audit log")
    wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "tr[data-audit]")))
    actions = [r.get_attribute("data-audit") for r in d.find_elements(By.CSS_SELECTOR, "tr[data-audit]")]
    for expected in ["route.created", "key.created", "corridor.created", "payout.created", "org.created"]:
        assert expected in actions, actions
    assert actions[0] == "key.created", actions
    shot("audit")

    # The ledger check: every decided payment above read back on chain, none differing.
    go("#/ledger-check")
    heading("Ledger check")
    submit("Compare with the chain")
    verdict = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "p[data-ledger-check]")))
    assert verdict.get_attribute("data-ledger-check") == "agree", verdict.text
    seen["ledgerCheck"] = verdict.text
    shot("ledger-check")
    print(json.dumps(seen))
finally:
    d.quit()
