//! A DNS server on 127.0.0.1 answering A and AAAA queries from a fixed table, for
//! the egress proxy's resolver.
//!
//! Why: the proxy resolves names itself, and the tests must decide what a name resolves
//! to (loopback, the metadata address, a private address) without a real resolver.
//! Built on hickory-proto's message codec; it runs on a thread of its own and records
//! every name asked, so a test can prove a name was (or was not) looked up. Names not
//! in the table get NXDOMAIN.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{Name, RData, Record, RecordType};

pub struct TestDns {
    address: SocketAddr,
    queries: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl TestDns {
    /// Serves `records` (name, address), lower-case names without a trailing dot.
    pub fn start(records: &[(&str, IpAddr)]) -> TestDns {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let address = socket.local_addr().unwrap();
        let mut table: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for (name, ip) in records {
            table.entry(name.to_string()).or_default().push(*ip);
        }
        let queries = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, stopped) = (queries.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while !stopped.load(Ordering::Relaxed) {
                let Ok((n, from)) = socket.recv_from(&mut buffer) else {
                    continue;
                };
                if let Some(answer) = answer(&buffer[..n], &table, &seen) {
                    let _ = socket.send_to(&answer, from);
                }
            }
        });
        TestDns {
            address,
            queries,
            stop,
        }
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The questions so far, `name TYPE` (`api.test A`), names without the trailing dot.
    pub fn queries(&self) -> Vec<String> {
        self.queries.lock().unwrap().clone()
    }
}

impl Drop for TestDns {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn answer(
    query: &[u8],
    table: &HashMap<String, Vec<IpAddr>>,
    seen: &Mutex<Vec<String>>,
) -> Option<Vec<u8>> {
    let query = Message::from_vec(query).ok()?;
    let question = query.queries.first()?.clone();
    let name = question
        .name()
        .to_ascii()
        .trim_end_matches('.')
        .to_lowercase();
    seen.lock()
        .unwrap()
        .push(format!("{name} {}", question.query_type()));
    let mut response = Message::response(query.metadata.id, query.metadata.op_code);
    response.metadata.message_type = MessageType::Response;
    response.metadata.recursion_desired = query.metadata.recursion_desired;
    response.metadata.recursion_available = true;
    response.metadata.authoritative = true;
    response.add_query(question.clone());
    match table.get(&name) {
        None => response.metadata.response_code = ResponseCode::NXDomain,
        Some(addresses) => {
            let owner = Name::from_ascii(format!("{name}.")).ok()?;
            for ip in addresses {
                let rdata = match (ip, question.query_type()) {
                    (IpAddr::V4(v4), RecordType::A) => RData::A(A(*v4)),
                    (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(*v6)),
                    _ => continue,
                };
                response.add_answer(Record::from_rdata(owner.clone(), 60, rdata));
            }
        }
    }
    response.to_vec().ok()
}
