//! What loading a plugin costs, by the language it was written in: cold compile
//! (`Component::new`, what a first load pays), cached load (deserializing the compiled
//! artifact, what the host's compile cache makes every later load pay) and instantiate
//! (a fresh store and instance, what every run pays per plugin).
//!
//! Measured with wasmtime directly, configured like the host's engine, so the figures
//! are the engine's own costs without the CLI around them. Driven by
//! `bench/plugin_load.sh`, which builds the components; run by hand with
//! `cargo bench --workspace --bench plugin_load -- LABEL=FILE.wasm...`.
//!
//! It prints a table, then for `bench/run` one `RESULT` line per plugin and step: the
//! cold compile, the cached load against that cold compile, and instantiate.

use std::time::{Duration, Instant};

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Linker, ResourceTable, ResourceType};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

mod support;

/// Cold compiles per plugin (a Python or JavaScript one takes seconds).
const COMPILES: usize = 3;
/// Cached loads and instantiations per plugin.
const REPEATS: usize = 10;

struct State {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let start = Instant::now();
    let out = f();
    (start.elapsed(), out)
}

struct Row {
    label: String,
    size: usize,
    compile: Duration,
    load: Duration,
    instantiate: Option<Duration>,
}

fn measure(engine: &Engine, label: &str, path: &str) -> Row {
    let wasm = std::fs::read(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let compiles: Vec<_> = (0..COMPILES)
        .map(|_| time(|| Component::new(engine, &wasm).expect("compile")))
        .collect();
    let component = compiles.last().unwrap().1.clone();
    let compile = median(compiles.into_iter().map(|(d, _)| d).collect());

    let artifact = component.serialize().expect("serialize");
    let load = median(
        (0..REPEATS)
            .map(|_| {
                // SAFETY: the bytes were produced by `serialize` on this engine just above.
                time(|| unsafe { Component::deserialize(engine, &artifact) }.expect("load")).0
            })
            .collect(),
    );

    // WASI as the host links it; the agentgate host interfaces as traps, since
    // instantiating calls none of them (the host's own are async functions of its state).
    let mut linker = Linker::<State>::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("wasi");
    stub_host_interfaces(&mut linker, &component, engine).expect("stubs");
    let pre = match linker.instantiate_pre(&component) {
        Ok(pre) => pre,
        Err(e) => {
            eprintln!("plugin_load: {label}: cannot instantiate here: {e:#}");
            return Row {
                label: label.to_string(),
                size: wasm.len(),
                compile,
                load,
                instantiate: None,
            };
        }
    };
    // Async like the host's stores; a current-thread runtime adds no thread hops.
    let tokio = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio");
    let instantiate = median(
        (0..REPEATS)
            .map(|_| {
                let mut store = Store::new(
                    engine,
                    State {
                        wasi: WasiCtx::builder().build(),
                        table: ResourceTable::new(),
                    },
                );
                store.set_epoch_deadline(u64::MAX / 2);
                let (took, instance) = time(|| tokio.block_on(pre.instantiate_async(&mut store)));
                instance.expect("instantiate");
                took
            })
            .collect(),
    );
    let instantiate = Some(instantiate);
    Row {
        label: label.to_string(),
        size: wasm.len(),
        compile,
        load,
        instantiate,
    }
}

/// Defines every non-WASI import of `component` as traps. WASI is left to the linker,
/// which matches any 0.2.x import by semver; stubbing a WASI import of another patch
/// version (as `define_unknown_imports_as_traps` does) would give it resource types of
/// its own that clash with the real WASI ones.
fn stub_host_interfaces(
    linker: &mut Linker<State>,
    component: &Component,
    engine: &Engine,
) -> wasmtime::Result<()> {
    for (name, item) in component.component_type().imports(engine) {
        let ComponentItem::ComponentInstance(instance) = item.ty else {
            continue;
        };
        if name.starts_with("wasi:") {
            continue;
        }
        let mut stubs = linker.instance(name)?;
        for (export, item) in instance.exports(engine) {
            match item.ty {
                ComponentItem::ComponentFunc(_) => {
                    let full = format!("{name}#{export}");
                    stubs.func_new(export, move |_, _, _, _| {
                        wasmtime::bail!("{full} is a stub in this benchmark")
                    })?;
                }
                ComponentItem::Resource(_) => {
                    stubs.resource(export, ResourceType::host::<()>(), |_, _| Ok(()))?
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let plugins: Vec<(String, String)> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .map(|a| {
            let (label, path) = a
                .split_once('=')
                .unwrap_or_else(|| panic!("expected LABEL=FILE.wasm, got {a:?}"));
            (label.to_string(), path.to_string())
        })
        .collect();
    if plugins.is_empty() {
        eprintln!("plugin_load: no plugins given (LABEL=FILE.wasm ...); run bench/plugin_load.sh");
        return;
    }
    let engine = support::engine();
    let rows: Vec<Row> = plugins
        .iter()
        .map(|(label, path)| measure(&engine, label, path))
        .collect();
    let base = &rows[0];
    println!(
        "\nmedians; cold compile of {COMPILES}, cached load and instantiate of {REPEATS}; ratios against {}\n",
        base.label
    );
    println!("| plugin | component | cold compile | cached load | instantiate |");
    println!("| --- | --- | --- | --- | --- |");
    for r in &rows {
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        let instantiate = match (r.instantiate, base.instantiate) {
            (Some(i), Some(b)) => format!("{} ({:.0}×)", ms(i), ratio(i, b)),
            (Some(i), None) => ms(i),
            _ => "n/a".to_string(),
        };
        println!(
            "| {} | {:.1} MB | {} ({:.0}×) | {} ({:.0}×) | {instantiate} |",
            r.label,
            r.size as f64 / 1e6,
            ms(r.compile),
            ratio(r.compile, base.compile),
            ms(r.load),
            ratio(r.load, base.load),
        );
    }
    for r in &rows {
        let ms = |d: Duration| format!("{:.2}", d.as_secs_f64() * 1e3);
        let label = r.label.replace(char::is_whitespace, "-");
        println!(
            "RESULT plugin-{label}-engine-compile {} - ms -",
            ms(r.compile)
        );
        println!(
            "RESULT plugin-{label}-engine-cached-load {} {} ms x{:.3}",
            ms(r.load),
            ms(r.compile),
            r.load.as_secs_f64() / r.compile.as_secs_f64()
        );
        if let Some(instantiate) = r.instantiate {
            println!(
                "RESULT plugin-{label}-engine-instantiate {} - ms -",
                ms(instantiate)
            );
        }
    }
}
