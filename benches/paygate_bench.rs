//! `paygate-bench`: the `paygate` binary with the benchmarks' free pass on (a request carrying
//! `x-paygate-bench-free` skips the payment step; `paygate_proxy::allow_bench_free_pass`). For
//! `make bench` only: it warns at start and must never be deployed.

fn main() -> std::process::ExitCode {
    paygate_proxy::allow_bench_free_pass();
    paygate::main()
}
