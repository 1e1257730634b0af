//! The `berth` binary: a thin entry point into the `berth` library.

fn main() -> std::process::ExitCode {
    berth::main()
}
