// Shared by the build scripts of the crates that compile BPF or host C
// (`include!`d by each), so every object is compiled the same way.
//
// One clang compiles all of it, found rather than named: BLOATD_CLANG if
// set, else the first of `clang`, `clang-30` ... `clang-19` on PATH whose
// major version is at least 19. Debian 12's clang-14 emits code the
// verifier rejects for some of our loops, and mixing two compilers would
// give two sets of bugs.

// A build script fails by panicking with its message: unwraps are its way.
#[allow(dead_code, clippy::unwrap_used)]
mod bpf_build {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// The oldest clang whose BPF code our programs pass the verifier with.
    const MIN_CLANG: u32 = 19;

    /// The major version `clang --version` reports, if `name` runs.
    fn clang_major(name: &str) -> Option<u32> {
        let out = Command::new(name).arg("--version").output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let after = text.split("clang version ").nth(1)?;
        after.split('.').next()?.trim().parse().ok()
    }

    /// The clang used for BPF objects and host C (see the file's head),
    /// looked for once per build script.
    pub fn clang() -> String {
        static FOUND: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        FOUND.get_or_init(find_clang).clone()
    }

    fn find_clang() -> String {
        println!("cargo:rerun-if-env-changed=BLOATD_CLANG");
        if let Ok(c) = std::env::var("BLOATD_CLANG") {
            return c;
        }
        let candidates = std::iter::once("clang".to_string())
            .chain((MIN_CLANG..=30).rev().map(|v| format!("clang-{v}")));
        let mut seen = Vec::new();
        for name in candidates {
            match clang_major(&name) {
                Some(v) if v >= MIN_CLANG => return name,
                Some(v) => seen.push(format!("{name} is {v}")),
                None => {}
            }
        }
        panic!(
            "no clang >= {MIN_CLANG} found on PATH ({}): install the build dependencies \
             with `sudo make deps`, or set BLOATD_CLANG",
            if seen.is_empty() {
                "none at all".to_string()
            } else {
                seen.join(", ")
            }
        )
    }

    /// `__TARGET_ARCH_*` for the architecture being built for (bpf_tracing.h's
    /// register macros need it; vmlinux.h is the x86_64 kernel's BTF, so other
    /// architectures also need `make vmlinux` on their own kernel).
    fn target_arch_define() -> String {
        let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
        let name = match arch.as_str() {
            "x86_64" | "x86" => "x86",
            "aarch64" => "arm64",
            "arm" => "arm",
            "riscv64" => "riscv",
            "s390x" => "s390",
            "powerpc64" => "powerpc",
            "loongarch64" => "loongarch",
            other => panic!("no BPF target-arch define known for {other}"),
        };
        format!("-D__TARGET_ARCH_{name}")
    }

    /// The repository's bpf/ directory (vmlinux.h and shared headers).
    pub fn bpf_dir() -> PathBuf {
        let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
        manifest
            .ancestors()
            .map(|a| a.join("bpf"))
            .find(|b| b.join("bloatd.h").exists())
            .expect("bpf/bloatd.h above the crate")
    }

    /// Every header of bpf/, sorted (a new one is found, never listed).
    fn headers(bpf: &Path) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(bpf)
            .expect("bpf/ readable")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "h"))
            .collect();
        found.sort();
        found
    }

    /// clang with the flags of every BPF object: one set for the objects
    /// and for the check that each header stands alone (check_headers).
    fn bpf_clang(extra_includes: &[&Path]) -> Command {
        let mut cmd = Command::new(clang());
        cmd.args(["-g", "-O2", "-target", "bpf", "-mcpu=v3"])
            .arg(target_arch_define())
            .arg("-Wall")
            .arg("-Werror")
            .arg(format!("-I{}", bpf_dir().display()));
        for inc in extra_includes {
            cmd.arg(format!("-I{}", inc.display()));
        }
        cmd
    }

    /// Start `cmd` (clang), with the fix named if clang is not there.
    fn spawn_clang(cmd: &mut Command) -> std::process::Child {
        let clang = clang();
        match cmd.spawn() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "{clang} not found: install the build dependencies with `sudo make deps` \
                 (or set BLOATD_CLANG to a clang >= 19)"
            ),
            Err(e) => panic!("running {clang}: {e}"),
        }
    }

    /// Compile one `*.bpf.c` into a BPF object with CO-RE relocations and BTF.
    pub fn compile(src: &Path, out: &Path, extra_includes: &[&Path]) {
        println!("cargo:rerun-if-changed={}", src.display());
        let bpf = bpf_dir();
        let mut deps = headers(&bpf);
        deps.push(bpf.join("build_bpf.rs"));
        deps.sort();
        for d in deps {
            println!("cargo:rerun-if-changed={}", d.display());
        }
        let mut cmd = bpf_clang(extra_includes);
        cmd.arg("-c").arg(src).arg("-o").arg(out);
        let status = spawn_clang(&mut cmd).wait().unwrap();
        assert!(
            status.success(),
            "{} failed to compile {}",
            clang(),
            src.display()
        );
    }

    /// Every header of bpf/ compiled by itself: a file of one line that
    /// includes only it, with the flags of the BPF objects; and the pure C
    /// the host compiles too (a header that reaches no vmlinux.h there) also
    /// as host C, with the warnings the host libraries are built with
    /// (cc's -Wall -Wextra, as errors). A header that leans on what its
    /// includer happened to include before it fails the build here, and so
    /// `make lint`, naming the header. -Wno-undefined-internal: a header may
    /// declare static functions its includer defines (floor_path.h's
    /// environment); its includer's own build still requires them.
    pub fn check_headers() {
        let bpf = bpf_dir();
        let dir = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("headers_alone");
        std::fs::create_dir_all(&dir).unwrap();
        let mut runs = Vec::new();
        for h in headers(&bpf) {
            let name = h.file_name().unwrap().to_str().unwrap().to_string();
            if name == "vmlinux.h" {
                continue;
            }
            let tu = dir.join(format!("{name}.c"));
            std::fs::write(&tu, format!("#include \"{name}\"\n")).unwrap();
            let mut cmd = bpf_clang(&[]);
            cmd.args(["-Wno-undefined-internal", "-fsyntax-only"])
                .arg(&tu);
            runs.push((format!("{name} (BPF)"), spawn_clang(&mut cmd)));
            if !reaches_vmlinux(&tu) {
                let mut cmd = Command::new(clang());
                cmd.args(["-Wall", "-Wextra", "-Werror", "-Wno-undefined-internal"])
                    .arg(format!("-I{}", bpf.display()))
                    .arg("-fsyntax-only")
                    .arg(&tu);
                runs.push((format!("{name} (host)"), spawn_clang(&mut cmd)));
            }
        }
        let failed: Vec<String> = runs
            .into_iter()
            .filter_map(|(what, mut child)| (!child.wait().unwrap().success()).then_some(what))
            .collect();
        assert!(
            failed.is_empty(),
            "bpf/ headers that do not compile by themselves: {} (each must include \
             what it uses; clang's errors above)",
            failed.join(", ")
        );
    }

    /// Whether a file reaches vmlinux.h on the host (a BPF-only header). One
    /// the host cannot even preprocess is taken as host C, so the host's
    /// compile shows why.
    fn reaches_vmlinux(tu: &Path) -> bool {
        let out = Command::new(clang())
            .args(["-MM", "-MG"])
            .arg(format!("-I{}", bpf_dir().display()))
            .arg(tu)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", clang()));
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("vmlinux.h")
    }

    /// Rust declarations of C types, generated from a BPF object's BTF (read
    /// with `bpftool -j btf dump`): `#[repr(C)]` structs with every field at
    /// the offset the C compiler gave it (explicit padding where it left a
    /// hole, a size check), and each enum as a module of constants with the
    /// common prefix of its names stripped (`enum bloatd_stat` ->
    /// `mod stat { pub const PROBE: u32 = 0; ... }`). Structs that the
    /// listed ones contain are generated too. This is the only Rust
    /// definition of the records that cross the kernel boundary.
    ///
    /// Why not libbpf-cargo's generator: it emits the types inside a libbpf-rs
    /// skeleton, with C names and Rust enums; the probes are loaded by aya,
    /// whose maps take plain `Pod` structs, and the daemon indexes arrays by
    /// the C enums' values. Eighty lines of our own keep one definition.
    pub fn rust_types(obj: &Path, structs: &[&str], enums: &[&str]) -> String {
        let btf = Btf::load(obj);
        let mut code = String::from(
            "// Generated by bpf/build_bpf.rs from the BPF object's BTF. Do not edit.\n",
        );
        let mut queue: Vec<String> = structs.iter().map(|s| s.to_string()).collect();
        let mut done = 0;
        while done < queue.len() {
            let name = queue[done].clone();
            done += 1;
            code += &btf.struct_decl(&name, &mut queue);
        }
        for name in enums {
            code += &btf.enum_mod(name);
        }
        code
    }

    /// The object's `const volatile` globals (its `.rodata` datasec) as one
    /// Rust struct, a field each with the C name and type, and its
    /// `apply(&self, loader)` that sets every one on an aya `EbpfLoader`:
    /// the names are written here, from the BTF, never by hand, so a global
    /// the daemon forgets or misspells fails the build (the struct has no
    /// `Default`: whoever makes one sets every field). A `const` that is not
    /// `volatile` (a zero value kept in `.rodata`) is no setting: left out.
    pub fn rust_globals(obj: &Path) -> String {
        let btf = Btf::load(obj);
        let sec = btf.find("DATASEC", ".rodata");
        let mut fields = Vec::new();
        for v in sec["vars"].as_array().unwrap() {
            let var = btf.by_id(v["type_id"].as_u64().unwrap());
            if var["kind"] != "VAR" || !btf.is_volatile(var["type_id"].as_u64().unwrap()) {
                continue;
            }
            let name = var["name"].as_str().unwrap().to_string();
            let (ty, _) = btf.rust_of(var["type_id"].as_u64().unwrap(), &mut Vec::new());
            fields.push((name, ty));
        }
        assert!(
            !fields.is_empty(),
            "no const volatile global in {}",
            obj.display()
        );
        let mut code = String::from(
            "// Generated by bpf/build_bpf.rs from the BPF object's BTF. Do not edit.\n\n\
             /// The object's `const volatile` globals, set before load (`apply`).\n\
             #[derive(Clone, Copy, Debug, PartialEq, Eq)]\npub struct Globals {\n",
        );
        for (name, ty) in &fields {
            code += &format!("    pub {name}: {ty},\n");
        }
        code += "}\n\nimpl Globals {\n    /// Every global set on `loader` (each must exist in the object).\n    \
                 pub fn apply<'a>(&'a self, loader: &mut aya::EbpfLoader<'a>) {\n        loader\n";
        for (name, _) in &fields {
            code += &format!("            .override_global(\"{name}\", &self.{name}, true)\n");
        }
        code += "        ;\n    }\n}\n";
        code + &btf.map_names()
    }

    /// `bloatd_cc_stats` -> `BloatdCcStats`.
    fn camel(name: &str) -> String {
        name.split('_')
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect()
    }

    /// A BPF object's BTF as bpftool prints it in JSON.
    struct Btf {
        obj: PathBuf,
        types: Vec<serde_json::Value>,
    }

    impl Btf {
        fn load(obj: &Path) -> Btf {
            let out = Command::new("bpftool")
                .args(["-j", "btf", "dump", "file"])
                .arg(obj)
                .output()
                .unwrap_or_else(|e| {
                    panic!("running bpftool (install it with `sudo make deps`): {e}")
                });
            assert!(
                out.status.success(),
                "bpftool btf dump {} failed",
                obj.display()
            );
            let mut doc: serde_json::Value =
                serde_json::from_slice(&out.stdout).expect("bpftool JSON");
            let types = doc["types"]
                .as_array_mut()
                .map(std::mem::take)
                .expect("types");
            Btf {
                obj: obj.to_path_buf(),
                types,
            }
        }

        fn by_id(&self, id: u64) -> &serde_json::Value {
            // bpftool lists types in id order from 1
            let t = &self.types[id as usize - 1];
            assert_eq!(t["id"].as_u64(), Some(id), "BTF ids out of order");
            t
        }

        fn find(&self, kind: &str, name: &str) -> &serde_json::Value {
            self.types
                .iter()
                .find(|t| t["kind"] == kind && t["name"] == name)
                .unwrap_or_else(|| panic!("{kind} {name} not in the BTF of {}", self.obj.display()))
        }

        /// `pub mod map { pub const FLOORS: &str = "floors"; ... }`: every
        /// map of the object's `.maps` datasec, so the loader names a map it
        /// sizes or takes by a constant a typo does not compile.
        fn map_names(&self) -> String {
            let mut code = String::from(
                "\n/// The object's maps by name (its `.maps` datasec).\npub mod map {\n",
            );
            for v in self.find("DATASEC", ".maps")["vars"].as_array().unwrap() {
                let name = self.by_id(v["type_id"].as_u64().unwrap())["name"]
                    .as_str()
                    .unwrap();
                code += &format!(
                    "    pub const {}: &str = \"{name}\";\n",
                    name.to_ascii_uppercase()
                );
            }
            code + "}\n"
        }

        /// Whether the type `id` is `volatile` (through const and typedefs).
        fn is_volatile(&self, id: u64) -> bool {
            let t = self.by_id(id);
            match t["kind"].as_str().unwrap() {
                "VOLATILE" => true,
                "CONST" | "TYPEDEF" => self.is_volatile(t["type_id"].as_u64().unwrap()),
                _ => false,
            }
        }

        /// The Rust type and size of a BTF type id; structs it names are
        /// queued for generation.
        fn rust_of(&self, id: u64, queue: &mut Vec<String>) -> (String, u64) {
            let t = self.by_id(id);
            let size = || t["size"].as_u64().unwrap();
            match t["kind"].as_str().unwrap() {
                "TYPEDEF" | "VOLATILE" | "CONST" => self.rust_of(t["type_id"].as_u64().unwrap(), queue),
                "INT" => {
                    let sign = if t["encoding"] == "SIGNED" { "i" } else { "u" };
                    assert!([1, 2, 4, 8].contains(&size()), "int of size {}", size());
                    (format!("{sign}{}", size() * 8), size())
                }
                "ENUM" => (format!("u{}", size() * 8), size()),
                "ARRAY" => {
                    let n = t["nr_elems"].as_u64().unwrap();
                    let (inner, each) = self.rust_of(t["type_id"].as_u64().unwrap(), queue);
                    let inner = if inner == "i8" { "u8".to_string() } else { inner };
                    (format!("[{inner}; {n}]"), each * n)
                }
                "STRUCT" => {
                    let name = t["name"].as_str().unwrap().to_string();
                    let rust = camel(&name);
                    if !queue.contains(&name) {
                        queue.push(name);
                    }
                    (rust, size())
                }
                k => panic!(
                    "BTF kind {k} in a shared record: only ints, enums, arrays and structs cross the boundary"
                ),
            }
        }

        /// `#[repr(C)] pub struct ...` for `struct name`, every hole the C
        /// compiler left made an explicit `_padN` field, its size asserted.
        fn struct_decl(&self, name: &str, queue: &mut Vec<String>) -> String {
            let t = self.find("STRUCT", name);
            let size = t["size"].as_u64().unwrap();
            let rust = camel(name);
            let mut code = format!(
                "\n/// `struct {name}` ({size} bytes).\n#[repr(C)]\n\
                 #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]\npub struct {rust} {{\n"
            );
            let (mut at, mut pads) = (0, 0);
            let mut pad_to = |code: &mut String, at: u64, to: u64| {
                if to > at {
                    *code += &format!("    pub _pad{pads}: [u8; {}],\n", to - at);
                    pads += 1;
                }
            };
            for m in t["members"].as_array().unwrap() {
                assert!(
                    m.get("bitfield_size").is_none(),
                    "bitfield in struct {name}"
                );
                let off = m["bits_offset"].as_u64().unwrap() / 8;
                pad_to(&mut code, at, off);
                let (ty, sz) = self.rust_of(m["type_id"].as_u64().unwrap(), queue);
                code += &format!("    pub {}: {ty},\n", m["name"].as_str().unwrap());
                at = off + sz;
            }
            pad_to(&mut code, at, size);
            code + &format!("}}\nconst _: () = assert!(std::mem::size_of::<{rust}>() == {size});\n")
        }

        /// `pub mod stat { pub const PROBE: u32 = 0; ... }` for `enum
        /// bloatd_stat`: the common prefix of the values' names stripped.
        fn enum_mod(&self, name: &str) -> String {
            let values = self.find("ENUM", name)["values"].as_array().unwrap();
            let names: Vec<&str> = values.iter().map(|v| v["name"].as_str().unwrap()).collect();
            let mut prefix = names[0].to_string();
            for n in &names {
                while !n.starts_with(&prefix) {
                    prefix.pop();
                }
            }
            let prefix = &prefix[..prefix.rfind('_').map(|i| i + 1).unwrap_or(0)];
            let mut code = format!(
                "\n/// `enum {name}`.\npub mod {} {{\n",
                name.trim_start_matches("bloatd_")
            );
            for (v, n) in values.iter().zip(&names) {
                code += &format!(
                    "    pub const {}: u32 = {};\n",
                    &n[prefix.len()..],
                    v["val"]
                );
            }
            code + "}\n"
        }
    }
}
