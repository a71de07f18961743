#!/usr/bin/env python3
"""Run a command the way daemon/dist/bloatd.service runs bloatd, as far as
a machine without systemd as PID 1 allows: the unit's capability bounding
set (CapabilityBoundingSet=), no inheritable or ambient capabilities,
no_new_privs (NoNewPrivileges=) and its system-call filter
(SystemCallFilter= expanded by `systemd-analyze syscall-filter`, with
systemd's implicit @default, SystemCallErrorNumber=, native architecture
only). The file-system and namespace options need systemd itself.

    unit_sandbox.py COMMAND [ARG...]
"""

import ctypes
import errno
import os
import subprocess
import sys

import seccomp

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNIT = os.path.join(REPO, "daemon", "dist", "bloatd.service")
PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4


def directives(name):
    with open(UNIT) as f:
        return [line.split("=", 1)[1].strip() for line in f if line.startswith(name + "=")]


# linux/capability.h numbers of the capabilities the unit may name.
CAPS = {"CAP_CHOWN": 0, "CAP_NET_ADMIN": 12, "CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21,
        "CAP_PERFMON": 38, "CAP_BPF": 39}


def expand(item, seen=None):
    """Syscall names of a group (@name), recursively, or the name itself."""
    if not item.startswith("@"):
        return {item}
    out = subprocess.run(["systemd-analyze", "syscall-filter", item], check=True,
                         capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines()[1:]:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        names |= expand(line)
    return names


def allowed_syscalls():
    allow, first = set(), True
    for value in directives("SystemCallFilter"):
        deny = value.startswith("~")
        items = value.lstrip("~").split()
        if first and not deny:
            allow |= expand("@default")  # systemd adds it to every allow list
        first = False
        names = set().union(*(expand(i) for i in items))
        allow = allow - names if deny else allow | names
    return allow


def main():
    argv = sys.argv[1:]
    if not argv:
        raise SystemExit(__doc__)
    libc = ctypes.CDLL(None, use_errno=True)
    keep = {CAPS[c] for c in directives("CapabilityBoundingSet")[0].split()}
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        if cap not in keep and libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise SystemExit(f"unit_sandbox: cannot drop capability {cap}: {os.strerror(ctypes.get_errno())}")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)

    err = directives("SystemCallErrorNumber")
    action = seccomp.ERRNO(getattr(errno, err[0])) if err else seccomp.KILL_PROCESS
    f = seccomp.SyscallFilter(defaction=action)  # loading it sets no_new_privs
    for name in sorted(allowed_syscalls()):
        try:
            f.add_rule(seccomp.ALLOW, name)
        except (RuntimeError, ValueError, OSError):
            pass  # unknown to this libseccomp: systemd (same library) skips it too
    f.load()
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
