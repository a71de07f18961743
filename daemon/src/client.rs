//! Client side of the API: HTTP/1.1 over the daemon's Unix socket, one
//! method per route of the contract (bloatd_model::api), just enough for the CLI
//! and `bloatd top` (scripts can use `curl --unix-socket`).

use bloatd_model::api::{
    route, CcInfo, DefaultReq, DefaultResp, DrwaReq, Floors, PathsQuery, PolicyInfo, RuleReq,
    SnapshotQuery, SocketsQuery, Status,
};
use bloatd_model::{NetPath, ServiceView, Snapshot, SnapshotRequest, Socket};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};

pub struct Client {
    path: PathBuf,
    timeout: Duration,
}

impl Client {
    pub fn new(path: &Path) -> Client {
        Client {
            path: path.to_path_buf(),
            timeout: Duration::from_secs(10),
        }
    }

    fn connect(&self) -> Result<UnixStream> {
        UnixStream::connect(&self.path).map_err(|err| match err.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                Error::NotRunning(self.path.clone())
            }
            std::io::ErrorKind::PermissionDenied => Error::Permission(self.path.clone()),
            _ => Error::ClientIo {
                path: self.path.clone(),
                source: err,
            },
        })
    }

    fn request(&self, method: &str, target: &str, body: Option<&str>) -> Result<String> {
        let mut out = Vec::new();
        self.request_to(method, target, body, &mut out)?;
        String::from_utf8(out).map_err(|e| Error::MalformedBy(Box::new(e)))
    }

    /// The request, its answer's body written to `out` as it arrives (an
    /// answer with every socket of a big server is tens of megabytes).
    fn request_to(
        &self,
        method: &str,
        target: &str,
        body: Option<&str>,
        out: &mut dyn Write,
    ) -> Result<()> {
        let io = |err| Error::ClientIo {
            path: self.path.clone(),
            source: err,
        };
        let mut s = self.connect()?;
        s.set_read_timeout(Some(self.timeout)).map_err(io)?;
        let body = body.unwrap_or("");
        let req = format!(
            "{method} {target} HTTP/1.1\r\nHost: bloatd\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).map_err(io)?;
        let mut r = BufReader::with_capacity(1 << 16, s);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).map_err(io)? == 0 {
                return Err(Error::Malformed("no header end".into()));
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::Malformed(head.lines().next().unwrap_or("").into()))?;
        let chunked = head.lines().any(|l| {
            let l = l.to_ascii_lowercase();
            l.starts_with("transfer-encoding:") && l.contains("chunked")
        });
        if status != 200 {
            let mut body = Vec::new();
            copy_body(&mut r, chunked, &mut body)?;
            return Err(Error::Status {
                status,
                body: String::from_utf8_lossy(&body).trim().to_string(),
            });
        }
        copy_body(&mut r, chunked, out)
    }

    /// `GET route?query`, the answer's body as it came.
    fn get_text(&self, route: &str, query: &impl Serialize) -> Result<String> {
        self.request("GET", &target(route, query)?, None)
    }

    fn get<T: DeserializeOwned>(&self, route: &str, query: &impl Serialize) -> Result<T> {
        decode(&self.get_text(route, query)?)
    }

    fn post<T: DeserializeOwned>(&self, route: &str, body: &impl Serialize) -> Result<T> {
        let body = serde_json::to_string(body).map_err(|e| Error::MalformedBy(Box::new(e)))?;
        decode(&self.request("POST", route, Some(&body))?)
    }

    pub fn status(&self) -> Result<Status> {
        self.get(route::STATUS, &())
    }

    /// Established sockets (all states with `all`), read from the kernel now.
    pub fn sockets(&self, all: bool) -> Result<Vec<Socket>> {
        self.get(route::SOCKETS, &SocketsQuery { all: all.into() })
    }

    /// The same, the daemon's JSON text written to `out` as it comes.
    pub fn sockets_json_to(&self, all: bool, out: &mut dyn Write) -> Result<()> {
        let target = target(route::SOCKETS, &SocketsQuery { all: all.into() })?;
        self.request_to("GET", &target, None, out)
    }

    /// What `bloatd top` draws (`fresh`: read from the kernel now).
    pub fn snapshot(&self, req: &SnapshotRequest, fresh: bool) -> Result<Snapshot> {
        self.get(route::SNAPSHOT, &SnapshotQuery::new(req, fresh))
    }

    /// Sockets grouped by peer (or by prefix).
    pub fn paths(&self, prefix: bool) -> Result<Vec<NetPath>> {
        self.get(
            route::PATHS,
            &PathsQuery {
                prefix: prefix.into(),
            },
        )
    }

    /// Sockets grouped by service.
    pub fn services(&self) -> Result<Vec<ServiceView>> {
        self.get(route::SERVICES, &())
    }

    pub fn floors(&self) -> Result<Floors> {
        self.get(route::FLOORS, &())
    }

    pub fn cc(&self) -> Result<CcInfo> {
        self.get(route::CC, &())
    }

    /// Set the host's default congestion control (restored at stop).
    pub fn set_default_cc(&self, name: &str) -> Result<DefaultResp> {
        self.post(
            route::CC_DEFAULT,
            &DefaultReq {
                name: name.to_string(),
            },
        )
    }

    /// The policy's rules, DRWA and counters.
    pub fn policy(&self) -> Result<PolicyInfo> {
        self.get(route::POLICY, &())
    }

    /// DRWA on or off, live.
    pub fn set_drwa(&self, on: bool) -> Result<DrwaReq> {
        self.post(route::POLICY_DRWA, &DrwaReq { on })
    }

    /// The flight recorder's episodes.
    pub fn incidents(
        &self,
        q: &bloatd_model::journal::IncidentsQuery,
    ) -> Result<Vec<bloatd_model::journal::Episode>> {
        self.get(route::INCIDENTS, q)
    }

    /// One episode with its flows and series.
    pub fn incident(&self, id: u64) -> Result<bloatd_model::journal::EpisodeDetail> {
        self.get(&route::INCIDENT.replace("{id}", &id.to_string()), &())
    }

    /// The per-minute rows.
    pub fn history(
        &self,
        q: &bloatd_model::journal::HistoryQuery,
    ) -> Result<Vec<bloatd_model::journal::MinuteRow>> {
        self.get(route::HISTORY, q)
    }

    /// A rule on or off, live.
    pub fn set_rule_enabled(&self, name: &str, enabled: bool) -> Result<RuleReq> {
        self.post(
            &route::POLICY_RULE.replace("{name}", name),
            &RuleReq { enabled },
        )
    }
}

/// `route?query` (just `route` for an empty query).
fn target(route: &str, query: &impl Serialize) -> Result<String> {
    let query = serde_urlencoded::to_string(query).map_err(|e| Error::MalformedBy(Box::new(e)))?;
    Ok(if query.is_empty() {
        route.to_string()
    } else {
        format!("{route}?{query}")
    })
}

fn decode<T: DeserializeOwned>(body: &str) -> Result<T> {
    serde_json::from_str(body).map_err(|e| Error::MalformedBy(Box::new(e)))
}

/// Who may use the socket, from the group of its run directory (which a
/// user outside that group cannot even look into).
pub(crate) fn permission_hint(socket: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let gid = socket
        .parent()
        .and_then(|d| std::fs::metadata(d).ok())
        .map(|m| m.gid());
    match gid.filter(|&g| g != 0).and_then(crate::rundir::group_name) {
        Some(group) => format!(
            "run it with sudo, or join group {group} (`sudo usermod -aG {group} $USER`, then log in again)"
        ),
        None => "only root may use bloatd's API here: run it with sudo (or set api_group in \
                 /etc/bloatd/bloatd.toml, e.g. to the group bloatd, and restart bloatd)"
            .to_string(),
    }
}

/// The body after the head: as it is, or dechunked (what hyper sends when
/// the daemon streams an answer). The connection is closed after it.
fn copy_body(r: &mut impl BufRead, chunked: bool, out: &mut dyn Write) -> Result<()> {
    let io = |err: std::io::Error| {
        Error::MalformedBy(Box::new(Error::context("reading the answer", err)))
    };
    if !chunked {
        std::io::copy(r, out).map_err(io)?;
        return Ok(());
    }
    loop {
        let mut size = String::new();
        r.read_line(&mut size).map_err(io)?;
        let n = usize::from_str_radix(size.trim(), 16)
            .map_err(|_| Error::Malformed("bad chunk size".into()))?;
        if n == 0 {
            return Ok(());
        }
        let copied = std::io::copy(&mut r.take(n as u64), out).map_err(io)?;
        if copied < n as u64 {
            return Err(Error::Malformed("short chunk".into()));
        }
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf).map_err(io)?;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn chunks_are_joined() {
        let mut out = Vec::new();
        let mut r = &b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"[..];
        super::copy_body(&mut r, true, &mut out).unwrap();
        assert_eq!(out, b"abcde");
        let mut r = &b"3\r\nab"[..];
        assert!(
            super::copy_body(&mut r, true, &mut Vec::new()).is_err(),
            "short chunk"
        );
    }
}
