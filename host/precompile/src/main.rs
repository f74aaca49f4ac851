//! Compiles and describes the built-in plugins at build time, so that no run compiles
//! them: `host/build.rs` runs this tool and embeds what it writes.
//!
//! For each `NAME=PATH.wasm` it writes, into `OUT_DIR`:
//! - `NAME.cwasm`: the component precompiled by an engine made from the host's own
//!   configuration (`host/src/runtime/engine_config.rs`, included below);
//! - `NAME.json`: what `describe()` returned and what the component imports, in the
//!   host's description format (`host/src/runtime/description.rs`, included below);
//! - `NAME.sha256`: the hex sha256 of the wasm.
//!
//! and `engine-key`, which names the engine configuration. The host loads the
//! embedded code only when its own engine has the same key, and compiles (and caches)
//! the component otherwise, e.g. on a CPU without the features of the build machine.
//!
//! `describe()` runs with every import linked as a trap: a built-in describes itself
//! without calling the host.

#[path = "../../src/runtime/engine_config.rs"]
mod engine_config;

#[path = "../../src/runtime/description.rs"]
mod description;

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker, Val};
use wasmtime::{Engine, Store};

use description::Description;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let out_dir = PathBuf::from(
        args.next()
            .context("usage: agentgate-precompile OUT_DIR NAME=PATH.wasm...")?,
    );
    std::fs::create_dir_all(&out_dir)?;
    let engine = Engine::new(&engine_config::engine_config())?;
    std::fs::write(
        out_dir.join("engine-key"),
        engine_config::engine_key(&engine),
    )?;
    for arg in args {
        let arg = arg.into_string().map_err(|a| anyhow!("not UTF-8: {a:?}"))?;
        let (name, path) = arg
            .split_once('=')
            .with_context(|| format!("{arg}: expected NAME=PATH.wasm"))?;
        precompile(&engine, &out_dir, name, Path::new(path))
            .with_context(|| format!("built-in plugin {name} ({path})"))?;
    }
    Ok(())
}

fn precompile(engine: &Engine, out_dir: &Path, name: &str, path: &Path) -> anyhow::Result<()> {
    let wasm = std::fs::read(path)?;
    let compiled = engine.precompile_component(&wasm)?;
    // SAFETY: produced by this engine just now.
    let component = unsafe { Component::deserialize(engine, &compiled)? };
    let description = describe(engine, &component)?;
    std::fs::write(out_dir.join(format!("{name}.cwasm")), &compiled)?;
    std::fs::write(
        out_dir.join(format!("{name}.json")),
        serde_json::to_vec(&description)?,
    )?;
    std::fs::write(
        out_dir.join(format!("{name}.sha256")),
        hex::encode(Sha256::digest(&wasm)),
    )?;
    Ok(())
}

/// Instantiates `component` with traps for imports and calls its `describe()`.
fn describe(engine: &Engine, component: &Component) -> anyhow::Result<Description> {
    let ty = component.component_type();
    let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
    let mut linker = Linker::<()>::new(engine);
    linker.define_unknown_imports_as_traps(component)?;
    let mut store = Store::new(engine, ());
    // No epoch ticks here; without a deadline the first check would trap.
    store.set_epoch_deadline(u64::MAX);
    let instance = linker.instantiate(&mut store, component)?;
    let describe = instance
        .get_func(&mut store, "describe")
        .context("it exports no describe()")?;
    let mut results = [Val::Bool(false)];
    describe.call(&mut store, &[], &mut results)?;
    let Val::Record(fields) = &results[0] else {
        bail!(
            "describe() returned {:?}, not a plugin-info record",
            results[0]
        );
    };
    let field = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .with_context(|| format!("plugin-info has no {name}"))
    };
    let string = |name: &str| match field(name)? {
        Val::String(s) => Ok(s.clone()),
        other => bail!("plugin-info.{name} is {other:?}"),
    };
    let kind = match field("kind")? {
        Val::Enum(kind) => match kind.as_str() {
            "workspace-source" => "source",
            "sandbox-provider" => "provider",
            "agent-driver" => "driver",
            other => bail!("unknown plugin kind {other}"),
        },
        other => bail!("plugin-info.kind is {other:?}"),
    };
    let serves = match field("serves")? {
        Val::List(values) => values
            .iter()
            .map(|v| match v {
                Val::String(s) => Ok(s.clone()),
                other => bail!("plugin-info.serves holds {other:?}"),
            })
            .collect::<anyhow::Result<Vec<_>>>()?,
        other => bail!("plugin-info.serves is {other:?}"),
    };
    let options_schema = match field("options-schema")? {
        Val::Option(None) => None,
        Val::Option(Some(value)) => match &**value {
            Val::String(s) => Some(s.clone()),
            other => bail!("plugin-info.options-schema holds {other:?}"),
        },
        other => bail!("plugin-info.options-schema is {other:?}"),
    };
    Ok(Description {
        kind: kind.to_string(),
        name: string("name")?,
        version: string("version")?,
        serves,
        summary: string("summary")?,
        options_schema,
        imports,
    })
}
