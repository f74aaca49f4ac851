//! `agentgate schema`: the TaskSpec's JSON Schema, for editors and CI linters.

use std::process::ExitCode;

pub fn print() -> ExitCode {
    let schema = crate::taskspec::json_schema();
    println!(
        "{}",
        serde_json::to_string_pretty(&schema).expect("schemas serialize")
    );
    ExitCode::SUCCESS
}
