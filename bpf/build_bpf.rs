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
        for h in ["vmlinux.h", "bloatd.h", "floor.h", "floor_path.h", "stats.h", "policy.h", "policy_ops.h", "service_ops.h", "build_bpf.rs"] {
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

    /// Compile and run a host C program (C arithmetic whose output a Rust
    /// test checks: struct_ops/idle_test.c); returns its standard output.
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

    /// Rust declarations of C types, generated from a BPF object's BTF (read
    /// with `bpftool -j btf dump`): `#[repr(C)]` structs with every field at
    /// the offset the C compiler gave it (explicit padding where it left a
    /// hole, a size check), and each enum as a module of constants with the
    /// common prefix of its names stripped (`enum bloatd_stat` ->
    /// `mod stat { pub const PROBE: u32 = 0; ... }`). Structs that the
    /// listed ones contain are generated too. This is the only Rust
    /// definition of the records that cross the kernel boundary.
    pub fn rust_types(obj: &Path, structs: &[&str], enums: &[&str]) -> String {
        let out = Command::new("bpftool")
            .args(["-j", "btf", "dump", "file"])
            .arg(obj)
            .output()
            .unwrap_or_else(|e| panic!("running bpftool (install it with `sudo make deps`): {e}"));
        assert!(out.status.success(), "bpftool btf dump {} failed", obj.display());
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool JSON");
        let types = doc["types"].as_array().expect("types");
        let by_id: std::collections::HashMap<u64, &serde_json::Value> =
            types.iter().map(|t| (t["id"].as_u64().expect("id"), t)).collect();
        let find = |kind: &str, name: &str| -> &serde_json::Value {
            types
                .iter()
                .find(|t| t["kind"] == kind && t["name"] == name)
                .unwrap_or_else(|| panic!("{kind} {name} not in the BTF of {}", obj.display()))
        };
        let camel = |name: &str| -> String {
            name.split('_')
                .map(|w| {
                    let mut c = w.chars();
                    c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
                })
                .collect()
        };
        // The Rust type of a BTF type id; nested structs are queued.
        fn rust_of(
            id: u64,
            by_id: &std::collections::HashMap<u64, &serde_json::Value>,
            camel: &dyn Fn(&str) -> String,
            queue: &mut Vec<String>,
        ) -> (String, u64) {
            let t = by_id[&id];
            match t["kind"].as_str().unwrap() {
                "TYPEDEF" | "VOLATILE" | "CONST" => rust_of(t["type_id"].as_u64().unwrap(), by_id, camel, queue),
                "INT" => {
                    let size = t["size"].as_u64().unwrap();
                    let signed = t["encoding"] == "SIGNED";
                    let ty = match (size, signed) {
                        (1, false) => "u8",
                        (1, true) => "i8",
                        (2, false) => "u16",
                        (2, true) => "i16",
                        (4, false) => "u32",
                        (4, true) => "i32",
                        (8, false) => "u64",
                        (8, true) => "i64",
                        _ => panic!("int of size {size}"),
                    };
                    (ty.to_string(), size)
                }
                "ENUM" => (format!("u{}", t["size"].as_u64().unwrap() * 8), t["size"].as_u64().unwrap()),
                "ARRAY" => {
                    let n = t["nr_elems"].as_u64().unwrap();
                    let (inner, size) = rust_of(t["type_id"].as_u64().unwrap(), by_id, camel, queue);
                    let inner = if inner == "i8" { "u8".to_string() } else { inner };
                    (format!("[{inner}; {n}]"), size * n)
                }
                "STRUCT" => {
                    let name = t["name"].as_str().unwrap().to_string();
                    if !queue.contains(&name) {
                        queue.push(name.clone());
                    }
                    (camel(&name), t["size"].as_u64().unwrap())
                }
                k => panic!("BTF kind {k} in a shared record: only ints, enums, arrays and structs cross the boundary"),
            }
        }
        let mut code = String::from("// Generated by bpf/build_bpf.rs from the BPF object's BTF. Do not edit.\n");
        let mut queue: Vec<String> = structs.iter().map(|s| s.to_string()).collect();
        let mut done = 0;
        while done < queue.len() {
            let name = queue[done].clone();
            done += 1;
            let t = find("STRUCT", &name);
            let size = t["size"].as_u64().unwrap();
            code += &format!(
                "\n/// `struct {name}` ({size} bytes).\n#[repr(C)]\n#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]\npub struct {} {{\n",
                camel(&name)
            );
            let mut at = 0;
            let mut pads = 0;
            for m in t["members"].as_array().unwrap() {
                assert!(m.get("bitfield_size").is_none(), "bitfield in struct {name}");
                let off = m["bits_offset"].as_u64().unwrap() / 8;
                if off > at {
                    code += &format!("    pub _pad{pads}: [u8; {}],\n", off - at);
                    pads += 1;
                }
                let (ty, sz) = rust_of(m["type_id"].as_u64().unwrap(), &by_id, &camel, &mut queue);
                code += &format!("    pub {}: {ty},\n", m["name"].as_str().unwrap());
                at = off + sz;
            }
            if size > at {
                code += &format!("    pub _pad{pads}: [u8; {}],\n", size - at);
            }
            code += &format!(
                "}}\nconst _: () = assert!(std::mem::size_of::<{0}>() == {size});\n",
                camel(&name)
            );
        }
        for name in enums {
            let t = find("ENUM", name);
            let values = t["values"].as_array().unwrap();
            let names: Vec<&str> = values.iter().map(|v| v["name"].as_str().unwrap()).collect();
            let mut prefix = names[0].to_string();
            for n in &names {
                while !n.starts_with(&prefix) {
                    prefix.pop();
                }
            }
            let prefix = &prefix[..prefix.rfind('_').map(|i| i + 1).unwrap_or(0)];
            code += &format!("\n/// `enum {name}`.\npub mod {} {{\n", name.trim_start_matches("bloatd_"));
            for v in values {
                let n = v["name"].as_str().unwrap();
                code += &format!("    pub const {}: u32 = {};\n", &n[prefix.len()..], v["val"]);
            }
            code += "}\n";
        }
        code
    }
}
