//! Helpers shared by bloatd-cc's integration tests, the one Rust library
//! of the kernel tests: namespaces, the lab topology (scripts/lab/topo.sh),
//! sockets, the kernel's view of them (TCP_INFO, ss), BPF object ids,
//! processes, and waiting (wait.rs, std only: the TUI's terminal test
//! includes it too).
//!
//! These tests load BPF into the running kernel and need root.
#![allow(dead_code)]

mod wait;
#[allow(unused_imports)] // each test binary uses its part
pub use wait::{wait_for, wait_for_every};

use std::fs::{self, File};
use std::io::{self, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use libbpf_rs::libbpf_sys;

/// Registration is global: tests that register must not overlap.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A network namespace made with `ip netns add`, deleted on drop (also when
/// the test fails).
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(name: &str) -> Netns {
        assert!(name.starts_with("bc"), "test namespaces are named bc*");
        let _ = Command::new("ip")
            .args(["netns", "del", name])
            .stderr(std::process::Stdio::null())
            .status();
        run("ip", &["netns", "add", name]);
        run("ip", &["-n", name, "link", "set", "lo", "up"]);
        Netns {
            name: name.to_string(),
        }
    }

    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// Run `f` on a thread that lives in this namespace (sockets it opens,
    /// sysctls it reads and processes it spawns are in the namespace).
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        in_netns(&self.path(), f)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

pub fn in_netns<T: Send + 'static>(path: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let f_ns = File::open(path).unwrap_or_else(|e| panic!("open {path}: {e}"));
    std::thread::spawn(move || {
        // SAFETY: setns on an nsfs fd; affects only this thread.
        let r = unsafe { libc::setns(f_ns.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", io::Error::last_os_error());
        f()
    })
    .join()
    .unwrap()
}

pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The global tcp_allowed_congestion_control, extended for the duration of
/// a test and restored on drop.
pub struct AllowedGuard {
    saved: String,
}

const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

impl AllowedGuard {
    pub fn allow(name: &str) -> AllowedGuard {
        let saved = fs::read_to_string(ALLOWED).unwrap().trim().to_string();
        write_sysctl(ALLOWED, &format!("{saved} {name}"));
        AllowedGuard { saved }
    }
}

impl Drop for AllowedGuard {
    fn drop(&mut self) {
        let _ = fs::OpenOptions::new()
            .write(true)
            .open(ALLOWED)
            .and_then(|mut f| f.write_all(self.saved.as_bytes()));
    }
}

pub fn write_sysctl(path: &str, value: &str) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .unwrap_or_else(|e| panic!("write {value} to {path}: {e}"));
}

pub fn available() -> Vec<String> {
    bloatd_cc::kernel_available().unwrap()
}

fn setsockopt_bytes(fd: RawFd, level: i32, opt: i32, val: &[u8]) -> io::Result<()> {
    // SAFETY: val is a valid buffer of val.len() bytes.
    let r = unsafe { libc::setsockopt(fd, level, opt, val.as_ptr().cast(), val.len() as u32) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn getsockopt_bytes(fd: RawFd, level: i32, opt: i32, buf: &mut [u8]) -> io::Result<usize> {
    let mut len = buf.len() as u32;
    // SAFETY: buf is a valid buffer of len bytes.
    let r = unsafe { libc::getsockopt(fd, level, opt, buf.as_mut_ptr().cast(), &mut len) };
    if r == 0 {
        Ok(len as usize)
    } else {
        Err(io::Error::last_os_error())
    }
}

pub fn set_cc(s: &impl AsRawFd, name: &str) -> io::Result<()> {
    setsockopt_bytes(
        s.as_raw_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_CONGESTION,
        name.as_bytes(),
    )
}

pub fn get_cc(s: &impl AsRawFd) -> String {
    let mut buf = [0u8; 16];
    let n = getsockopt_bytes(
        s.as_raw_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_CONGESTION,
        &mut buf,
    )
    .unwrap();
    String::from_utf8_lossy(&buf[..n])
        .trim_end_matches('\0')
        .to_string()
}

/// The socket's cookie; asking for it makes the kernel create it, which is
/// what lets bloatd's congestion controls export the socket's state.
pub fn cookie(s: &impl AsRawFd) -> u64 {
    let mut buf = [0u8; 8];
    getsockopt_bytes(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_COOKIE, &mut buf).unwrap();
    u64::from_ne_bytes(buf)
}

/// The part of the kernel's struct tcp_info (include/uapi/linux/tcp.h) the
/// tests read.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpInfo {
    pub state: u8,
    pub ca_state: u8,
    pub retransmits: u8,
    pub probes: u8,
    pub backoff: u8,
    pub options: u8,
    pub wscale: u8,
    pub flags: u8,
    pub rto: u32,
    pub ato: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
    pub unacked: u32,
    pub sacked: u32,
    pub lost: u32,
    pub retrans: u32,
    pub fackets: u32,
    pub last_data_sent: u32,
    pub last_ack_sent: u32,
    pub last_data_recv: u32,
    pub last_ack_recv: u32,
    pub pmtu: u32,
    pub rcv_ssthresh: u32,
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub snd_ssthresh: u32,
    pub snd_cwnd: u32,
    pub advmss: u32,
    pub reordering: u32,
    pub rcv_rtt: u32,
    pub rcv_space: u32,
    pub total_retrans: u32,
    pub pacing_rate: u64,
    pub max_pacing_rate: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub segs_out: u32,
    pub segs_in: u32,
    pub notsent_bytes: u32,
    pub min_rtt_us: u32,
    pub data_segs_in: u32,
    pub data_segs_out: u32,
    pub delivery_rate: u64,
}

/// TCP_INFO of a socket: the kernel's own view, the tests' oracle.
pub fn tcp_info(fd: RawFd) -> TcpInfo {
    let mut info = TcpInfo::default();
    let mut len = std::mem::size_of::<TcpInfo>() as u32;
    // SAFETY: info is a plain struct of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut TcpInfo).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0, "TCP_INFO: {}", io::Error::last_os_error());
    assert_eq!(
        len as usize,
        std::mem::size_of::<TcpInfo>(),
        "kernel tcp_info shorter than expected"
    );
    info
}

/// Ids of the live struct_ops maps named `name` (registered or not).
pub fn struct_ops_ids(name: &str) -> Vec<u32> {
    let mut ids = Vec::new();
    let mut id = 0u32;
    // SAFETY: plain bpf(2) wrappers with valid out pointers.
    unsafe {
        while libbpf_sys::bpf_map_get_next_id(id, &mut id) == 0 {
            let fd = libbpf_sys::bpf_map_get_fd_by_id(id);
            if fd < 0 {
                continue;
            }
            let mut info = libbpf_sys::bpf_map_info::default();
            let mut len = std::mem::size_of_val(&info) as u32;
            if libbpf_sys::bpf_map_get_info_by_fd(fd, &mut info, &mut len) == 0
                && info.type_ == libbpf_sys::BPF_MAP_TYPE_STRUCT_OPS
            {
                let n: Vec<u8> = info
                    .name
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8)
                    .collect();
                if n == name.as_bytes() {
                    ids.push(id);
                }
            }
            libc::close(fd);
        }
    }
    ids
}

/// A connected loopback pair (client, server side) in the calling thread's
/// namespace, the client using congestion control `cc`.
pub fn loopback_pair(cc: &str) -> (TcpStream, TcpStream) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let sock = socket2_connect(addr, cc);
    let (srv, _) = l.accept().unwrap();
    (sock, srv)
}

/// Connect to `addr` with congestion control `cc` set before the SYN.
pub fn socket2_connect(addr: std::net::SocketAddr, cc: &str) -> TcpStream {
    let domain = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket(2); the fd is owned by the TcpStream below.
    let fd = unsafe { libc::socket(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0);
    // SAFETY: fd is a fresh socket we own.
    let s = unsafe { <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    set_cc(&s, cc).unwrap_or_else(|e| panic!("setsockopt TCP_CONGESTION {cc}: {e}"));
    let (sa, len) = sockaddr(addr);
    // SAFETY: sa is a valid sockaddr of len bytes.
    let r = unsafe { libc::connect(fd, (&sa as *const libc::sockaddr_storage).cast(), len) };
    assert_eq!(r, 0, "connect {addr}: {}", io::Error::last_os_error());
    s
}

fn sockaddr(addr: std::net::SocketAddr) -> (libc::sockaddr_storage, u32) {
    // SAFETY: zeroed sockaddr_storage is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        std::net::SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as u16,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            (ss, std::mem::size_of::<libc::sockaddr_in>() as u32)
        }
        std::net::SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as u16,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            (ss, std::mem::size_of::<libc::sockaddr_in6>() as u32)
        }
    }
}

/// The `ss -tin` entry (both lines) of the socket with local port `port`.
pub fn ss_entry(sport: u16) -> String {
    run(
        "ss",
        &[
            "-tinH",
            "state",
            "established",
            "sport",
            "=",
            &format!(":{sport}"),
        ],
    )
}

/// Register `algos`, waiting (up to 2 minutes) while another bloatd holds
/// one of the names: registration is global, and a developer's daemon or
/// lab run on the same machine would otherwise fail these tests.
pub fn register(algos: &[bloatd_cc::Algo], opts: &bloatd_cc::Options) -> bloatd_cc::Registration {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut warned = false;
    loop {
        match bloatd_cc::Registration::register(algos, opts) {
            Ok(r) => return r,
            Err(bloatd_cc::Error::AlreadyRegistered { name }) if Instant::now() < deadline => {
                if !warned {
                    eprintln!("{name} is registered by someone else (another bloatd?): waiting up to 2 min");
                    warned = true;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("register {algos:?}: {e}"),
        }
    }
}

/// A child process killed (SIGKILL) and reaped on drop, also when the test
/// fails.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lab topology (`scripts/lab/topo.sh up NAME ARGS...`: sender, router
/// with the bottleneck, receiver), removed on drop (also when a check
/// fails).
pub struct Lab {
    pub name: String,
}

impl Lab {
    pub fn up(name: &str, args: &[&str]) -> Lab {
        let out = Command::new(topo())
            .args(["up", name])
            .args(args)
            .output()
            .expect("running scripts/lab/topo.sh");
        assert!(
            out.status.success(),
            "topo.sh up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Lab {
            name: name.to_string(),
        }
    }

    /// The path of one of its network namespaces: snd, rtr or rcv.
    pub fn ns(&self, role: &str) -> String {
        format!("/run/netns/{}-{role}", self.name)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new(topo()).args(["down", &self.name]).status();
    }
}

fn topo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/lab/topo.sh")
}
