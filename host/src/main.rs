fn main() -> std::process::ExitCode {
    agentgate::cli::main()
}
