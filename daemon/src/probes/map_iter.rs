//! The reads aya 0.14 has no call for: a BPF iterator attached to a map
//! (its Iter link carries none) or to no map (iter/tcp), run once per read
//! with BPF_ITER_CREATE; the array the
//! socket iterator writes its records into (`Slots`), read with one batch
//! lookup: one pass over the sockets, no syscall per socket
//! (bpf/probes.bpf.c, `dump`, says why); and a whole hash map in batches
//! (`hash_entries`), where a walk key by key would be two syscalls a floor.

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

/// An iterator program's link: each read runs the program once.
pub struct MapIter {
    link: OwnedFd,
}

impl MapIter {
    /// An iterator over one map (aya 0.14's Iter link carries no map).
    pub fn attach(prog: BorrowedFd<'_>, map: BorrowedFd<'_>) -> io::Result<MapIter> {
        let info = IterLinkInfoMap {
            map_fd: map.as_raw_fd() as u32,
        };
        // SAFETY: all-zero is a valid bpf_attr.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        attr.link_create.__bindgen_anon_1.prog_fd = prog.as_raw_fd() as u32;
        attr.link_create.attach_type = bpf_attach_type::BPF_TRACE_ITER as u32;
        attr.link_create.__bindgen_anon_3.__bindgen_anon_1.iter_info = &info as *const _ as u64;
        attr.link_create
            .__bindgen_anon_3
            .__bindgen_anon_1
            .iter_info_len = std::mem::size_of::<IterLinkInfoMap>() as u32;
        let link = sys_bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)?;
        Ok(MapIter { link })
    }

    /// An iterator over no map (iter/tcp): each read walks the sockets of
    /// the reading thread's network namespace.
    pub fn attach_unbound(prog: BorrowedFd<'_>) -> io::Result<MapIter> {
        // SAFETY: all-zero is a valid bpf_attr.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        attr.link_create.__bindgen_anon_1.prog_fd = prog.as_raw_fd() as u32;
        attr.link_create.attach_type = bpf_attach_type::BPF_TRACE_ITER as u32;
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

/// The array the socket iterator writes its records into (`dump`), read
/// with one BPF_MAP_LOOKUP_BATCH: no mapping, so the daemon holds the
/// records only while it reads them (an mmap() of the whole array would
/// count every slot in its RSS).
pub struct Slots {
    map: OwnedFd,
    value_size: usize,
    slots: usize,
}

impl Slots {
    pub fn new(map: BorrowedFd<'_>, value_size: usize, slots: usize) -> io::Result<Slots> {
        Ok(Slots {
            map: map.try_clone_to_owned()?,
            value_size,
            slots,
        })
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The first `n` values, appended to `values` by the kernel straight
    /// into its memory: no zeroed buffer and no second copy (at 100,000
    /// sockets each was a 30 MB pass). Its memory is reused: a caller that
    /// hands back the last read's vector spares the kernel faulting in
    /// fresh pages (at 100,000 sockets, 18 of the copy's 43 ms).
    pub fn read<T: Copy>(&self, n: usize, mut values: Vec<T>) -> io::Result<Vec<T>> {
        assert_eq!(std::mem::size_of::<T>(), self.value_size);
        let n = n.min(self.slots);
        if n == 0 {
            return Ok(values);
        }
        let mut keys = vec![0u32; n];
        values.reserve(n);
        let start = values.len();
        let mut out_batch = 0u32;
        // SAFETY: all-zero is a valid bpf_attr.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        attr.batch.map_fd = self.map.as_raw_fd() as u32;
        attr.batch.keys = keys.as_mut_ptr() as u64;
        // SAFETY: reserve(n) left room for n values after the first `start`.
        attr.batch.values = unsafe { values.as_mut_ptr().add(start) } as u64;
        attr.batch.out_batch = &mut out_batch as *mut u32 as u64;
        attr.batch.count = n as u32;
        // SAFETY: the buffers have room for `count` keys and values.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                bpf_cmd::BPF_MAP_LOOKUP_BATCH as libc::c_int,
                &mut attr as *mut bpf_attr,
                std::mem::size_of::<bpf_attr>() as libc::c_uint,
            )
        };
        // ENOENT: the batch reached the array's end, with `count` filled.
        if ret < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOENT) {
                return Err(e);
            }
        }
        // SAFETY: the kernel wrote attr.batch.count values of value_size
        // bytes, each a T (plain data, same size), after the first `start`.
        let got = (unsafe { attr.batch.count } as usize).min(n);
        unsafe { values.set_len(start + got) };
        Ok(values)
    }
}

/// Every entry of a hash map (plain or LRU), in batches of up to `chunk`
/// (doubled when one bucket holds more: ENOSPC). Entries that come or go
/// meanwhile may be missed or seen; none is seen twice.
pub fn hash_entries<K: Copy, V: Copy>(
    map: BorrowedFd<'_>,
    chunk: usize,
) -> io::Result<Vec<(K, V)>> {
    let mut out = Vec::new();
    let mut chunk = chunk.max(1);
    let (mut token, mut first) = (0u32, true);
    loop {
        let mut keys: Vec<K> = Vec::with_capacity(chunk);
        let mut values: Vec<V> = Vec::with_capacity(chunk);
        let mut next = 0u32;
        // SAFETY: all-zero is a valid bpf_attr.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        attr.batch.map_fd = map.as_raw_fd() as u32;
        attr.batch.in_batch = if first {
            0
        } else {
            &mut token as *mut u32 as u64
        };
        attr.batch.out_batch = &mut next as *mut u32 as u64;
        attr.batch.keys = keys.as_mut_ptr() as u64;
        attr.batch.values = values.as_mut_ptr() as u64;
        attr.batch.count = chunk as u32;
        // SAFETY: the buffers have room for `count` keys and values.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                bpf_cmd::BPF_MAP_LOOKUP_BATCH as libc::c_int,
                &mut attr as *mut bpf_attr,
                std::mem::size_of::<bpf_attr>() as libc::c_uint,
            )
        };
        let err = (ret < 0).then(io::Error::last_os_error);
        match err.as_ref().and_then(|e| e.raw_os_error()) {
            Some(libc::ENOSPC) if chunk < (1 << 24) => {
                chunk *= 2;
                continue;
            }
            None | Some(libc::ENOENT) => {}
            _ => return Err(err.expect("an errno: ret < 0")),
        }
        // SAFETY: the kernel wrote attr.batch.count keys and values, each
        // plain data of the map's sizes (checked by the caller's types).
        let got = (unsafe { attr.batch.count } as usize).min(chunk);
        unsafe {
            keys.set_len(got);
            values.set_len(got);
        }
        out.extend(keys.into_iter().zip(values));
        if err.is_some() {
            return Ok(out);
        }
        token = next;
        first = false;
    }
}

/// bpf_map_update_elem on a map fd, without a map object: for the panic
/// hook, which must not wait for the lock of the map's owner.
pub fn map_update<K, V>(map: BorrowedFd<'_>, key: &K, value: &V) -> io::Result<()> {
    // SAFETY: all-zero is a valid bpf_attr.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    attr.__bindgen_anon_2.map_fd = map.as_raw_fd() as u32;
    attr.__bindgen_anon_2.key = key as *const K as u64;
    attr.__bindgen_anon_2.__bindgen_anon_1.value = value as *const V as u64;
    // SAFETY: attr points at a key and a value of the map's sizes.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_MAP_UPDATE_ELEM as libc::c_int,
            &mut attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>() as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
