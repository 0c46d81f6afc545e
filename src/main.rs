//! The `trellis` command: the library's [`trellis::App`] with the reference patterns.

#[global_allocator]
static ALLOCATOR: trellis::Allocator = trellis::Allocator;

fn main() -> std::process::ExitCode {
    trellis::App::new("trellis").run()
}
