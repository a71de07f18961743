//! How the kernel holds a registration, and the registrations a killed
//! bloatd left behind.
//!
//! Through a struct_ops link (Linux 6.4, `.struct_ops.link`) a registration
//! lives exactly as long as the link's file descriptor: a bloatd killed with
//! SIGKILL leaves nothing. Before 6.4 the kernel has no such link (a map
//! created with BPF_F_LINK is refused with EINVAL) and an algorithm is
//! registered by writing its struct_ops map; the kernel then keeps it
//! registered, and its programs loaded, until someone deletes that map's
//! element, whoever holds the map or not. So a killed bloatd's algorithms
//! stay registered and would block the next start ("already registered").
//!
//! A registration of one of bloatd's names is *stale* when it is a
//! struct_ops map of that name registered by map update (its state reads
//! INUSE; a link's reads READY) that no process holds a file descriptor of:
//! a living bloatd (or a test) keeps its object's map descriptors open.
//! Deleting its element unregisters it; sockets still using it keep their
//! reference, as after any unregistration.

use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use libbpf_rs::libbpf_sys;

use crate::Algo;

/// BPF_MAP_TYPE_STRUCT_OPS (include/uapi/linux/bpf.h).
const MAP_TYPE_STRUCT_OPS: u32 = 26;
/// enum bpf_struct_ops_state: registered by map update.
const STATE_INUSE: u32 = 1;

/// Does this kernel register struct_ops through BPF links (Linux 6.4)? The
/// link's own type, `struct bpf_struct_ops_link`, came with it
/// (kernel/bpf/bpf_struct_ops.c); its BTF says so without loading anything.
pub fn struct_ops_links() -> bool {
    static LINKS: OnceLock<bool> = OnceLock::new();
    *LINKS.get_or_init(|| {
        libbpf_rs::btf::Btf::from_vmlinux()
            .map(|btf| {
                btf.type_by_name::<libbpf_rs::btf::types::Struct<'_>>("bpf_struct_ops_link")
                    .is_some()
            })
            .unwrap_or(false)
    })
}

/// The kernel's name of a BPF object: at most 15 bytes (BPF_OBJ_NAME_LEN).
fn kernel_name(name: &str) -> &[u8] {
    &name.as_bytes()[..name.len().min(15)]
}

struct MapInfo {
    id: u32,
    fd: OwnedFd,
    value_size: u32,
}

/// Every struct_ops map named like `algo`, opened by id.
fn struct_ops_maps(algo: Algo) -> Vec<MapInfo> {
    let want = kernel_name(algo.name());
    let mut out = Vec::new();
    let mut id = 0u32;
    // SAFETY (all calls below): plain syscall wrappers on valid out-pointers;
    // a returned fd is owned at once.
    while unsafe { libbpf_sys::bpf_map_get_next_id(id, &mut id) } == 0 {
        let raw = unsafe { libbpf_sys::bpf_map_get_fd_by_id(id) };
        if raw < 0 {
            continue; // freed meanwhile
        }
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut info = libbpf_sys::bpf_map_info::default();
        let mut len = std::mem::size_of_val(&info) as u32;
        if unsafe { libbpf_sys::bpf_map_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) } != 0 {
            continue;
        }
        let name: Vec<u8> = info
            .name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        if info.type_ == MAP_TYPE_STRUCT_OPS && name == want {
            out.push(MapInfo {
                id,
                fd,
                value_size: info.value_size,
            });
        }
    }
    out
}

/// The map's struct_ops state (its value starts with the common refcount
/// and state, struct bpf_struct_ops_common_value).
fn state(m: &MapInfo) -> Option<u32> {
    let mut value = vec![0u8; (m.value_size as usize).max(8)];
    let key = 0u32;
    // SAFETY: key and value buffers of the map's sizes.
    let ret = unsafe {
        libbpf_sys::bpf_map_lookup_elem(
            m.fd.as_raw_fd(),
            (&key as *const u32).cast(),
            value.as_mut_ptr().cast(),
        )
    };
    (ret == 0).then(|| u32::from_ne_bytes(value[4..8].try_into().expect("4 bytes, by the range")))
}

/// Does any process but this one hold a descriptor of map `id`?
fn held_elsewhere(id: u32) -> bool {
    let me = std::process::id().to_string();
    let want = format!("map_id:\t{id}\n");
    let Ok(procs) = fs::read_dir("/proc") else {
        return true; // cannot tell: treat as held
    };
    for p in procs.flatten() {
        let pid = p.file_name();
        let pid = pid.to_string_lossy();
        if pid == me || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(fds) = fs::read_dir(p.path().join("fdinfo")) else {
            continue; // exited meanwhile
        };
        for fd in fds.flatten() {
            if fs::read_to_string(fd.path()).is_ok_and(|s| s.contains(&want)) {
                return true;
            }
        }
    }
    false
}

/// Unregister every stale registration of `algo` (module comment); how
/// many were removed. A registration that is held, or made through a link,
/// is left alone.
pub(crate) fn remove_stale(algo: Algo) -> usize {
    let mut removed = 0;
    for m in struct_ops_maps(algo) {
        if state(&m) != Some(STATE_INUSE) || held_elsewhere(m.id) {
            continue;
        }
        let key = 0u32;
        // SAFETY: a key of the map's size.
        if unsafe { libbpf_sys::bpf_map_delete_elem(m.fd.as_raw_fd(), (&key as *const u32).cast()) }
            == 0
        {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_are_cut_at_15_bytes() {
        assert_eq!(kernel_name("bloatd_westwood"), b"bloatd_westwood");
        assert_eq!(kernel_name("bloatd_cubic"), b"bloatd_cubic");
        assert_eq!(kernel_name("a_very_long_name_here"), b"a_very_long_nam");
    }
}
