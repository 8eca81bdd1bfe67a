//! The shard's session and resume URL, saved so a restart resumes instead of re-identifying.

use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedSession {
    pub session_id: String,
    pub sequence: u64,
    pub resume_url: String,
}

fn file(dir: &Path, shard: u32) -> std::path::PathBuf {
    dir.join(format!("shard-{shard}.json"))
}

pub(crate) fn load(dir: &Path, shard: u32) -> Option<SavedSession> {
    let text = std::fs::read_to_string(file(dir, shard)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Writes atomically (temp file, then rename) so a crash never leaves half a session.
pub(crate) fn save(dir: &Path, shard: u32, session: &SavedSession) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("shard-{shard}.json.tmp"));
    std::fs::write(&tmp, serde_json::to_vec(session).map_err(std::io::Error::other)?)?;
    std::fs::rename(tmp, file(dir, shard))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_session_loads_back() {
        let dir = std::env::temp_dir().join(format!("clankie-session-test-{}", std::process::id()));
        let s = SavedSession { session_id: "s".into(), sequence: 7, resume_url: "ws://x".into() };
        save(&dir, 0, &s).unwrap();
        assert_eq!(load(&dir, 0), Some(s));
        assert_eq!(load(&dir, 1), None);
        let _ = std::fs::remove_dir_all(dir);
    }
}
