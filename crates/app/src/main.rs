//! The `berth` binary: a thin entry point into the `app` library.

fn main() -> std::process::ExitCode {
    app::main()
}
