//! The plugins compiled into this binary by `build.rs`.

include!(concat!(env!("OUT_DIR"), "/builtin_plugins.rs"));
