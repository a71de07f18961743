//! Client side of the API: HTTP/1.1 over the daemon's Unix socket, just
//! enough for the CLI (scripts can use `curl --unix-socket`).

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
        Client { path: path.to_path_buf(), timeout: Duration::from_secs(10) }
    }

    fn connect(&self) -> Result<UnixStream, ClientError> {
        UnixStream::connect(&self.path).map_err(|err| match err.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                ClientError::NotRunning(self.path.clone())
            }
            std::io::ErrorKind::PermissionDenied => ClientError::Permission(self.path.clone()),
            _ => ClientError::Io { path: self.path.clone(), err },
        })
    }

    pub fn request(&self, method: &str, target: &str, body: Option<&str>) -> Result<String, ClientError> {
        let io = |err| ClientError::Io { path: self.path.clone(), err };
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
        let body = if chunked { dechunk(rest)? } else { rest.to_string() };
        if status != 200 {
            return Err(ClientError::Status { status, body: body.trim().to_string() });
        }
        Ok(body)
    }

    pub fn get<T: serde::de::DeserializeOwned>(&self, target: &str) -> Result<T, ClientError> {
        let body = self.request("GET", target, None)?;
        serde_json::from_str(&body).map_err(|e| ClientError::Malformed(e.to_string()))
    }
}

/// Who may use the socket, from the group of its run directory (which a
/// user outside that group cannot even look into).
fn permission_hint(socket: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let gid = socket.parent().and_then(|d| std::fs::metadata(d).ok()).map(|m| m.gid());
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
        assert_eq!(super::dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(), "abcde");
    }
}
