//! `wasi:http` for plugins, deny by default.
//!
//! Whole-world toolchains (jco) import `wasi:http/types` whether the code sends a
//! request or not, so `types` is linked for every plugin and grants nothing by itself:
//! without `outgoing-handler` nothing it builds can leave the host. Importing
//! `wasi:http/outgoing-handler` is the capability `http` ([`unit`]); a plugin importing
//! it without the grant is refused at load (`runtime::grants`). The hooks below also refuse every
//! request from a store whose plugin was not granted `http`, so a mistake elsewhere
//! still fails closed.
//!
//! A grant of `http` is a grant to reach the hosts in its allowlist, nothing more: a
//! request to any other host fails with `HTTP-request-denied`, and a `denied` event of
//! the run says which host was refused and the grants.yaml line that would allow it. Every request, allowed or not, runs
//! under the host's timeouts (connect, first byte, between bytes; a plugin may ask for
//! shorter ones, never longer) and a cap on the response body, so a slow or endless
//! server cannot hold or flood a run. The allowlist is the capability's operator scope
//! ([`scope`]).

mod scope;
pub(crate) mod unit;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use wasmtime::component::Linker;
use wasmtime_wasi_http::{
    Error, RequestOptions, WasiBody, WasiHttp, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks,
};

use crate::capabilities::scope::{ScopeDenial, Scopes};
use crate::capabilities::{PluginStore, PluginView, StoreSetup, StoreState};
use crate::record::EventSink;

/// Links `wasi:http/types` and `wasi:http/outgoing-handler`, reached through the
/// store's [`HttpStore`] (wasmtime-wasi-http's own `add_only_http_to_linker_async`
/// would need the store data itself to be a `WasiHttpView`, which would make the
/// runtime's store name this capability).
fn add_to_linker<T: PluginStore>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    use wasmtime_wasi_http::p2::bindings::{http, LinkOptions};
    http::outgoing_handler::add_to_linker::<T, WasiHttp>(linker, http_view::<T>)?;
    http::types::add_to_linker::<T, WasiHttp>(
        linker,
        &LinkOptions::default().into(),
        http_view::<T>,
    )
}

/// What the `http` capability keeps per store: the `wasi:http` context, and the
/// policy its hooks apply to every request.
pub(crate) struct HttpStore {
    ctx: WasiHttpCtx,
    policy: HttpPolicy,
}

impl HttpStore {
    fn new(store: &StoreSetup<'_>) -> HttpStore {
        HttpStore {
            ctx: WasiHttpCtx::new(),
            policy: HttpPolicy::new(
                store.plugin.clone(),
                store.scopes,
                store.http,
                store.run.events.clone(),
            ),
        }
    }
}

impl StoreState for HttpStore {}

/// The store as `wasi:http` sees it: the table, and the [`HttpStore`] as context and
/// hooks. Every store has one ([`StoreStates::new`](crate::capabilities::StoreStates::new)
/// makes every capability's state, and this one's always), so its absence is a bug of
/// the host, not something a plugin can cause.
fn http_view<T: PluginStore>(store: &mut T) -> WasiHttpCtxView<'_> {
    let PluginView { table, states, .. } = store.plugin_view();
    let http = states
        .get_mut::<HttpStore>()
        .expect("every plugin store has the http capability's state (StoreStates::new)");
    WasiHttpCtxView {
        ctx: &mut http.ctx,
        table,
        hooks: &mut http.policy,
    }
}

/// The bounds every outgoing request runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Establishing the connection (TCP and TLS).
    pub connect: Duration,
    /// From sending the request to the response's headers.
    pub first_byte: Duration,
    /// Between two frames of the response body (a streaming API pings well within it).
    pub between_bytes: Duration,
    /// The response body, in bytes; past it the body ends with an error.
    pub max_response_bytes: u64,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            connect: Duration::from_secs(30),
            first_byte: Duration::from_secs(300),
            between_bytes: Duration::from_secs(300),
            max_response_bytes: 64 << 20,
        }
    }
}

impl HttpLimits {
    /// The plugin's request options, each bounded by the host's limit.
    fn bound(&self, asked: Option<RequestOptions>) -> RequestOptions {
        let asked = asked.unwrap_or_default();
        let min =
            |asked: Option<Duration>, limit: Duration| Some(asked.map_or(limit, |a| a.min(limit)));
        RequestOptions {
            connect_timeout: min(asked.connect_timeout, self.connect),
            first_byte_timeout: min(asked.first_byte_timeout, self.first_byte),
            between_bytes_timeout: min(asked.between_bytes_timeout, self.between_bytes),
        }
    }
}

/// Why an allowlist entry is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("http host {entry:?}: {reason}; expected a host name or IP address with an optional port, e.g. api.anthropic.com or 127.0.0.1:8080")]
pub struct BadHost {
    /// The entry as the operator or TaskSpec wrote it.
    pub entry: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// One allowed host: a name (lowercase) and, when given, a port. Without a port only
/// the scheme's default port (443, or 80 for `http`) is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AllowedHost {
    host: String,
    port: Option<u16>,
}

impl AllowedHost {
    fn parse(entry: &str) -> Result<AllowedHost, BadHost> {
        let bad = |reason| BadHost {
            entry: entry.to_string(),
            reason,
        };
        if entry.contains("://") || entry.contains('/') {
            return Err(bad("a host, not a URL"));
        }
        if entry.contains('@') {
            return Err(bad("user information is not allowed"));
        }
        if entry.contains('*') {
            return Err(bad("name one host exactly (no wildcards)"));
        }
        let authority: http::uri::Authority = entry.parse().map_err(|_| bad("not a host"))?;
        if authority.host().is_empty() {
            return Err(bad("not a host"));
        }
        Ok(AllowedHost {
            host: authority.host().to_ascii_lowercase(),
            port: authority.port_u16(),
        })
    }
}

/// The hosts one plugin may send requests to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostAllowlist {
    hosts: Vec<AllowedHost>,
    /// The entries as written, for messages.
    entries: Vec<String>,
}

impl HostAllowlist {
    /// Parses allowlist entries (`host` or `host:port`).
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<HostAllowlist, BadHost> {
        let hosts = entries
            .iter()
            .map(|e| AllowedHost::parse(e.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(HostAllowlist {
            hosts,
            entries: entries.iter().map(|e| e.as_ref().to_string()).collect(),
        })
    }

    /// The allowlist holding only the host (and explicit port) of `url`.
    pub fn of_url(url: &str) -> Result<HostAllowlist, BadHost> {
        let bad = |reason| BadHost {
            entry: url.to_string(),
            reason,
        };
        let uri: http::Uri = url.parse().map_err(|_| bad("not a URL"))?;
        match uri.scheme_str() {
            Some("http" | "https") => {}
            _ => return Err(bad("the URL must start with https:// or http://")),
        }
        let authority = uri
            .authority()
            .ok_or_else(|| bad("the URL names no host"))?;
        HostAllowlist::parse(&[authority.as_str()])
    }

    /// The entries as written.
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// Whether a request to `uri` may leave.
    pub fn allows(&self, uri: &http::Uri) -> bool {
        let Some(host) = uri.host() else {
            return false;
        };
        let default_port = if uri.scheme() == Some(&http::uri::Scheme::HTTP) {
            80
        } else {
            443
        };
        let port = uri.port_u16().unwrap_or(default_port);
        self.hosts.iter().any(|allowed| {
            allowed.host.eq_ignore_ascii_case(host) && allowed.port.unwrap_or(default_port) == port
        })
    }
}

/// Per-store HTTP policy: requests are sent only when the plugin was granted `http`,
/// and only to the hosts of its grant.
pub(crate) struct HttpPolicy {
    plugin: Arc<str>,
    /// `None`: not granted `http` at all.
    allowlist: Option<HostAllowlist>,
    limits: HttpLimits,
    /// Where a refusal is reported, naming the host.
    events: Arc<EventSink>,
}

impl HttpPolicy {
    /// The policy of a store of `plugin` with `scopes`: without an `http` scope (not
    /// granted, or refused) nothing is sent.
    pub(crate) fn new(
        plugin: Arc<str>,
        scopes: &Scopes,
        limits: HttpLimits,
        events: Arc<EventSink>,
    ) -> HttpPolicy {
        HttpPolicy {
            plugin,
            allowlist: scopes.of::<HostAllowlist>().cloned(),
            limits,
            events,
        }
    }

    /// Why a request to `uri` may not leave, if it may not: a refusal in the words of
    /// every other scope, naming the host and the grants.yaml line that would allow it.
    fn refusal(&self, uri: &http::Uri) -> Option<ScopeDenial> {
        let shown = uri
            .authority()
            .map_or_else(|| "(no host)".to_string(), |a| a.to_string());
        let allowed = match &self.allowlist {
            None => "http not granted".to_string(),
            Some(list) if list.allows(uri) => return None,
            Some(list) if list.entries().is_empty() => "http.hosts: none".to_string(),
            Some(list) => format!("http.hosts: {}", list.entries().join(", ")),
        };
        Some(ScopeDenial::new(
            &self.plugin,
            "http",
            "http.request",
            format!("host {shown:?}"),
            allowed,
            format!("hosts: [{shown:?}]"),
        ))
    }
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
        if let Some(denial) = self.refusal(request.uri()) {
            denial.record(&self.events);
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        let options = self.limits.bound(options);
        let max_bytes = self.limits.max_response_bytes;
        Box::new(async move {
            let (response, io) =
                wasmtime_wasi_http::default_send_request(request, Some(options)).await?;
            Ok((
                response.map(|body| capped(body.boxed_unsync(), max_bytes)),
                Box::new(io) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}

/// `body`, ending with `HTTP-response-body-size` once more than `max_bytes` arrived.
fn capped(body: WasiBody, max_bytes: u64) -> WasiBody {
    let limit = usize::try_from(max_bytes).unwrap_or(usize::MAX);
    http_body_util::Limited::new(body, limit)
        .map_err(move |error| match error.downcast::<Error>() {
            Ok(inner) => *inner,
            Err(_) => Error::HttpResponseBodySize(Some(max_bytes)),
        })
        .boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(text: &str) -> http::Uri {
        text.parse().unwrap()
    }

    #[test]
    fn an_allowlist_matches_host_and_port() {
        let list = HostAllowlist::parse(&["api.anthropic.com", "127.0.0.1:8080"]).unwrap();
        assert!(list.allows(&uri("https://api.anthropic.com/v1/messages")));
        assert!(list.allows(&uri("https://API.Anthropic.com:443/v1")));
        assert!(list.allows(&uri("http://127.0.0.1:8080/")));
        // Without a port in the entry, the scheme's default port.
        assert!(list.allows(&uri("http://api.anthropic.com/")));
        assert!(!list.allows(&uri("http://api.anthropic.com:443/")));
        // Another port, another host, a sub- or super-domain: refused.
        assert!(!list.allows(&uri("https://api.anthropic.com:8443/")));
        assert!(!list.allows(&uri("http://127.0.0.1:8081/")));
        assert!(!list.allows(&uri("https://evil.api.anthropic.com/")));
        assert!(!list.allows(&uri("https://anthropic.com/")));
        assert!(!HostAllowlist::default().allows(&uri("https://api.anthropic.com/")));
    }

    #[test]
    fn an_allowlist_entry_that_is_not_a_host_says_what_is_expected() {
        for entry in ["https://x.com", "x.com/v1", "*.x.com", "user@x.com", ""] {
            let text = HostAllowlist::parse(&[entry]).unwrap_err().to_string();
            assert!(text.contains(&format!("{entry:?}")), "{text}");
            assert!(text.contains("e.g. api.anthropic.com"), "{text}");
        }
    }

    #[test]
    fn the_allowlist_of_a_base_url_is_its_host_and_port() {
        let list = HostAllowlist::of_url("http://127.0.0.1:4000/anthropic").unwrap();
        assert_eq!(list.entries(), ["127.0.0.1:4000"]);
        assert!(list.allows(&uri("http://127.0.0.1:4000/v1/messages")));
        let list = HostAllowlist::of_url("https://api.anthropic.com").unwrap();
        assert!(list.allows(&uri("https://api.anthropic.com/v1/messages")));
        assert!(HostAllowlist::of_url("api.anthropic.com").is_err());
        assert!(HostAllowlist::of_url("ftp://x.com").is_err());
    }

    #[test]
    fn a_plugin_may_shorten_the_timeouts_never_lengthen_them() {
        let limits = HttpLimits {
            connect: Duration::from_secs(5),
            first_byte: Duration::from_secs(10),
            between_bytes: Duration::from_secs(20),
            max_response_bytes: 1,
        };
        let bound = limits.bound(Some(RequestOptions {
            connect_timeout: Some(Duration::from_secs(1)),
            first_byte_timeout: Some(Duration::from_secs(600)),
            between_bytes_timeout: None,
        }));
        assert_eq!(bound.connect_timeout, Some(Duration::from_secs(1)));
        assert_eq!(bound.first_byte_timeout, Some(Duration::from_secs(10)));
        assert_eq!(bound.between_bytes_timeout, Some(Duration::from_secs(20)));
    }
}
