//! A BPF iterator over a map (here: the socket storage map), which aya 0.14
//! cannot attach: its Iter link carries no map. Two syscalls do it:
//! BPF_LINK_CREATE with the map in `iter_info`, then BPF_ITER_CREATE for
//! each read. The socket iterator writes its records into an mmap()ed
//! array (`Slots`) and returns only their count: one pass over the map,
//! no syscall per socket (bpf/probes.bpf.c, `dump`, says why).

use aya_obj::generated::{bpf_attach_type, bpf_attr, bpf_cmd};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// union bpf_iter_link_info, its `map` member.
#[repr(C)]
struct IterLinkInfoMap {
    map_fd: u32,
}

fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    // SAFETY: attr is a valid, zero-initialised bpf_attr of the right size.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_int,
            attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>() as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new file descriptor that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as i32) })
}

/// A map iterator program attached to one map.
pub struct MapIter {
    link: OwnedFd,
}

impl MapIter {
    pub fn attach(prog: BorrowedFd<'_>, map: BorrowedFd<'_>) -> io::Result<MapIter> {
        let info = IterLinkInfoMap { map_fd: map.as_raw_fd() as u32 };
        // SAFETY: all-zero is a valid bpf_attr.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        attr.link_create.__bindgen_anon_1.prog_fd = prog.as_raw_fd() as u32;
        attr.link_create.attach_type = bpf_attach_type::BPF_TRACE_ITER as u32;
        attr.link_create.__bindgen_anon_3.__bindgen_anon_1.iter_info = &info as *const _ as u64;
        attr.link_create.__bindgen_anon_3.__bindgen_anon_1.iter_info_len =
            std::mem::size_of::<IterLinkInfoMap>() as u32;
        let link = sys_bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)?;
        Ok(MapIter { link })
    }

    /// Run the iterator once; everything the program wrote.
    pub fn read(&self) -> io::Result<Vec<u8>> {
        // SAFETY: all-zero is a valid bpf_attr.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        attr.iter_create.link_fd = self.link.as_raw_fd() as u32;
        let fd = sys_bpf(bpf_cmd::BPF_ITER_CREATE, &mut attr)?;
        let mut out = Vec::new();
        File::from(fd).read_to_end(&mut out)?;
        Ok(out)
    }
}

/// A BPF array map created with BPF_F_MMAPABLE, mapped read-only: the
/// kernel writes, we copy out.
pub struct Slots {
    ptr: *const u8,
    len: usize,
    stride: usize,
    slots: usize,
}

// SAFETY: the mapping is read-only shared memory owned by this value.
unsafe impl Send for Slots {}

impl Slots {
    /// Map `slots` values of `value_size` bytes (the kernel lays array
    /// values out 8-byte aligned).
    pub fn map(map: BorrowedFd<'_>, value_size: usize, slots: usize) -> io::Result<Slots> {
        let stride = value_size.next_multiple_of(8);
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = (stride * slots).next_multiple_of(page);
        // SAFETY: a fresh shared read-only mapping of the map's fd.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                map.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Slots { ptr: ptr as *const u8, len, stride, slots })
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The first `n` values, copied out.
    pub fn read<T: Copy>(&self, n: usize) -> Vec<T> {
        assert!(std::mem::size_of::<T>() <= self.stride);
        (0..n.min(self.slots))
            .map(|i| {
                // SAFETY: i < slots, inside the mapping; T is plain data
                // no larger than a slot.
                unsafe { std::ptr::read_unaligned(self.ptr.add(i * self.stride) as *const T) }
            })
            .collect()
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        // SAFETY: ptr/len are the mapping made in `map`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}
