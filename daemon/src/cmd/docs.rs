//! `bloatd generate-docs DIR`, for packaging: man pages and shell
//! completions from the CLI definition.

use std::process::ExitCode;

/// Man pages (bloatd.1 and one per subcommand, bloatd-start.1, ...) and
/// completions for bash, zsh and fish, from `cmd`, the CLI definition (cli.rs).
pub fn generate(cmd: clap::Command, dir: &std::path::Path) -> crate::error::Result<ExitCode> {
    let man = dir.join("man");
    std::fs::create_dir_all(&man)?;
    clap_mangen::generate_to(cmd.clone(), &man)?;
    let completions = dir.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in [
        clap_complete::Shell::Bash,
        clap_complete::Shell::Zsh,
        clap_complete::Shell::Fish,
    ] {
        clap_complete::generate_to(shell, &mut cmd.clone(), "bloatd", &completions)?;
    }
    Ok(ExitCode::SUCCESS)
}
