#!/usr/bin/env python3
"""Issue 12: the Debian package, installed into this machine with dpkg.

`make deb` builds it from the static release binary (make release), so it
declares adduser alone and the installed binary loads no library (issue
30; test_release.py installs it on Debian 11 too); `dpkg -i` installs it; the
installed bloatd answers --version, starts with the shipped config (the API
group the package created owns its run directory) and stops; the man page,
completions, unit and rules are where they belong; `dpkg -P` leaves none of
its files, its config, its group or its run directory. An operator's own
/etc/bloatd (from `make install`) is set aside during the test and put back.
"""

import os
import shutil
import tempfile

from bloatdpy.harness import REPO, TestCase, free_port, main, run
from test_release import assert_static

INSTALLED = "/usr/bin/bloatd"


def installed():
    r = run("dpkg-query", "-W", "-f=${Status}", "bloatd", check=False)
    return r.returncode == 0 and "installed" in r.stdout and "not-installed" not in r.stdout


class Package(TestCase):
    def setUp(self):
        if installed():
            self.skipTest("a bloatd package is installed on this machine: not touching it")
        r = run("make", "--no-print-directory", "-C", REPO, "deb", timeout=900)
        self.deb = r.stdout.strip().splitlines()[-1]
        self.deb = os.path.join(REPO, self.deb)
        self.assertTrue(self.deb.endswith(".deb") and os.path.exists(self.deb), r.stdout)
        if os.path.exists("/etc/bloatd"):
            aside = tempfile.mkdtemp(prefix="bloatd-etc-")
            shutil.move("/etc/bloatd", aside)
            self.addCleanup(shutil.move, os.path.join(aside, "bloatd"), "/etc/bloatd")
        self.addCleanup(run, "dpkg", "--purge", "bloatd", check=False, timeout=120)
        # A group bloatd made by `make install` comes back after the purge.
        g = run("getent", "group", "bloatd", check=False)
        if g.returncode == 0:
            gid = g.stdout.split(":")[2]
            self.addCleanup(run, "groupadd", "--system", "--gid", gid, "bloatd", check=False)

    def test_install_run_purge(self):
        self.assertEqual(run("dpkg-deb", "-f", self.deb, "Depends").stdout.strip(), "adduser")

        r = run("dpkg", "-i", self.deb, check=False, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(installed())
        files = [f for f in run("dpkg", "-L", "bloatd").stdout.splitlines() if f.strip()]

        assert_static(self, INSTALLED)

        version = run(INSTALLED, "--version").stdout
        self.assertRegex(version, r"^bloatd \d+\.\d+\.\d+")
        for path in ("/usr/share/man/man1/bloatd.1.gz", "/usr/share/man/man1/bloatd-start.1.gz",
                     "/usr/share/bash-completion/completions/bloatd",
                     "/usr/share/zsh/vendor-completions/_bloatd",
                     "/usr/share/fish/vendor_completions.d/bloatd.fish",
                     "/usr/share/bloatd/prometheus/bloatd.rules.yml",
                     "/usr/share/bloatd/grafana/bloatd.json",
                     "/usr/share/doc/bloatd/copyright", "/etc/bloatd/bloatd.toml"):
            self.assertIn(path, files)
            self.assertTrue(os.path.exists(path), path)
        with open("/lib/systemd/system/bloatd.service") as f:
            self.assertIn("ExecStart=/usr/bin/bloatd start --foreground", f.read())
        group = run("getent", "group", "bloatd", check=False)
        self.assertEqual(group.returncode, 0, "postinst created the API group")
        gid = int(group.stdout.split(":")[2])

        # Start and stop the installed binary with the installed config.
        rundir = os.path.join(tempfile.mkdtemp(prefix="bloatd-pkg-"), "run")
        self.addCleanup(shutil.rmtree, os.path.dirname(rundir), True)
        bloatd = [INSTALLED, "--run-dir", rundir]
        r = run(*bloatd, "start", "--no-cc", "--listen", f"127.0.0.1:{free_port()}", check=False)
        self.addCleanup(lambda: os.path.exists(INSTALLED) and run(*bloatd, "stop", check=False))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        st = os.stat(rundir)
        self.assertEqual((st.st_mode & 0o777, st.st_gid), (0o750, gid))
        self.assertEqual(run(*bloatd, "status", check=False).returncode, 0)
        r = run(*bloatd, "stop", check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(run(*bloatd, "status", check=False).returncode, 3)

        r = run("dpkg", "--purge", "bloatd", check=False, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse(installed())
        left = [f for f in files if os.path.lexists(f) and not os.path.isdir(f)]
        self.assertEqual(left, [], "purge leaves no file of the package")
        ours = [f for f in files if os.path.isdir(f) and ("bloatd" in f)]
        self.assertEqual([d for d in ours if os.path.exists(d)], [], "nor its directories")
        self.assertFalse(os.path.exists("/etc/bloatd"))
        self.assertNotEqual(run("getent", "group", "bloatd", check=False).returncode, 0,
                            "nor its group")


if __name__ == "__main__":
    main()
