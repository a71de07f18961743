//! A socket's cgroup v2 as a service name.
//!
//! The probes give each socket's cgroup as its kernfs id, which is the
//! inode number of the cgroup's directory under the cgroup2 mount. The
//! daemon learns id -> path by walking the hierarchy, only when a read
//! brings an id it has not seen (at most once per [`RESCAN_EVERY`]; an id a
//! walk did not find is not looked for again for [`MISS_KEPT`]), and
//! names the path: the systemd unit (`nginx.service`, `session-2.scope`;
//! a user's own as `user-1000/nginx.service`), a Kubernetes container
//! (`pod/UID/CONTAINER`) or pod (`pod/UID`), another container
//! (`container/ID`), else the path itself (`/bench/bulk`). A cgroup
//! removed before it was seen keeps its id (`cgroup:ID`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Walks of the hierarchy at most this often (a new id within it waits).
pub const RESCAN_EVERY: Duration = Duration::from_secs(1);
/// How long an id a walk did not find is believed gone. A socket outlives
/// the cgroup it was made in (the kernel keeps the dead cgroup for it), and
/// that id is never found again: without this, every read and scrape that
/// brings it would walk the whole hierarchy, once a second for as long as
/// the socket lives. A walk for another id looks for it again (and the
/// misses of one walk age together, so dead ids cost a walk per period).
pub const MISS_KEPT: Duration = Duration::from_secs(60);
/// Names (and misses) kept at most; beyond, the table starts over at the
/// next walk (a host that made and removed that many cgroups since the
/// last one).
const MAX_NAMES: usize = 65_536;
/// Characters of a container id shown (as `docker ps` does).
const SHORT_ID: usize = 12;

/// The name of the root cgroup, and of a socket whose cgroup is unknown.
pub const ROOT: &str = "/";
pub const UNKNOWN: &str = "-";

/// Cgroup ids and what they are called. A clone is cheap and keeps the
/// names of its moment (an answer streaming out while a walk learns more).
#[derive(Debug, Clone)]
pub struct ServiceNames {
    root: Option<PathBuf>,
    /// id -> service name, copied on write.
    known: Arc<HashMap<u64, String>>,
    /// id -> when a walk last did not find it, copied on write.
    missed: Arc<HashMap<u64, Instant>>,
    last_walk: Option<Instant>,
}

impl ServiceNames {
    /// Names under the cgroup v2 mount `root` (None: none is mounted, every
    /// id is named by its number).
    pub fn new(root: Option<PathBuf>) -> ServiceNames {
        ServiceNames {
            root,
            known: Arc::default(),
            missed: Arc::default(),
            last_walk: None,
        }
    }

    /// Make sure the ids of `ids` are named: walk the hierarchy once if one
    /// is new (neither named nor missed lately) and the last walk is old
    /// enough.
    pub fn learn(&mut self, ids: impl IntoIterator<Item = u64>) {
        let now = Instant::now();
        if self
            .last_walk
            .is_some_and(|t| now.duration_since(t) < RESCAN_EVERY)
        {
            return;
        }
        let unknown: HashSet<u64> = ids
            .into_iter()
            .filter(|&id| id != 0 && !self.known.contains_key(&id))
            .collect();
        let missed_lately = |id: &u64| {
            self.missed
                .get(id)
                .is_some_and(|t| now.duration_since(*t) < MISS_KEPT)
        };
        if unknown.iter().all(missed_lately) {
            return;
        }
        self.last_walk = Some(now);
        let Some(root) = self.root.clone() else {
            return;
        };
        let known = Arc::make_mut(&mut self.known);
        if known.len() > MAX_NAMES {
            known.clear();
        }
        for (id, path) in walk(&root) {
            // Whoever may create a cgroup names it (a delegated subtree):
            // escapes in a name must not reach a terminal.
            known
                .entry(id)
                .or_insert_with(|| crate::text::printable(&service_of_path(&path)));
        }
        let missed = Arc::make_mut(&mut self.missed);
        missed.retain(|_, t| now.duration_since(*t) < MISS_KEPT);
        if missed.len() > MAX_NAMES {
            missed.clear();
        }
        missed.extend(
            unknown
                .into_iter()
                .filter(|id| !known.contains_key(id))
                .map(|id| (id, now)),
        );
    }

    /// The service of cgroup `id`.
    pub fn name(&self, id: u64) -> String {
        match (id, self.known.get(&id)) {
            (0, _) => UNKNOWN.into(),
            (_, Some(name)) => name.clone(),
            (id, None) => format!("cgroup:{id}"),
        }
    }
}

/// Every cgroup below `root` (itself included) as (id, path below the
/// root with a leading '/'). A directory that goes away while walked is
/// skipped.
fn walk(root: &Path) -> Vec<(u64, String)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&dir) else {
            continue;
        };
        out.push((
            meta.ino(),
            if rel.is_empty() {
                ROOT.into()
            } else {
                rel.clone()
            },
        ));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let name = e.file_name().to_string_lossy().into_owned();
                stack.push((e.path(), format!("{rel}/{name}")));
            }
        }
    }
    out
}

/// The Kubernetes pod UID a cgroup directory names: `pod<UID>`
/// (cgroupfs driver) or `kubepods-<qos>-pod<UID_with_underscores>.slice`
/// (systemd driver).
fn pod_uid(dir: &str) -> Option<String> {
    let s = dir.strip_suffix(".slice").unwrap_or(dir);
    let at = s.rfind("pod")?;
    if at > 0 && !s[..at].ends_with('-') {
        return None;
    }
    let uid = &s[at + 3..];
    (uid.len() >= 32
        && uid
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == '-' || c == '_'))
    .then(|| uid.replace('_', "-"))
}

/// The container id a cgroup directory names: a runtime's scope
/// (`cri-containerd-ID.scope`, `docker-ID.scope`, `crio-ID.scope`,
/// `libpod-ID.scope`) or the bare id (cgroupfs driver).
fn container_id(dir: &str) -> Option<&str> {
    let s = dir.strip_suffix(".scope").unwrap_or(dir);
    let id = ["cri-containerd-", "docker-", "crio-", "libpod-"]
        .iter()
        .find_map(|p| s.strip_prefix(p))
        .unwrap_or(s);
    (id.len() == 64 && id.chars().all(|c| c.is_ascii_hexdigit())).then_some(id)
}

/// A systemd unit's cgroup: a service or a scope.
fn is_unit(dir: &str) -> bool {
    dir.ends_with(".service") || dir.ends_with(".scope")
}

/// The uid whose systemd manager `user@UID.service` is.
fn user_manager(dir: &str) -> Option<&str> {
    let uid = dir.strip_prefix("user@")?.strip_suffix(".service")?;
    (!uid.is_empty() && uid.bytes().all(|b| b.is_ascii_digit())).then_some(uid)
}

/// The Kubernetes pod (and container) of a path, where the kubelet puts
/// them: a pod right under the top-level `kubepods` (guaranteed QoS) or
/// under its QoS class (burstable, besteffort), of either cgroup driver.
/// Only root makes a top-level cgroup, so a delegated one merely named
/// like the kubelet's is no pod.
fn pod_of<'a>(dirs: &[&'a str]) -> Option<(String, Option<&'a str>)> {
    if !matches!(dirs.first(), Some(&"kubepods" | &"kubepods.slice")) {
        return None;
    }
    let (i, uid) = (1..=2).find_map(|i| Some((i, pod_uid(dirs.get(i)?)?)))?;
    Some((uid, dirs.get(i + 1).and_then(|d| container_id(d))))
}

/// The unit a path is in: the outermost, as only the system's manager
/// makes units at the top and what a unit makes below itself (a delegated
/// subtree) is that unit's, whatever it is called. Below a user's manager
/// (`user@1000.service`) the user's units, named as the user's
/// (`user-1000/nginx.service`), not as a system service.
fn unit_of(dirs: &[&str]) -> Option<String> {
    let i = dirs.iter().position(|d| is_unit(d))?;
    let users = user_manager(dirs[i]).and_then(|uid| {
        let unit = dirs[i + 1..].iter().find(|d| is_unit(d))?;
        Some(format!("user-{uid}/{unit}"))
    });
    Some(users.unwrap_or_else(|| dirs[i].to_string()))
}

/// The service a cgroup path (below the mount, '/'-separated) names.
pub fn service_of_path(path: &str) -> String {
    let dirs: Vec<&str> = path.split('/').filter(|d| !d.is_empty()).collect();
    if dirs.is_empty() {
        return ROOT.into();
    }
    let short = |id: &str| id[..SHORT_ID.min(id.len())].to_string();
    if let Some((uid, container)) = pod_of(&dirs) {
        return match container {
            Some(c) => format!("pod/{uid}/{}", short(c)),
            None => format!("pod/{uid}"),
        };
    }
    if let Some(c) = dirs.iter().rev().find_map(|d| container_id(d)) {
        return format!("container/{}", short(c));
    }
    unit_of(&dirs).unwrap_or_else(|| format!("/{}", dirs.join("/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_path_names_its_service() {
        let cid = "4f1c0e9d2b7a8c6e5d4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d";
        for (path, want) in [
            ("/", "/"),
            ("", "/"),
            ("/system.slice/nginx.service", "nginx.service"),
            // A service's own sub-cgroups are still the service.
            ("/system.slice/nginx.service/workers", "nginx.service"),
            ("/user.slice/user-1000.slice/session-3.scope", "session-3.scope"),
            (
                "/user.slice/user-1000.slice/user@1000.service/app.slice/app-firefox-1234.scope",
                "user-1000/app-firefox-1234.scope",
            ),
            // Kubernetes, systemd driver: the pod's UID has underscores.
            (
                &format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice/cri-containerd-{cid}.scope"),
                "pod/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/4f1c0e9d2b7a",
            ),
            // cgroupfs driver, and a pod's own cgroup (its sandbox).
            (
                &format!("/kubepods/besteffort/pod0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/{cid}"),
                "pod/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/4f1c0e9d2b7a",
            ),
            (
                "/kubepods.slice/kubepods-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice",
                "pod/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
            ),
            (&format!("/system.slice/docker-{cid}.scope"), "container/4f1c0e9d2b7a"),
            (&format!("/docker/{cid}"), "container/4f1c0e9d2b7a"),
            // Neither a unit nor a container: the path.
            ("/bench/bulk", "/bench/bulk"),
            ("/kubepods.slice", "/kubepods.slice"),
        ] {
            assert_eq!(service_of_path(path), want, "{path}");
        }
    }

    #[test]
    fn a_users_units_are_named_as_the_users() {
        let user = "/user.slice/user-1000.slice/user@1000.service";
        for (path, want) in [
            // The user's manager runs units the user names: never a
            // system service's name.
            (
                format!("{user}/app.slice/nginx.service"),
                "user-1000/nginx.service",
            ),
            (
                format!("{user}/app.slice/nginx.service/workers.service"),
                "user-1000/nginx.service",
            ),
            (format!("{user}/init.scope"), "user-1000/init.scope"),
            // Outside the user's units, the user's manager.
            (format!("{user}/app.slice/x"), "user@1000.service"),
            // A delegated system unit's cgroups are that unit's, whatever
            // they are called.
            (
                "/system.slice/build.service/nginx.service".into(),
                "build.service",
            ),
            ("/system.slice/nginx.service".into(), "nginx.service"),
        ] {
            assert_eq!(service_of_path(&path), want, "{path}");
        }
    }

    #[test]
    fn pods_are_named_only_where_the_kubelet_puts_them() {
        let pod = "pod0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
        let uid = "pod/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
        for (path, want) in [
            (format!("/kubepods/{pod}"), uid.to_string()),
            (format!("/kubepods/burstable/{pod}"), uid.to_string()),
            // A cgroup delegated to a user, or to a service, merely named
            // like the kubelet's.
            (
                format!("/user.slice/user-1000.slice/user@1000.service/app.slice/kubepods/{pod}"),
                "user@1000.service".to_string(),
            ),
            (
                format!("/system.slice/ci.service/kubepods/burstable/{pod}"),
                "ci.service".to_string(),
            ),
            (
                format!("/bench/kubepods/{pod}"),
                format!("/bench/kubepods/{pod}"),
            ),
            // Below a pod's own, deeper than the kubelet goes: still that pod.
            (format!("/kubepods/{pod}/x/{pod}ff"), uid.to_string()),
        ] {
            assert_eq!(service_of_path(&path), want, "{path}");
        }
    }

    #[test]
    fn a_cgroup_never_found_does_not_walk_the_hierarchy_every_second() {
        // 50k cgroups (a directory tree stands in), and a socket that
        // outlived its own: a dead cgroup's id is never found again.
        let root = std::env::temp_dir().join(format!("bloatd-names-dead-{}", std::process::id()));
        for i in 0..250 {
            for j in 0..200 {
                std::fs::create_dir_all(root.join(format!("s{i}.slice/c{j}"))).unwrap();
            }
        }
        let missing = u64::MAX - 1;
        let mut names = ServiceNames::new(Some(root.clone()));
        let t = Instant::now();
        names.learn([missing]);
        let first = t.elapsed();
        std::thread::sleep(RESCAN_EVERY + Duration::from_millis(100));
        let t = Instant::now();
        names.learn([missing]);
        let second = t.elapsed();
        // Once the miss is old, the next read looks for it again.
        let walked = names.last_walk;
        for t in Arc::make_mut(&mut names.missed).values_mut() {
            *t = t.checked_sub(MISS_KEPT).unwrap();
        }
        names.learn([missing]);
        std::fs::remove_dir_all(&root).unwrap();
        assert!(
            second < Duration::from_millis(10),
            "the second learn took {second:?} (a walk of 50k cgroups: {first:?})"
        );
        assert_eq!(names.name(missing), format!("cgroup:{missing}"));
        assert_ne!(names.last_walk, walked, "an aged miss is walked for");
    }

    #[test]
    fn ids_are_named_from_one_walk_and_unknown_ones_by_number() {
        use std::os::unix::fs::MetadataExt;
        // A directory tree stands in for the hierarchy: ids are inodes.
        let root = std::env::temp_dir().join(format!("bloatd-names-{}", std::process::id()));
        let unit = root.join("system.slice/web.service");
        std::fs::create_dir_all(&unit).unwrap();
        let id = std::fs::metadata(&unit).unwrap().ino();
        let root_id = std::fs::metadata(&root).unwrap().ino();
        let evil = root.join("x\x1b]0;owned\x07");
        std::fs::create_dir_all(&evil).unwrap();
        let evil_id = std::fs::metadata(&evil).unwrap().ino();
        let mut names = ServiceNames::new(Some(root.clone()));
        names.learn([id, root_id]);
        assert_eq!(names.name(id), "web.service");
        assert_eq!(
            names.name(evil_id),
            "/x?]0;owned?",
            "no escape reaches a terminal"
        );
        assert_eq!(names.name(root_id), "/");
        assert_eq!(names.name(0), "-");
        // A new cgroup waits for the next walk (at most one per second).
        let late = root.join("late");
        std::fs::create_dir_all(&late).unwrap();
        let late_id = std::fs::metadata(&late).unwrap().ino();
        names.learn([late_id]);
        assert_eq!(names.name(late_id), format!("cgroup:{late_id}"));
        names.last_walk = None;
        names.learn([late_id]);
        assert_eq!(names.name(late_id), "/late");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
