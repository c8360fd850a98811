//! The `paygate` binary: the command line of [`paygate::main`] (`src/lib.rs`).

/// With the `mimalloc` feature, mimalloc instead of glibc's malloc: faster on the hot path, which
/// allocates and frees per request, but it holds about twice the memory per idle connection
/// (BENCHMARKS.md, "The hot path under load"), so it is not the default.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    paygate::main()
}
