//! Pinned PyPI wheels installed outside the clone, for the tools the stack runs on Python.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::StackError;

/// Where the machine's tools live: `CLANKIE_TOOLS_DIR`, else `/var/tmp/clankie-tools`.
pub(crate) fn tools_dir() -> PathBuf {
    std::env::var_os("CLANKIE_TOOLS_DIR").map_or_else(|| PathBuf::from("/var/tmp/clankie-tools"), PathBuf::from)
}

/// Installs `wheels` (each `name==version`, the whole set pinned, so nothing is resolved) with
/// `pip install --no-deps --target` into `dir`. The install goes to a sibling directory renamed
/// into place, so a concurrent or interrupted install never leaves a half-filled one behind;
/// another process that finished first wins. `what` names the set in errors.
pub(crate) fn install(dir: &Path, wheels: &[String], what: &'static str, installed: impl Fn(&Path) -> bool) -> Result<(), StackError> {
    let parent = dir.parent().unwrap_or(Path::new("/var/tmp"));
    std::fs::create_dir_all(parent).map_err(|source| StackError::Io { path: parent.to_owned(), source })?;
    let staging = parent.join(format!(".{}.{}", dir.file_name().and_then(|n| n.to_str()).unwrap_or("wheels"), std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let output = Command::new("python3")
        .args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--target"])
        .arg(&staging)
        .args(wheels)
        // A directory of our own, never the system's site-packages: Debian's "externally
        // managed" guard has nothing to protect here.
        .env("PIP_BREAK_SYSTEM_PACKAGES", "1")
        .stdin(Stdio::null())
        .output()
        .map_err(|source| StackError::Spawn { program: "python3 -m pip".into(), source })?;
    if !output.status.success() {
        let _ = std::fs::remove_dir_all(&staging);
        let said = String::from_utf8_lossy(&output.stderr);
        let last = said.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").chars().take(300).collect::<String>();
        return Err(StackError::PipInstall { what, status: output.status.to_string(), said: last });
    }
    match std::fs::rename(&staging, dir) {
        Ok(()) => Ok(()),
        Err(_) if installed(dir) => {
            let _ = std::fs::remove_dir_all(&staging);
            Ok(())
        }
        Err(source) => Err(StackError::Io { path: dir.to_owned(), source }),
    }
}
