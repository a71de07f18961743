//! The dashboard in a real terminal (tmux, installed by scripts/deps.sh):
//! it draws, quits on `q`, and gives the terminal back (cooked mode, echo,
//! main screen) on quit and on a panic, with the panic message readable.
//!
//! The test binary runs itself as the dashboard inside a tmux pane when
//! BLOATD_TUI_CHILD is set. No libtest harness (`harness = false` in
//! Cargo.toml): its failure report would print the panic message again
//! after the terminal is restored, and hide a hook that loses it.
// A test, a bench or an example stops at what it cannot do: unwraps are its way.
#![allow(clippy::unwrap_used)]

use bloatd_model::fixtures as common;
// The tests' one wait (the kernel tests' helper library, std only).
#[path = "../../struct_ops/tests/common/wait.rs"]
#[allow(dead_code)]
mod wait;

use bloatd_model::Snapshot;
use bloatd_model::SnapshotRequest;
use bloatd_tui::{Options, Source};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

struct Host {
    calls: u32,
    panic_at: Option<u32>,
}

impl Source for Host {
    fn snapshot(&mut self, _: &SnapshotRequest) -> bloatd_tui::Result<Snapshot> {
        self.calls += 1;
        if self.panic_at == Some(self.calls) {
            panic!("test source panics at refresh {}", self.calls);
        }
        let mut snap = common::cubic_download_host();
        snap.taken_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        Ok(snap)
    }
}

fn child(mode: &str) {
    let mut host = Host {
        calls: 0,
        panic_at: (mode == "panic").then_some(8),
    };
    bloatd_tui::run(&mut host, &Options::default()).unwrap();
}

fn main() {
    if let Ok(mode) = std::env::var("BLOATD_TUI_CHILD") {
        child(&mode);
        return;
    }
    let tests: [(&str, fn()); 2] = [
        (
            "quits_on_q_and_restores_the_terminal",
            quits_on_q_and_restores_the_terminal,
        ),
        (
            "restores_the_terminal_on_panic_and_keeps_the_message",
            restores_the_terminal_on_panic_and_keeps_the_message,
        ),
    ];
    for (name, test) in tests {
        println!("test {name} ...");
        // A failing assertion panics: the process exits non-zero.
        test();
        println!("test {name} ... ok");
    }
}

/// A private tmux server with one pane running the `child` test; killed on
/// drop, also when the test fails.
struct Pane {
    server: String,
    dir: PathBuf,
}

impl Pane {
    fn start(mode: &str) -> Pane {
        let server = format!("bloatd-tui-test-{}-{mode}", std::process::id());
        let dir = std::env::temp_dir().join(&server);
        std::fs::create_dir_all(&dir).unwrap();
        let exe = std::env::current_exe().unwrap();
        let script = format!(
            "env BLOATD_TUI_CHILD={mode} RUST_BACKTRACE=0 {exe}; \
             echo exit=$? > {dir}/exit; stty -a > {dir}/stty; sleep 60",
            exe = exe.display(),
            dir = dir.display(),
        );
        let pane = Pane { server, dir };
        let status = pane
            .tmux(&["new-session", "-d", "-x", "100", "-y", "30", &script])
            .status()
            .expect("tmux not found: install it with scripts/deps.sh");
        assert!(status.success());
        pane
    }

    fn tmux(&self, args: &[&str]) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.server, "-f", "/dev/null"]).args(args);
        c
    }

    fn screen(&self) -> String {
        let out = self.tmux(&["capture-pane", "-p"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits up to 20 s for `what` to be true of the screen.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let mut screen = String::new();
        let held = wait::wait_for_every(20.0, Duration::from_millis(100), || {
            screen = self.screen();
            ok(&screen)
        });
        assert!(held, "timed out waiting for {what}; screen:\n{screen}");
        screen
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn assert_cooked(stty: &str) {
    let flags: Vec<&str> = stty.split_whitespace().collect();
    assert!(
        flags.contains(&"icanon"),
        "terminal left in raw mode:\n{stty}"
    );
    assert!(
        flags.contains(&"echo"),
        "terminal left without echo:\n{stty}"
    );
}

fn quits_on_q_and_restores_the_terminal() {
    let pane = Pane::start("quit");
    let screen = pane.wait_for("the table", |s| s.contains("93.184.215.14:443"));
    assert!(screen.contains("QDELAY"), "{screen}");
    pane.tmux(&["send-keys", "q"]).status().unwrap();
    pane.wait_for("the exit", |_| !pane.file("stty").is_empty());
    assert_eq!(pane.file("exit").trim(), "exit=0");
    assert_cooked(&pane.file("stty"));
    // Back on the main screen: the dashboard is gone from view.
    let screen = pane.screen();
    assert!(!screen.contains("QDELAY"), "{screen}");
}

fn restores_the_terminal_on_panic_and_keeps_the_message() {
    let pane = Pane::start("panic");
    pane.wait_for("the table", |s| s.contains("93.184.215.14:443"));
    let screen = pane.wait_for("the panic message", |s| {
        s.contains("test source panics at refresh 8")
    });
    assert!(!screen.contains("QDELAY"), "{screen}");
    pane.wait_for("the exit", |_| !pane.file("stty").is_empty());
    assert_cooked(&pane.file("stty"));
    assert_eq!(pane.file("exit").trim(), "exit=101");
    // The message was not overwritten by a second restore.
    assert!(pane.screen().contains("panicked at"), "{}", pane.screen());
}
