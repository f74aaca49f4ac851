//! What the egress proxy costs against a direct connection, in one run (driven by
//! `bench/egress_proxy.sh`).
//!
//! An upstream on 127.0.0.2 answers `GET /bytes/N` with N bytes. Each round times,
//! alternating so machine noise hits all alike:
//! - one small request per connection, direct over TCP, through the proxy as an
//!   absolute-form request, and through a CONNECT tunnel (the proxy's cost per
//!   connection: request parsing, policy, the tunnel's first-bytes check, the dial);
//! - a 100 MiB download, direct and through a CONNECT tunnel (the relay's throughput).
//!
//! It prints medians, differences and ratios. The proxy decides on an IP literal here, so
//! no DNS lookup is in the figures (a lookup costs what the resolver costs).

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentgate::egress::{Allowlist, OperatorCap, Policy, Proxy, Resolver};
use agentgate::record::EventSink;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

const BIG: usize = 100 * 1024 * 1024;

fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(300);
    let big_rounds: usize = std::env::var("BIG_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(rounds, big_rounds));
}

async fn run(rounds: usize, big_rounds: usize) {
    let upstream = TcpListener::bind("127.0.0.2:0").await.unwrap();
    let address = upstream.local_addr().unwrap();
    tokio::spawn(serve(upstream));

    let folder = tempfile::tempdir().unwrap();
    std::fs::set_permissions(folder.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let policy = Policy {
        allow: Allowlist::parse(&[address.to_string()]).unwrap(),
        cap: OperatorCap::default(),
        // Never asked: the destination is an IP literal.
        resolver: Resolver::nameserver("127.0.0.1:53".parse().unwrap()).unwrap(),
    };
    let socket = folder.path().join("proxy.sock");
    let proxy = Proxy::start(policy, &socket, Arc::new(EventSink::discard()))
        .await
        .unwrap();

    let (mut direct, mut absolute, mut tunnel) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        direct.push(time(fetch_direct(address, 1)).await);
        absolute.push(time(fetch_absolute(&socket, address, 1)).await);
        tunnel.push(time(fetch_tunnel(&socket, address, 1)).await);
    }
    let (mut big_direct, mut big_tunnel) = (Vec::new(), Vec::new());
    for _ in 0..big_rounds {
        big_direct.push(time(fetch_direct(address, BIG)).await);
        big_tunnel.push(time(fetch_tunnel(&socket, address, BIG)).await);
    }
    let report = proxy.stop().await;
    let relayed: u64 = report.destinations.iter().map(|d| d.bytes_down).sum();
    assert!(relayed >= (BIG * big_rounds) as u64, "{report:#?}");

    let (d, a, t) = (
        median(&mut direct),
        median(&mut absolute),
        median(&mut tunnel),
    );
    println!();
    println!("egress proxy: one 1-byte request per connection, median of {rounds}");
    println!();
    println!("| path | median | − direct | ratio |");
    println!("| --- | --- | --- | --- |");
    println!("| direct TCP | {} | | |", micros(d));
    for (label, m) in [
        ("proxy, absolute-form GET", a),
        ("proxy, CONNECT tunnel", t),
    ] {
        println!(
            "| {label} | {} | +{} | {:.2}× |",
            micros(m),
            micros(m.saturating_sub(d)),
            m.as_secs_f64() / d.as_secs_f64()
        );
    }
    let (bd, bt) = (median(&mut big_direct), median(&mut big_tunnel));
    let rate = |m: Duration| BIG as f64 / (1024.0 * 1024.0) / m.as_secs_f64();
    println!();
    println!("100 MiB download, median of {big_rounds}");
    println!();
    println!("| path | median | MiB/s | ratio |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| direct TCP | {:.3} s | {:.0} | |",
        bd.as_secs_f64(),
        rate(bd)
    );
    println!(
        "| proxy, CONNECT tunnel | {:.3} s | {:.0} | {:.2}× |",
        bt.as_secs_f64(),
        rate(bt),
        bt.as_secs_f64() / bd.as_secs_f64()
    );
}

async fn time(work: impl std::future::Future<Output = usize>) -> Duration {
    let start = Instant::now();
    let n = work.await;
    assert!(n > 0);
    start.elapsed()
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

async fn fetch_direct(address: SocketAddr, size: usize) -> usize {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.set_nodelay(true).unwrap();
    get(&mut stream, address, size).await
}

async fn fetch_absolute(socket: &Path, address: SocketAddr, size: usize) -> usize {
    let mut stream = UnixStream::connect(socket).await.unwrap();
    let request = format!("GET http://{address}/bytes/{size} HTTP/1.1\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    body_len(&mut stream, size).await
}

async fn fetch_tunnel(socket: &Path, address: SocketAddr, size: usize) -> usize {
    let mut stream = UnixStream::connect(socket).await.unwrap();
    let connect = format!("CONNECT {address} HTTP/1.1\r\n\r\n");
    stream.write_all(connect.as_bytes()).await.unwrap();
    let mut established = [0u8; 39];
    stream.read_exact(&mut established).await.unwrap();
    assert!(established.starts_with(b"HTTP/1.1 200 "));
    get(&mut stream, address, size).await
}

async fn get(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    address: SocketAddr,
    size: usize,
) -> usize {
    let request = format!("GET /bytes/{size} HTTP/1.1\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    body_len(stream, size).await
}

/// Reads the response to its end; returns its length after checking it holds `size`.
async fn body_len(stream: &mut (impl AsyncRead + Unpin), size: usize) -> usize {
    let mut buffer = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        let n = stream.read(&mut buffer).await.unwrap();
        if n == 0 {
            break;
        }
        total += n;
    }
    assert!(total > size, "short response: {total} bytes");
    total
}

async fn serve(listener: TcpListener) {
    loop {
        let (mut stream, _) = listener.accept().await.unwrap();
        stream.set_nodelay(true).unwrap();
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut chunk = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut chunk).await {
                    Ok(n) if n > 0 => head.extend_from_slice(&chunk[..n]),
                    _ => return,
                }
            }
            let text = String::from_utf8_lossy(&head);
            let size: usize = text
                .split_whitespace()
                .nth(1)
                .and_then(|path| path.strip_prefix("/bytes/"))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let response =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n");
            if stream.write_all(response.as_bytes()).await.is_err() {
                return;
            }
            let body = vec![b'x'; 256 * 1024];
            let mut left = size;
            while left > 0 {
                let n = left.min(body.len());
                if stream.write_all(&body[..n]).await.is_err() {
                    return;
                }
                left -= n;
            }
            let _ = stream.shutdown().await;
        });
    }
}
