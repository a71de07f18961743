#!/usr/bin/env python3
"""Issue 21, the fleet kit: the image, run as the chart's DaemonSet pod.

`make image` builds localhost/bloatd:VERSION; the chart is rendered (the
strict decode of daemon/dist/kubernetes/check, `go run ./cmd/render`) and
its pod is run with podman the way a kubelet would run it: the host's
network and PID namespaces, every capability dropped but those the chart
adds, no_new_privs, a read-only root, the same volumes (the ConfigMap's
files, an in-memory /run, the host's /sys/kernel/btf and /sys/fs/cgroup
read-only), the same arguments with $(HOST_IP) expanded, the same memory
limit, and the exec probes run as the kubelet runs them. Then:

- defaults: the probes pass; /metrics answers on the listen address; a
  CUBIC download between two lab namespaces (not the host's) is seen with
  the downloading process's host pid; the sock_ops program sits on the
  root of the host's cgroup v2 hierarchy; after start no thread holds an
  effective capability and the bounding set is the chart's three; SIGTERM
  (what the kubelet sends) detaches everything, exit 0;
- cc registered: with the chart's SYS_ADMIN and SYS_PTRACE bloatd
  registers bloatd_westwood and gives it back at stop; without them the
  start fails naming the namespace it could not enter, and nothing stays;
  `bloatd cc default` says the sysctl is read-only in the pod;
- api.hostPath and api.group: the socket on the node, root:GROUP 0660,
  reached by the node's bloatd;
- the runtime's default seccomp profile refuses bpf(2) to a container
  without CAP_SYS_ADMIN: why the chart's pod runs Unconfined.

How podman stands in for the kubelet, and what this machine needs of it:
harness.Pod.
"""

import json
import os
import re
import shutil
import tempfile
import urllib.request

from bloatdpy.harness import (BLOATD, PROBE_PROGS, REPO, Pod, TestCase, bpf_prog_ids, main, read, render, run,
                        sock_ops_attached, wait_for)

CAPS = {"CHOWN": 0, "NET_ADMIN": 12, "SYS_PTRACE": 19, "SYS_ADMIN": 21, "PERFMON": 38, "BPF": 39}


def status_of(pid):
    return dict(line.split(":\t", 1) for line in read(f"/proc/{pid}/status").splitlines() if ":\t" in line)


def cap_set(mask_hex):
    mask = int(mask_hex, 16)
    return {name for name, bit in CAPS.items() if mask >> bit & 1} | (
        {"other"} if mask & ~sum(1 << b for b in CAPS.values()) else set())


class Image(TestCase):
    @classmethod
    def setUpClass(cls):
        r = run("make", "--no-print-directory", "-C", REPO, "image", timeout=900)
        cls.image = re.search(r"^(localhost/bloatd:\S+) .*: (\S+\.tar)$", r.stdout, re.M)
        assert cls.image, r.stdout

    def pod(self, objs, **kw):
        self.before = (bpf_prog_ids(PROBE_PROGS), sock_ops_attached())
        p = Pod(objs, **kw)
        self.addCleanup(p.remove)
        return p

    def assert_nothing_left(self):
        self.assertEqual((bpf_prog_ids(PROBE_PROGS), sock_ops_attached()), self.before,
                         "probes or sock_ops programs left after the pod ended")

    def test_archive_loads(self):
        """The archive make image writes is an image podman loads by name."""
        out = run("podman", "load", "-i", os.path.join(REPO, self.image[2])).stdout
        self.assertIn(self.image[1], out)
        self.assertEqual(run("podman", "run", "--rm", "--runtime", "runc", "--ulimit", "nofile=4096:4096",
                             "--ulimit", "nproc=4096:4096", self.image[1], "--version").stdout.split(),
                         ["bloatd", self.image[1].split(":")[1]])

    def test_defaults(self):
        objs = render()
        self.assertEqual(objs["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["image"],
                         self.image[1], "the chart's default image is the one make image builds")
        lab = self.lab("bfl")
        pod = self.pod(objs)
        self.assertTrue(pod.started(timeout=60), pod.logs())
        self.assertTrue(pod.probe("readinessProbe") and pod.probe("livenessProbe"))
        with urllib.request.urlopen(f"http://{pod.listen}/metrics", timeout=10) as r:
            self.assertIn('bloatd_build_info{version=', r.read().decode())

        # a download between two namespaces that are not the pod's
        lab.iperf_server("snd")
        client = lab.download("cubic", 8)
        mine = lambda: [s for s in json.loads(pod.exec("bloatd", "sockets", "--json").stdout)
                        if s["cc"] == "cubic" and s["pid"] == client.pid]
        features = {f["name"]: f for f in
                    json.loads(pod.exec("bloatd", "status", "--json").stdout)["health"]["features"]}
        reach = features["netns_read"]
        print(f"  other namespaces: {reach['state']}: {reach['detail']}", flush=True)
        if reach["state"] == "on":
            socks = wait_for(mine, timeout=10, what="the download's socket, seen from the pod")
            self.assertEqual(socks[0]["comm"], "iperf3")
        else:
            # A kernel that refuses map-element iterators (this host's)
            # leaves the chart's pod, without CAP_SYS_ADMIN, its own
            # namespace to list; it says so, and the probes still count
            # the download in /metrics.
            self.assertEqual(reach["state"], "off")
            self.assertIn("CAP_SYS_ADMIN", reach["detail"])

            def cubic_senders():
                with urllib.request.urlopen(f"http://{pod.listen}/metrics", timeout=10) as r:
                    text = r.read().decode()
                return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                           if line.startswith("bloatd_tcp_queueing_delay_seconds_count{")
                           and 'cc="cubic"' in line and 'role="sender"' in line)
            wait_for(lambda: cubic_senders() > 10, timeout=10, what="the download counted in /metrics")
            self.assertEqual(mine(), [], "listed although the pod cannot read that namespace")

        # sock_ops on the root of the host's cgroup v2 hierarchy
        root = next(l.split()[1] for l in read("/proc/self/mounts").splitlines() if l.split()[2] == "cgroup2")
        tree = json.loads(run("bpftool", "-j", "cgroup", "show", root).stdout or "[]")
        self.assertTrue(any(p.get("attach_type") in ("cgroup_sock_ops", "sock_ops") for p in tree),
                        f"no sock_ops program on {root}: {tree}")

        pid = pod.pid()
        for tid in os.listdir(f"/proc/{pid}/task"):
            st = status_of(f"{pid}/task/{tid}")
            self.assertEqual(cap_set(st["CapEff"]), set(), f"thread {tid} holds capabilities")
            self.assertEqual(cap_set(st["CapBnd"]), {"BPF", "PERFMON", "NET_ADMIN"})
            self.assertEqual(st["NoNewPrivs"], "1")
        now, peak = pod.memory()
        print(f"  pod memory (BPF maps included): {now / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB",
              flush=True)

        grace = objs["DaemonSet"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        self.assertEqual(pod.terminate(grace), 0, pod.logs())
        self.assertIn("bloatd stopped", pod.logs())
        self.assert_nothing_left()

    def test_registering_needs_sys_admin(self):
        objs = render({"config": {"cc": ["bloatd_westwood"]}})
        available = lambda: read("/proc/sys/net/ipv4/tcp_available_congestion_control").split()
        self.assertNotIn("bloatd_westwood", available(), "another bloatd registered it")

        pod = self.pod(objs, drop_caps=("SYS_ADMIN", "SYS_PTRACE"))
        self.assertFalse(pod.started(timeout=60), "started without CAP_SYS_ADMIN")
        print("  without CAP_SYS_ADMIN: " + pod.logs().strip().splitlines()[-1], flush=True)
        self.assertRegex(pod.logs(), r"enter network namespace .*: setns needs CAP_SYS_ADMIN")
        self.assertNotEqual(pod.state()["ExitCode"], 0)
        self.assertNotIn("bloatd_westwood", available())
        self.assert_nothing_left()
        pod.remove()

        pod = self.pod(objs)
        self.assertIn("SYS_ADMIN", pod.caps)
        self.assertTrue(pod.started(timeout=60), pod.logs())
        self.assertIn("bloatd_westwood", available())
        st = status_of(pod.pid())
        self.assertEqual(cap_set(st["CapEff"]), set())
        self.assertEqual(cap_set(st["CapPrm"]), {"SYS_ADMIN", "SYS_PTRACE"}, "kept for the stop")
        # the runtime mounts /proc/sys read-only: the node's default stays the node's
        r = pod.exec("bloatd", "cc", "default", "bloatd_westwood", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("read-only here", r.stderr)
        self.assertEqual(pod.terminate(30), 0, pod.logs())
        self.assertNotIn("bloatd_westwood", available())
        self.assert_nothing_left()

    def test_api_on_the_node(self):
        """api.hostPath and api.group: the API socket in a directory of the
        node, for a group of the node (the pod's /etc/group names it with
        the node's gid), which CAP_CHOWN gives it."""
        run_dir = tempfile.mkdtemp(prefix="bloatd-node-")
        os.rmdir(run_dir)  # DirectoryOrCreate: the pod makes it
        self.addCleanup(shutil.rmtree, run_dir, ignore_errors=True)
        gid = 64000 + os.getpid() % 1000
        pod = self.pod(render({"api": {"hostPath": run_dir, "group": "bloatd-node", "gid": gid}}))
        self.assertIn("CHOWN", pod.caps)
        self.assertTrue(pod.started(timeout=60), pod.logs())
        sock = os.stat(os.path.join(run_dir, "bloatd.sock"))
        d = os.stat(run_dir)
        self.assertEqual((sock.st_gid, oct(sock.st_mode & 0o777)), (gid, "0o660"))
        self.assertEqual((d.st_gid, oct(d.st_mode & 0o777)), (gid, "0o750"))
        # the node's own bloatd reaches the pod's daemon there
        st = json.loads(run(BLOATD, "--run-dir", run_dir, "status", "--json").stdout)
        self.assertEqual(st["pid"], pod.pid())
        self.assertEqual(pod.terminate(30), 0, pod.logs())
        self.assert_nothing_left()

    def test_runtime_default_seccomp_refuses_bpf(self):
        pod = self.pod(render(), seccomp="RuntimeDefault")
        self.assertFalse(pod.started(timeout=60),
                         "the runtime's default seccomp profile let bpf(2) through without "
                         "CAP_SYS_ADMIN: the chart could use RuntimeDefault now")
        self.assertIn("Operation not permitted", pod.logs())
        self.assert_nothing_left()


if __name__ == "__main__":
    main()
