//! Who may act: the API socket's group watches; changing the kernel (the
//! host's default congestion control, DRWA, the policy's rules) takes root
//! or the admin group (`admin_group` in the config).
//!
//! The daemon asks the kernel who is on the other end of each connection
//! (SO_PEERCRED: uid, gid, pid; SO_PEERGROUPS: the supplementary groups),
//! as they were when the client connected. Not the group database: the
//! kernel's credentials are the ones that opened the socket, so a shell
//! that dropped a group (`setpriv --clear-groups`, `sg`) has dropped it here
//! too, and a group the database granted after login counts only from the
//! next login, as for every file the user opens.

use crate::error::Error;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// asm-generic/socket.h (x86, arm): the peer's supplementary groups.
const SO_PEERGROUPS: libc::c_int = 59;

/// The process on the other end of an API connection, as the kernel saw it
/// at connect(2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    /// 0 when the peer lives in a pid namespace the daemon cannot see.
    pub pid: i32,
    pub groups: Vec<u32>,
}

impl Peer {
    /// This process: the embedded dashboard acts as itself.
    pub fn me() -> Peer {
        // SAFETY: getuid, getgid, getpid have no preconditions.
        let (uid, gid, pid) = unsafe { (libc::getuid(), libc::getgid(), libc::getpid()) };
        Peer {
            uid,
            gid,
            pid,
            groups: Vec::new(),
        }
    }

    /// The credentials of the peer of a connected Unix socket.
    pub fn of(sock: &impl AsRawFd) -> std::io::Result<Peer> {
        let fd = sock.as_raw_fd();
        let mut cred = libc::ucred {
            pid: 0,
            uid: u32::MAX,
            gid: u32::MAX,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: getsockopt(2) into a ucred of the length given.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                &mut cred as *mut libc::ucred as *mut libc::c_void,
                &mut len,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Peer {
            uid: cred.uid,
            gid: cred.gid,
            pid: cred.pid,
            groups: peer_groups(fd)?,
        })
    }

    fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    fn describe(&self) -> String {
        let mut groups: Vec<u32> = std::iter::once(self.gid)
            .chain(self.groups.iter().copied())
            .collect();
        groups.sort_unstable();
        groups.dedup();
        let names: Vec<String> = groups
            .iter()
            .map(|&g| crate::rundir::group_name(g).unwrap_or_else(|| g.to_string()))
            .collect();
        format!("uid {} (groups {})", self.uid, names.join(","))
    }
}

/// SO_PEERGROUPS: the kernel says how much room it needs when the buffer
/// is too small (ERANGE), so ask twice at most.
fn peer_groups(fd: libc::c_int) -> std::io::Result<Vec<u32>> {
    let mut groups = vec![0u32; 64];
    loop {
        let mut len = (groups.len() * 4) as libc::socklen_t;
        // SAFETY: getsockopt(2) into a buffer of `len` bytes.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                SO_PEERGROUPS,
                groups.as_mut_ptr() as *mut libc::c_void,
                &mut len,
            )
        };
        let n = len as usize / 4;
        if rc == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) || n <= groups.len() {
            return Err(e);
        }
        groups.resize(n, 0);
    }
}

/// Who may change the kernel through the API: root, and the members of the
/// admin group if one is configured.
#[derive(Clone, Debug, Default)]
pub struct Authority {
    /// `admin_group` of the config: its name and gid.
    pub admin: Option<(String, u32)>,
}

impl Authority {
    /// Ok if `peer` may `what` (a phrase: "set the host's default congestion
    /// control"); else why not and what it would take, for the client to
    /// show as it is.
    pub fn may_act(&self, peer: &Peer, what: &str) -> crate::error::Result<()> {
        if peer.uid == 0 || self.admin.as_ref().is_some_and(|(_, g)| peer.in_group(*g)) {
            return Ok(());
        }
        let needs = match &self.admin {
            Some((name, _)) => format!(
                "root or group {name} (admin_group in the config): run it with sudo, or join {name}"
            ),
            None => "root: run it with sudo (or set admin_group in the config, e.g. \
                     /etc/bloatd/bloatd.toml, to a group allowed to act, and restart bloatd)"
                .into(),
        };
        Err(Error::MayNotAct {
            who: peer.describe(),
            what: what.to_string(),
            needs,
        })
    }
}

/// Who sent a request, and the authority that judges it, as a handler
/// argument (both put into the request by the server: server.rs).
pub struct Caller {
    /// None only if the kernel would not say (never seen).
    pub peer: Option<Peer>,
    authority: Arc<Authority>,
}

impl Caller {
    /// The caller's uid (u32::MAX if the kernel would not say).
    pub fn uid(&self) -> u32 {
        self.peer.as_ref().map_or(u32::MAX, |p| p.uid)
    }

    /// Ok if this caller may `what`; else why not.
    pub fn may_act(&self, what: &str) -> crate::error::Result<()> {
        match &self.peer {
            Some(p) => self.authority.may_act(p, what),
            None => Err(Error::NoCredentials(what.to_string())),
        }
    }

    /// The dashboard asking: one per process (engine/reader.rs keeps one detail
    /// socket watched for each).
    pub fn viewer(&self) -> Viewer {
        self.peer
            .as_ref()
            .map(|p| Viewer {
                uid: p.uid,
                pid: p.pid,
            })
            .unwrap_or_default()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Caller, Self::Rejection> {
        Ok(Caller {
            peer: parts.extensions.get::<Peer>().cloned(),
            authority: parts
                .extensions
                .get::<Arc<Authority>>()
                .cloned()
                .unwrap_or_default(),
        })
    }
}

/// A dashboard, by the process that asks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Viewer {
    pub uid: u32,
    pub pid: i32,
}

/// The proof a request may act, as a handler argument: extracting it
/// checks the connection's peer against the [`Authority`]; a refusal is
/// 403 with the reason.
pub struct Actor(pub Peer);

impl<S: Send + Sync> FromRequestParts<S> for Actor {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Actor, Response> {
        let Ok(caller) = Caller::from_request_parts(parts, state).await;
        match caller.may_act(&action(parts.uri.path())) {
            Ok(()) => Ok(Actor(caller.peer.expect("may_act needs a peer"))),
            Err(why) => Err((StatusCode::FORBIDDEN, why.to_string()).into_response()),
        }
    }
}

/// What a POST route does, in words, for a refusal.
fn action(path: &str) -> String {
    use bloatd_model::api::route;
    if path == route::CC_DEFAULT {
        "set the host's default congestion control".into()
    } else if path == route::POLICY_DRWA {
        "switch DRWA (every receiver of every namespace)".into()
    } else if path.starts_with(route::POLICY_RULE.trim_end_matches("{name}")) {
        "switch policy rules".into()
    } else {
        format!("POST {path}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrText;

    fn peer(uid: u32, gid: u32, groups: &[u32]) -> Peer {
        Peer {
            uid,
            gid,
            pid: 1,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn root_and_the_admin_group_act_the_api_group_watches() {
        let none = Authority::default();
        let admin = Authority {
            admin: Some(("bloatd-admin".into(), 990)),
        };
        assert!(none.may_act(&peer(0, 0, &[]), "x").is_ok());
        assert!(admin.may_act(&peer(0, 0, &[]), "x").is_ok());
        assert!(admin.may_act(&peer(1000, 1000, &[991, 990]), "x").is_ok());
        assert!(admin.may_act(&peer(1000, 990, &[]), "x").is_ok());
        let e = admin
            .may_act(&peer(1000, 1000, &[991]), "switch DRWA")
            .err_text();
        assert!(
            e.contains("uid 1000") && e.contains("not switch DRWA") && e.contains("bloatd-admin"),
            "{e}"
        );
        let e = none.may_act(&peer(1000, 990, &[990]), "x").err_text();
        assert!(e.contains("needs root") && e.contains("admin_group"), "{e}");
    }

    #[test]
    fn a_refusal_names_the_action() {
        assert_eq!(
            action("/v1/policy/drwa"),
            "switch DRWA (every receiver of every namespace)"
        );
        assert_eq!(action("/v1/policy/rules/bulk"), "switch policy rules");
        assert!(action("/v1/cc/default").contains("default congestion control"));
    }

    #[test]
    fn the_kernel_names_the_peer_of_a_unix_socket() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let p = Peer::of(&a).unwrap();
        let me = Peer::me();
        assert_eq!((p.uid, p.gid, p.pid), (me.uid, me.gid, me.pid));
    }
}
