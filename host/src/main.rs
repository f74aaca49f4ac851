use agentgate::capabilities::process::landlock;

fn main() -> std::process::ExitCode {
    let mut args = std::env::args_os();
    // Inside a sealed sandbox this executable runs first, as the init that raises the
    // Landlock fence and then execs the command.
    if args.nth(1).is_some_and(|arg| arg == landlock::INIT_ARG) {
        landlock::run_init(args.collect());
    }
    if let Ok(executable) = std::env::current_exe() {
        landlock::register_init(executable);
    }
    agentgate::cli::main()
}
