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
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("bloatd is not running (no API socket at {0})")]
    NotRunning(PathBuf),
    #[error("permission denied on {}: {}", .0.display(), permission_hint(.0))]
    Permission(PathBuf),
    #[error("talking to bloatd at {path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("bloatd answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("bloatd sent a malformed answer: {0}")]
    Malformed(String),
}

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

    fn connect(&self) -> Result<UnixStream, ClientError> {
        UnixStream::connect(&self.path).map_err(|err| match err.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                ClientError::NotRunning(self.path.clone())
            }
            std::io::ErrorKind::PermissionDenied => ClientError::Permission(self.path.clone()),
            _ => ClientError::Io {
                path: self.path.clone(),
                err,
            },
        })
    }

    fn request(
        &self,
        method: &str,
        target: &str,
        body: Option<&str>,
    ) -> Result<String, ClientError> {
        let io = |err| ClientError::Io {
            path: self.path.clone(),
            err,
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
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).map_err(io)?;
        let text = String::from_utf8_lossy(&raw);
        let (head, rest) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| ClientError::Malformed("no header end".into()))?;
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ClientError::Malformed(head.lines().next().unwrap_or("").into()))?;
        let chunked = head.lines().any(|l| {
            let l = l.to_ascii_lowercase();
            l.starts_with("transfer-encoding:") && l.contains("chunked")
        });
        let body = if chunked {
            dechunk(rest)?
        } else {
            rest.to_string()
        };
        if status != 200 {
            return Err(ClientError::Status {
                status,
                body: body.trim().to_string(),
            });
        }
        Ok(body)
    }

    /// `GET route?query`, the answer's body as it came.
    fn get_text(&self, route: &str, query: &impl Serialize) -> Result<String, ClientError> {
        let query = serde_urlencoded::to_string(query)
            .map_err(|e| ClientError::Malformed(e.to_string()))?;
        let target = if query.is_empty() {
            route.to_string()
        } else {
            format!("{route}?{query}")
        };
        self.request("GET", &target, None)
    }

    fn get<T: DeserializeOwned>(
        &self,
        route: &str,
        query: &impl Serialize,
    ) -> Result<T, ClientError> {
        decode(&self.get_text(route, query)?)
    }

    fn post<T: DeserializeOwned>(
        &self,
        route: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        let body =
            serde_json::to_string(body).map_err(|e| ClientError::Malformed(e.to_string()))?;
        decode(&self.request("POST", route, Some(&body))?)
    }

    pub fn status(&self) -> Result<Status, ClientError> {
        self.get(route::STATUS, &())
    }

    /// Established sockets (all states with `all`), read from the kernel now.
    pub fn sockets(&self, all: bool) -> Result<Vec<Socket>, ClientError> {
        self.get(route::SOCKETS, &SocketsQuery { all: all.into() })
    }

    /// The same, as the daemon's JSON text.
    pub fn sockets_json(&self, all: bool) -> Result<String, ClientError> {
        self.get_text(route::SOCKETS, &SocketsQuery { all: all.into() })
    }

    /// What `bloatd top` draws (`fresh`: read from the kernel now).
    pub fn snapshot(&self, req: &SnapshotRequest, fresh: bool) -> Result<Snapshot, ClientError> {
        self.get(route::SNAPSHOT, &SnapshotQuery::new(req, fresh))
    }

    /// Sockets grouped by peer (or by prefix).
    pub fn paths(&self, prefix: bool) -> Result<Vec<NetPath>, ClientError> {
        self.get(
            route::PATHS,
            &PathsQuery {
                prefix: prefix.into(),
            },
        )
    }

    /// Sockets grouped by service.
    pub fn services(&self) -> Result<Vec<ServiceView>, ClientError> {
        self.get(route::SERVICES, &())
    }

    pub fn floors(&self) -> Result<Floors, ClientError> {
        self.get(route::FLOORS, &())
    }

    pub fn cc(&self) -> Result<CcInfo, ClientError> {
        self.get(route::CC, &())
    }

    /// Set the host's default congestion control (restored at stop).
    pub fn set_default_cc(&self, name: &str) -> Result<DefaultResp, ClientError> {
        self.post(
            route::CC_DEFAULT,
            &DefaultReq {
                name: name.to_string(),
            },
        )
    }

    /// The policy's rules, DRWA and counters.
    pub fn policy(&self) -> Result<PolicyInfo, ClientError> {
        self.get(route::POLICY, &())
    }

    /// DRWA on or off, live.
    pub fn set_drwa(&self, on: bool) -> Result<DrwaReq, ClientError> {
        self.post(route::POLICY_DRWA, &DrwaReq { on })
    }

    /// A rule on or off, live.
    pub fn set_rule_enabled(&self, name: &str, enabled: bool) -> Result<RuleReq, ClientError> {
        self.post(
            &route::POLICY_RULE.replace("{name}", name),
            &RuleReq { enabled },
        )
    }
}

fn decode<T: DeserializeOwned>(body: &str) -> Result<T, ClientError> {
    serde_json::from_str(body).map_err(|e| ClientError::Malformed(e.to_string()))
}

/// Who may use the socket, from the group of its run directory (which a
/// user outside that group cannot even look into).
fn permission_hint(socket: &Path) -> String {
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

fn dechunk(mut s: &str) -> Result<String, ClientError> {
    let mut out = String::new();
    loop {
        let (size, rest) = s
            .split_once("\r\n")
            .ok_or_else(|| ClientError::Malformed("bad chunk".into()))?;
        let n = usize::from_str_radix(size.trim(), 16)
            .map_err(|_| ClientError::Malformed("bad chunk size".into()))?;
        if n == 0 {
            return Ok(out);
        }
        if rest.len() < n {
            return Err(ClientError::Malformed("short chunk".into()));
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dechunk_joins_chunks() {
        assert_eq!(
            super::dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(),
            "abcde"
        );
    }
}
