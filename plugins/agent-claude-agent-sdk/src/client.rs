//! One HTTP request to the Messages API over `wasi:http/outgoing-handler`.
//!
//! The host decides where a request may go (the `http` grant's allowlist) and bounds
//! its timeouts and response size; this module sends, reads the status and
//! `retry-after`, and hands the body out chunk by chunk so the SSE parser sees data as
//! it arrives. Outside a component there is no `wasi:http`: `post` says so.

/// Where the Messages API is: from `ANTHROPIC_BASE_URL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub https: bool,
    pub authority: String,
    /// The base URL's path, without a trailing `/`.
    pub prefix: String,
}

impl Endpoint {
    pub fn parse(base_url: &str) -> Result<Endpoint, String> {
        let bad = |why: &str| {
            format!("ANTHROPIC_BASE_URL {base_url:?}: {why}; expected a URL such as https://api.anthropic.com")
        };
        let uri: http::Uri = base_url.parse().map_err(|_| bad("not a URL"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(bad("it must start with https:// or http://")),
        };
        let authority = uri.authority().ok_or_else(|| bad("it names no host"))?;
        if uri.query().is_some() {
            return Err(bad("it must not have a query"));
        }
        Ok(Endpoint {
            https,
            authority: authority.to_string(),
            prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }

    /// The path of the Messages endpoint.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    pub fn messages_path(&self) -> String {
        format!("{}/v1/messages", self.prefix)
    }
}

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub enum HttpError {
    /// The host's policy refused it.
    Denied(String),
    TimedOut(String),
    Failed(String),
}

#[cfg(target_arch = "wasm32")]
mod wasi {
    use super::{Endpoint, HttpError};
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{
        ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme,
    };
    use wasip2::io::streams::{InputStream, StreamError};

    /// A response whose body is read as it arrives.
    pub struct Response {
        pub status: u16,
        /// `retry-after`, in seconds, when the server sent one.
        pub retry_after_secs: Option<u64>,
        // Dropped in this order: the stream before the body it belongs to.
        stream: InputStream,
        _body: IncomingBody,
        authority: String,
    }

    fn error(code: &ErrorCode, authority: &str) -> HttpError {
        match code {
            ErrorCode::HttpRequestDenied => HttpError::Denied(format!(
                "the host denied the request to {authority}: it is not in the http allowlist of this driver's grant, which holds only the host of ANTHROPIC_BASE_URL as the host saw it; pass the same ANTHROPIC_BASE_URL to agentgate and with --secret-env ANTHROPIC_BASE_URL"
            )),
            ErrorCode::ConnectionTimeout
            | ErrorCode::ConnectionReadTimeout
            | ErrorCode::HttpResponseTimeout => {
                HttpError::TimedOut(format!("the request to {authority} timed out ({code:?})"))
            }
            ErrorCode::HttpResponseBodySize(limit) => HttpError::Failed(format!(
                "the response from {authority} exceeded the host's size cap ({} bytes)",
                limit.map_or("?".into(), |l| l.to_string())
            )),
            other => HttpError::Failed(format!("the request to {authority} failed: {other:?}")),
        }
    }

    /// POSTs `body` with `headers`.
    pub fn post(
        endpoint: &Endpoint,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, HttpError> {
        let authority = endpoint.authority.clone();
        let failed = |what: &str| HttpError::Failed(format!("building the request: {what}"));
        let fields: Vec<(String, Vec<u8>)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect();
        let fields = Fields::from_list(&fields).map_err(|e| failed(&format!("{e:?}")))?;
        let request = OutgoingRequest::new(fields);
        request
            .set_method(&Method::Post)
            .map_err(|_| failed("method"))?;
        let scheme = if endpoint.https {
            Scheme::Https
        } else {
            Scheme::Http
        };
        request
            .set_scheme(Some(&scheme))
            .map_err(|_| failed("scheme"))?;
        request
            .set_authority(Some(&authority))
            .map_err(|_| failed("authority"))?;
        request
            .set_path_with_query(Some(&endpoint.messages_path()))
            .map_err(|_| failed("path"))?;
        let outgoing = request.body().map_err(|_| failed("body"))?;
        let pending =
            outgoing_handler::handle(request, None).map_err(|code| error(&code, &authority))?;
        // When the host refuses the request, the body stream closes at once; the
        // refusal itself arrives as the response's error, so that is what is reported.
        let mut unsent = None;
        {
            let stream = outgoing.write().map_err(|_| failed("body stream"))?;
            for chunk in body.chunks(4096) {
                if let Err(e) = stream.blocking_write_and_flush(chunk) {
                    unsent = Some(format!("sending the request to {authority}: {e:?}"));
                    break;
                }
            }
        }
        let finished = OutgoingBody::finish(outgoing, None);
        pending.subscribe().block();
        let response = match pending.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(code))) => return Err(error(&code, &authority)),
            _ => return Err(HttpError::Failed(format!("no response from {authority}"))),
        };
        if let Some(unsent) = unsent {
            return Err(HttpError::Failed(unsent));
        }
        finished.map_err(|code| error(&code, &authority))?;
        let retry_after_secs = response
            .headers()
            .get("retry-after")
            .first()
            .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse().ok());
        let body = response.consume().map_err(|_| failed("response body"))?;
        let stream = body.stream().map_err(|_| failed("response stream"))?;
        Ok(Response {
            status: response.status(),
            retry_after_secs,
            stream,
            _body: body,
            authority,
        })
    }

    impl Response {
        /// The next chunk of the body; `None` at its end.
        pub fn read_chunk(&mut self) -> Option<Result<Vec<u8>, String>> {
            match self.stream.blocking_read(64 * 1024) {
                Ok(bytes) => Some(Ok(bytes)),
                Err(StreamError::Closed) => None,
                Err(StreamError::LastOperationFailed(e)) => {
                    let text = match wasip2::http::types::http_error_code(&e) {
                        Some(code) => match error(&code, &self.authority) {
                            HttpError::Denied(t)
                            | HttpError::TimedOut(t)
                            | HttpError::Failed(t) => t,
                        },
                        None => e.to_debug_string(),
                    };
                    Some(Err(text))
                }
            }
        }
    }
}

#[cfg(target_arch = "wasm32")]
pub use wasi::{post, Response};

/// Without `wasi:http` (a native build for unit tests) nothing can be sent.
#[cfg(not(target_arch = "wasm32"))]
pub struct Response {
    pub status: u16,
    pub retry_after_secs: Option<u64>,
}

#[cfg(not(target_arch = "wasm32"))]
impl Response {
    pub fn read_chunk(&mut self) -> Option<Result<Vec<u8>, String>> {
        None
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub fn post(_: &Endpoint, _: &[(&str, &str)], _: &[u8]) -> Result<Response, HttpError> {
    Err(HttpError::Failed(
        "claude-agent-sdk sends requests only as a component".into(),
    ))
}

impl Response {
    /// The whole body (of an error response), at most `cap` bytes of it.
    pub fn read_to_end(&mut self, cap: usize) -> Vec<u8> {
        let mut body = Vec::new();
        while let Some(Ok(chunk)) = self.read_chunk() {
            body.extend_from_slice(&chunk);
            if body.len() >= cap {
                body.truncate(cap);
                break;
            }
        }
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_become_endpoints() {
        let e = Endpoint::parse("https://api.anthropic.com").unwrap();
        assert_eq!((e.https, e.authority.as_str()), (true, "api.anthropic.com"));
        assert_eq!(e.messages_path(), "/v1/messages");
        let e = Endpoint::parse("http://127.0.0.1:4000/proxy/").unwrap();
        assert_eq!((e.https, e.authority.as_str()), (false, "127.0.0.1:4000"));
        assert_eq!(e.messages_path(), "/proxy/v1/messages");
        for bad in ["api.anthropic.com", "ftp://x", "https://x/?a=1"] {
            let err = Endpoint::parse(bad).unwrap_err();
            assert!(
                err.contains("ANTHROPIC_BASE_URL") && err.contains(bad),
                "{err}"
            );
        }
    }
}
