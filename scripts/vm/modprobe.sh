#!/bin/sh
# The kernel's module loader in a test VM (/proc/sys/kernel/modprobe, set by
# guest.sh): Debian's modprobe with the guest kernel's modules, which live in
# the VM cache (bloatd.modules= on the kernel command line), not in the
# host's /lib/modules.
dir=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^bloatd.modules=//p')
exec /sbin/modprobe -d "$dir" "$@"
