//! `agentgate schema`: the TaskSpec's JSON Schema, for editors and CI linters, or with
//! `--result` the schema of `result.json`, for the programs that read run results.

use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct SchemaArgs {
    /// Print the schema of result.json instead of the TaskSpec's.
    #[arg(long)]
    result: bool,
}

pub fn print(args: &SchemaArgs) -> ExitCode {
    let schema = if args.result {
        crate::record::result_schema()
    } else {
        crate::taskspec::json_schema()
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&schema).expect("schemas serialize")
    );
    ExitCode::SUCCESS
}
