//! The `trellis` command: the library's [`trellis::App`] with the reference patterns.

fn main() -> std::process::ExitCode {
    trellis::App::new("trellis").run()
}
