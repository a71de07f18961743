// Shared by the build scripts of the `bloatd` and `bloatd-cc` crates (both
// `include!` this file), so every BPF object is compiled the same way.
//
// clang-19 is the one compiler we use for BPF: Debian 12's clang-14 emits code
// that the verifier rejects for some of our loops, and mixing two compilers
// would give two sets of bugs. `BLOATD_CLANG` overrides the choice.

#[allow(dead_code)]
mod bpf_build {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// The clang used for BPF objects.
    pub fn clang() -> String {
        if let Ok(c) = std::env::var("BLOATD_CLANG") {
            return c;
        }
        "clang-19".to_string()
    }

    /// The repository's bpf/ directory (vmlinux.h and shared headers).
    pub fn bpf_dir() -> PathBuf {
        let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
        manifest.parent().unwrap().join("bpf")
    }

    /// Compile one `*.bpf.c` into a BPF object with CO-RE relocations and BTF.
    pub fn compile(src: &Path, out: &Path, extra_includes: &[&Path]) {
        println!("cargo:rerun-if-changed={}", src.display());
        println!("cargo:rerun-if-env-changed=BLOATD_CLANG");
        let bpf = bpf_dir();
        for h in ["vmlinux.h", "bloatd.h", "build_bpf.rs"] {
            println!("cargo:rerun-if-changed={}", bpf.join(h).display());
        }
        let clang = clang();
        let mut cmd = Command::new(&clang);
        cmd.args(["-g", "-O2", "-target", "bpf", "-mcpu=v3", "-D__TARGET_ARCH_x86"])
            .arg("-Wall")
            .arg("-Werror")
            .arg(format!("-I{}", bpf.display()));
        for inc in extra_includes {
            cmd.arg(format!("-I{}", inc.display()));
        }
        cmd.arg("-c").arg(src).arg("-o").arg(out);
        let status = match cmd.status() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "{clang} not found: install the build dependencies with `sudo make deps` \
                 (or set BLOATD_CLANG to a clang >= 19)"
            ),
            Err(e) => panic!("running {clang}: {e}"),
        };
        assert!(status.success(), "{clang} failed to compile {}", src.display());
    }

    /// Compile and run a host C program (used to print C struct layouts that
    /// Rust tests compare against); returns its standard output.
    pub fn run_host_c(src: &Path, out_dir: &Path, extra_includes: &[&Path]) -> String {
        println!("cargo:rerun-if-changed={}", src.display());
        let exe = out_dir.join(src.file_stem().unwrap());
        let mut cmd = Command::new(clang());
        cmd.arg("-O0").arg(format!("-I{}", bpf_dir().display()));
        for inc in extra_includes {
            cmd.arg(format!("-I{}", inc.display()));
        }
        let status = cmd.arg(src).arg("-o").arg(&exe).status().expect("running clang for host");
        assert!(status.success(), "host compile of {} failed", src.display());
        let out = Command::new(&exe).output().expect("running layout program");
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    }
}
