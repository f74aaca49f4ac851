//! `wasi:http` for plugins, deny by default.
//!
//! Whole-world toolchains (jco) import `wasi:http/types` whether the code sends a
//! request or not, so `types` is linked for every plugin and grants nothing by itself:
//! without `outgoing-handler` nothing it builds can leave the host. Importing
//! `wasi:http/outgoing-handler` is the capability `http`; a plugin importing it without
//! the grant is refused at load (`runtime::grants`). The hooks below also refuse every
//! request from a store whose plugin was not granted `http`, so a mistake elsewhere
//! still fails closed.

use std::future::Future;

use wasmtime::component::Linker;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::PluginState;

/// Links `wasi:http/types` and `wasi:http/outgoing-handler`.
pub(crate) fn add_to_linker(linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)
}

/// Per-store HTTP policy: requests are sent only when the plugin was granted `http`.
pub(crate) struct HttpPolicy {
    pub(crate) granted: bool,
}

/// What `send_request` returns: the response and a future of the connection's end.
type Sending = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

impl WasiHttpHooks for HttpPolicy {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Sending {
        _ = fut;
        if !self.granted {
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}
