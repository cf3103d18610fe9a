//! `netprobe`: the packets of the node tests (`tests/node/`). Run inside a pod's network
//! namespace (`nsenter --net=/proc/<pid>/ns/net netprobe ...`), it sends real traffic from
//! the pod's address and says what came back, telling a refused connection (RST or ICMP
//! unreachable) from a timeout (no answer: dropped). Standard library only.
//!
//! ```text
//! netprobe tcp ADDR:PORT TIMEOUT_MS                  -> open|refused|unreachable|timeout|error <ms> [detail]
//! netprobe dns udp|tcp ADDR:PORT NAME TIMEOUT_MS     -> reply <ms> rcode=<n> a=<ip,...>  |  refused|timeout|... <ms>
//! netprobe watch tcp|udp ADDR:PORT TIMEOUT_MS EVERY_MS FOR_MS
//!     one line per probe: <start, µs since the epoch> <result> <ms>; a probe (a TCP
//!     connection, or a DNS query over UDP) starts every EVERY_MS whether or not the
//!     previous one has finished (a dropped SYN does not hide the moment the path opens
//!     again); stops after FOR_MS or when stdout closes.
//! ```
//! Standard library only, so that it also builds as a static binary that runs in a pod's own
//! container, probing from the pod's first instant (n8).
//! The exit code is 0 whatever the result (the result is the output), 2 on a usage error.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let line = match words.as_slice() {
        ["tcp", addr, timeout] => {
            let (result, ms, detail) = tcp(&parse_addr(addr), parse_ms(timeout));
            format!("{result} {ms:.1} {detail}")
        }
        ["dns", transport, addr, name, timeout] => {
            let addr = parse_addr(addr);
            let timeout = parse_ms(timeout);
            let started = Instant::now();
            let outcome = match *transport {
                "udp" => dns_udp(&addr, name, timeout),
                "tcp" => dns_tcp(&addr, name, timeout),
                other => usage(&format!("unknown transport {other}")),
            };
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            match outcome {
                Ok(answer) => format!(
                    "reply {ms:.1} rcode={} a={}",
                    answer.rcode,
                    answer.addresses.join(",")
                ),
                Err(error) => format!("{} {ms:.1} {error}", classify(&error)),
            }
        }
        [
            "watch",
            transport @ ("tcp" | "udp"),
            addr,
            timeout,
            every,
            duration,
        ] => {
            watch(
                *transport == "udp",
                parse_addr(addr),
                parse_ms(timeout),
                parse_ms(every),
                parse_ms(duration),
            );
            return;
        }
        _ => usage("bad arguments"),
    };
    println!("{}", line.trim_end());
}

fn usage(why: &str) -> ! {
    eprintln!(
        "netprobe: {why}\nusage: netprobe tcp ADDR:PORT TIMEOUT_MS | dns udp|tcp ADDR:PORT NAME TIMEOUT_MS | watch tcp|udp ADDR:PORT TIMEOUT_MS EVERY_MS FOR_MS"
    );
    std::process::exit(2)
}

fn parse_addr(text: &str) -> SocketAddr {
    text.parse()
        .unwrap_or_else(|_| usage(&format!("not an IP:port: {text}")))
}

fn parse_ms(text: &str) -> Duration {
    Duration::from_millis(
        text.parse()
            .unwrap_or_else(|_| usage(&format!("not milliseconds: {text}"))),
    )
}

/// What an I/O error says about the path: `refused` (RST, or ICMP port unreachable),
/// `unreachable` (ICMP host/net unreachable or prohibited), `timeout` (nothing came back).
fn classify(error: &io::Error) -> &'static str {
    match error.raw_os_error() {
        Some(111) => "refused",                    // ECONNREFUSED
        Some(113 | 101 | 13 | 1) => "unreachable", // EHOSTUNREACH, ENETUNREACH, EACCES, EPERM
        Some(110 | 11) => "timeout",               // ETIMEDOUT, EAGAIN
        _ => match error.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => "timeout",
            io::ErrorKind::ConnectionRefused => "refused",
            _ => "error",
        },
    }
}

fn tcp(addr: &SocketAddr, timeout: Duration) -> (&'static str, f64, String) {
    let started = Instant::now();
    let result = TcpStream::connect_timeout(addr, timeout);
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    match result {
        Ok(_) => ("open", ms, String::new()),
        Err(error) => (classify(&error), ms, error.to_string().replace(' ', "_")),
    }
}

/// One probe of `watch`: a TCP connection, or (`udp`) a DNS query over UDP.
fn watched_probe(udp: bool, addr: &SocketAddr, timeout: Duration) -> (&'static str, f64) {
    if !udp {
        let (result, ms, _) = tcp(addr, timeout);
        return (result, ms);
    }
    let started = Instant::now();
    let result = match dns_udp(addr, "probe.nsb.test", timeout) {
        Ok(_) => "reply",
        Err(error) => classify(&error),
    };
    (result, started.elapsed().as_secs_f64() * 1000.0)
}

fn watch(udp: bool, addr: SocketAddr, timeout: Duration, every: Duration, duration: Duration) {
    let (sender, receiver) = mpsc::channel::<String>();
    let writer = std::thread::spawn(move || {
        let stdout = io::stdout();
        for line in receiver {
            let mut out = stdout.lock();
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                std::process::exit(0); // the reader went away
            }
        }
    });
    let started = Instant::now();
    let mut next = started;
    while started.elapsed() < duration {
        let sender = sender.clone();
        std::thread::spawn(move || {
            let at = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_micros();
            let (result, ms) = watched_probe(udp, &addr, timeout);
            let _ = sender.send(format!("{at} {result} {ms:.1}"));
        });
        next += every;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    std::thread::sleep(timeout + Duration::from_millis(50));
    drop(sender);
    let _ = writer.join();
}

struct Answer {
    rcode: u8,
    addresses: Vec<String>,
}

fn query(name: &str, id: u16) -> Vec<u8> {
    let mut packet = Vec::with_capacity(64);
    packet.extend_from_slice(&id.to_be_bytes());
    packet.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]); // RD; 1 question
    for label in name.trim_end_matches('.').split('.') {
        packet.push(u8::try_from(label.len()).unwrap_or(63));
        packet.extend_from_slice(label.as_bytes());
    }
    packet.extend_from_slice(&[0, 0, 1, 0, 1]); // root; QTYPE A; QCLASS IN
    packet
}

fn query_id() -> u16 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    u16::try_from((nanos ^ std::process::id()) & 0xffff).unwrap_or(1)
}

fn dns_udp(addr: &SocketAddr, name: &str, timeout: Duration) -> io::Result<Answer> {
    let socket = UdpSocket::bind(if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })?;
    socket.connect(addr)?;
    socket.set_read_timeout(Some(timeout))?;
    let id = query_id();
    socket.send(&query(name, id))?;
    let mut buffer = [0u8; 1500];
    let deadline = Instant::now() + timeout;
    loop {
        let length = socket.recv(&mut buffer)?;
        if let Some(answer) = parse(&buffer[..length], id) {
            return Ok(answer);
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no matching reply"));
        }
    }
}

fn dns_tcp(addr: &SocketAddr, name: &str, timeout: Duration) -> io::Result<Answer> {
    let mut stream = TcpStream::connect_timeout(addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let id = query_id();
    let packet = query(name, id);
    let length = u16::try_from(packet.len()).unwrap_or(u16::MAX);
    let mut framed = length.to_be_bytes().to_vec();
    framed.extend_from_slice(&packet);
    stream.write_all(&framed)?;
    let mut prefix = [0u8; 2];
    stream.read_exact(&mut prefix)?;
    let mut reply = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
    stream.read_exact(&mut reply)?;
    parse(&reply, id).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad DNS reply"))
}

/// The reply's RCODE and every A record in it (answer, authority and additional sections:
/// CoreDNS's `whoami` answers in the additional section).
fn parse(reply: &[u8], id: u16) -> Option<Answer> {
    if reply.len() < 12 || u16::from_be_bytes([reply[0], reply[1]]) != id || reply[2] & 0x80 == 0 {
        return None;
    }
    let rcode = reply[3] & 0x0f;
    let count = |at: usize| usize::from(u16::from_be_bytes([reply[at], reply[at + 1]]));
    let (questions, records) = (count(4), count(6) + count(8) + count(10));
    let mut at = 12;
    for _ in 0..questions {
        at = skip_name(reply, at)? + 4;
    }
    let mut addresses = Vec::new();
    for _ in 0..records {
        at = skip_name(reply, at)?;
        let header = reply.get(at..at + 10)?;
        let kind = u16::from_be_bytes([header[0], header[1]]);
        let length = usize::from(u16::from_be_bytes([header[8], header[9]]));
        let data = reply.get(at + 10..at + 10 + length)?;
        if kind == 1 && length == 4 {
            addresses.push(format!("{}.{}.{}.{}", data[0], data[1], data[2], data[3]));
        }
        at += 10 + length;
    }
    Some(Answer { rcode, addresses })
}

fn skip_name(packet: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let length = *packet.get(at)?;
        if length == 0 {
            return Some(at + 1);
        }
        if length & 0xc0 == 0xc0 {
            return Some(at + 2);
        }
        at += 1 + usize::from(length);
    }
}
