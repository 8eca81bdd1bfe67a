//! The attachment root on disk: content-addressed blobs and their metadata,
//! and the one check every path goes through before it is touched.

use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Why a media operation was refused or failed. Each has a stable code for receipts.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    #[error("no artifact {0}")]
    NotFound(String),
    #[error("{0:?} leads outside the attachment root")]
    OutsideRoot(String),
    #[error("{size} bytes is over the {limit}-byte limit")]
    TooLarge { size: u64, limit: u64 },
    #[error("{0:?} is not an artifact id (sha256:<64 hex>)")]
    BadId(String),
    #[error("content type {0:?} is not accepted")]
    Type(String),
    #[error("the download failed: {0}")]
    Download(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl MediaError {
    /// The code receipts and replies carry.
    pub fn code(&self) -> &'static str {
        match self {
            MediaError::NotFound(_) => "not_found",
            MediaError::OutsideRoot(_) => "outside_root",
            MediaError::TooLarge { .. } => "too_large",
            MediaError::BadId(_) => "bad_id",
            MediaError::Type(_) => "type_refused",
            MediaError::Download(_) => "download_failed",
            MediaError::Io(_) => "io",
        }
    }
}

/// What is known of a stored artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    pub filename: String,
    pub content_type: String,
    pub size: u64,
}

/// The attachment root. Build it from `clankie_settings::attachment_root`, never from a path of your own.
#[derive(Debug, Clone)]
pub struct Root {
    dir: PathBuf,
}

/// Keeps only a safe file name: no separators, no leading dots, bounded.
pub fn clean_filename(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or_default();
    let cleaned: String = base.chars().filter(|c| c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | ' ')).take(100).collect();
    let cleaned = cleaned.trim_start_matches('.').trim().to_owned();
    if cleaned.is_empty() { "file".into() } else { cleaned }
}

fn hex_of(id: &str) -> Result<&str, MediaError> {
    let hex = id.strip_prefix("sha256:").ok_or_else(|| MediaError::BadId(id.chars().take(80).collect()))?;
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) {
        Ok(hex)
    } else {
        Err(MediaError::BadId(id.chars().take(80).collect()))
    }
}

impl Root {
    /// The root at `dir` (created if missing).
    pub fn open(dir: PathBuf) -> Result<Root, MediaError> {
        std::fs::create_dir_all(&dir)?;
        Ok(Root { dir })
    }

    /// The root directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Resolves a relative name under the root, refusing `..`, absolute paths and
    /// symlinks that lead out of it.
    pub fn safe_path(&self, name: &str) -> Result<PathBuf, MediaError> {
        let refuse = || MediaError::OutsideRoot(name.chars().take(120).collect());
        let rel = Path::new(name);
        if name.is_empty() || rel.is_absolute() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(refuse());
        }
        let root = self.dir.canonicalize()?;
        let joined = root.join(rel);
        // Follow whatever exists of the path; it must stay inside the root.
        let mut probe = joined.clone();
        while !probe.exists() {
            match probe.parent() {
                Some(p) => probe = p.to_path_buf(),
                None => return Err(refuse()),
            }
        }
        if !probe.canonicalize()?.starts_with(&root) {
            return Err(refuse());
        }
        Ok(joined)
    }

    fn blob_name(hex: &str) -> String {
        format!("sha256/{}/{hex}", &hex[..2])
    }

    fn meta_name(hex: &str) -> String {
        format!("meta/{hex}.json")
    }

    /// Stores bytes under their content address; storing the same bytes again writes nothing.
    pub fn store(&self, bytes: &[u8], filename: &str, content_type: &str) -> Result<(String, Meta), MediaError> {
        let hex = format!("{:x}", Sha256::digest(bytes));
        let id = format!("sha256:{hex}");
        let meta = Meta { filename: clean_filename(filename), content_type: content_type.to_owned(), size: bytes.len() as u64 };
        let blob = self.safe_path(&Root::blob_name(&hex))?;
        if !blob.exists() {
            if let Some(parent) = blob.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let tmp = blob.with_extension("tmp");
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &blob)?;
        }
        let meta_path = self.safe_path(&Root::meta_name(&hex))?;
        if let Some(parent) = meta_path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(meta_path, serde_json::to_vec(&meta).map_err(std::io::Error::other)?)?;
        Ok((id, meta))
    }

    /// The path and metadata of an artifact, checked to lie inside the root.
    pub fn resolve(&self, id: &str, limit: u64) -> Result<(PathBuf, Meta), MediaError> {
        let hex = hex_of(id)?;
        let blob = self.safe_path(&Root::blob_name(hex))?;
        if !blob.is_file() {
            return Err(MediaError::NotFound(id.to_owned()));
        }
        let meta: Meta = std::fs::read(self.safe_path(&Root::meta_name(hex))?)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Meta { filename: "file".into(), content_type: "application/octet-stream".into(), size: 0 });
        let size = std::fs::metadata(&blob)?.len();
        if size > limit {
            return Err(MediaError::TooLarge { size, limit });
        }
        Ok((blob, Meta { size, ..meta }))
    }

    /// Remembers which artifact an inbound Discord attachment became.
    pub fn index_attachment(&self, attachment_id: u64, id: &str) -> Result<(), MediaError> {
        let path = self.safe_path(&format!("attachments/{attachment_id}"))?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, id)?;
        Ok(())
    }

    /// The artifact an inbound attachment became, if it was stored.
    pub fn attachment(&self, attachment_id: u64) -> Option<String> {
        let path = self.safe_path(&format!("attachments/{attachment_id}")).ok()?;
        std::fs::read_to_string(path).ok()
    }

    /// Forgets inbound attachments `ids` (a forgotten person's): their index entries go, and
    /// each stored file with them once no other attachment's entry refers to it. Returns how
    /// many entries and files went.
    pub fn forget_attachments(&self, ids: &[u64]) -> Result<(u64, u64), MediaError> {
        let mut artifacts = std::collections::BTreeSet::new();
        let mut entries = 0;
        for id in ids {
            let path = self.safe_path(&format!("attachments/{id}"))?;
            if let Ok(artifact) = std::fs::read_to_string(&path) {
                std::fs::remove_file(&path)?;
                artifacts.insert(artifact);
                entries += 1;
            }
        }
        if artifacts.is_empty() {
            return Ok((0, 0));
        }
        let index = self.safe_path("attachments")?;
        for entry in std::fs::read_dir(&index).into_iter().flatten().filter_map(Result::ok) {
            if let Ok(still) = std::fs::read_to_string(entry.path()) {
                artifacts.remove(&still);
            }
        }
        let mut files = 0;
        for artifact in artifacts {
            let Ok(hex) = hex_of(&artifact) else { continue };
            for name in [Root::blob_name(hex), Root::meta_name(hex)] {
                let path = self.safe_path(&name)?;
                if path.is_file() {
                    std::fs::remove_file(&path)?;
                    files += 1;
                }
            }
        }
        Ok((entries, files))
    }

    /// Deletes blobs older than `max_age`, then the oldest until the total fits `max_total`,
    /// never touching one used (stored or resolved) within `pinned_for`.
    pub fn sweep(&self, max_age: Duration, max_total: u64, pinned_for: Duration) -> Result<SweepReport, MediaError> {
        let now = SystemTime::now();
        let mut blobs: Vec<(PathBuf, SystemTime, u64)> = Vec::new();
        for shard in std::fs::read_dir(self.dir.join("sha256")).into_iter().flatten().filter_map(Result::ok) {
            for blob in std::fs::read_dir(shard.path()).into_iter().flatten().filter_map(Result::ok) {
                let md = blob.metadata()?;
                let used = md.accessed().unwrap_or(SystemTime::UNIX_EPOCH).max(md.modified().unwrap_or(SystemTime::UNIX_EPOCH));
                blobs.push((blob.path(), used, md.len()));
            }
        }
        blobs.sort_by_key(|(_, used, _)| *used);
        let mut total: u64 = blobs.iter().map(|(_, _, s)| s).sum();
        let mut report = SweepReport::default();
        for (path, used, size) in blobs {
            let age = now.duration_since(used).unwrap_or_default();
            if age < pinned_for {
                report.kept_pinned += 1;
                continue;
            }
            if age > max_age || total > max_total {
                std::fs::remove_file(&path)?;
                total -= size;
                report.removed += 1;
                report.bytes_freed += size;
            }
        }
        Ok(report)
    }
}

/// What a sweep did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    pub removed: u64,
    pub bytes_freed: u64,
    pub kept_pinned: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (Root, PathBuf) {
        let dir = std::env::temp_dir().join(format!("clankie-media-unit-{}-{}", std::process::id(), rand_suffix()));
        (Root::open(dir.clone()).unwrap(), dir)
    }

    fn rand_suffix() -> u128 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    }

    /// A forgotten person's attachment goes with its file; the same bytes sent by someone else
    /// keep theirs.
    #[test]
    fn erase_drops_their_attachments_and_keeps_a_file_another_attachment_refers_to() {
        let (r, dir) = root();
        let (theirs, _) = r.store(b"only theirs", "a.png", "image/png").unwrap();
        let (shared, _) = r.store(b"sent by both", "b.png", "image/png").unwrap();
        r.index_attachment(1, &theirs).unwrap();
        r.index_attachment(2, &shared).unwrap();
        r.index_attachment(3, &shared).unwrap();
        assert_eq!(r.forget_attachments(&[1, 2, 99]).unwrap(), (2, 2), "two entries, and the blob and meta of theirs alone");
        assert!(r.attachment(1).is_none() && r.attachment(2).is_none());
        assert!(matches!(r.resolve(&theirs, u64::MAX), Err(MediaError::NotFound(_))));
        assert_eq!(r.attachment(3).as_deref(), Some(shared.as_str()));
        assert!(r.resolve(&shared, u64::MAX).is_ok(), "a file someone else's attachment refers to was dropped");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn traversal_absolute_and_symlinks_out_are_refused() {
        let (r, dir) = root();
        for bad in ["../x", "a/../../x", "/etc/passwd", "", "./x"] {
            assert!(matches!(r.safe_path(bad), Err(MediaError::OutsideRoot(_))), "{bad}");
        }
        std::os::unix::fs::symlink("/etc", dir.join("escape")).unwrap();
        assert!(matches!(r.safe_path("escape/passwd"), Err(MediaError::OutsideRoot(_))));
        assert!(r.safe_path("sha256/ab/cd").is_ok());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_same_bytes_are_stored_once() {
        let (r, dir) = root();
        let (a, _) = r.store(b"png bytes", "../../a.png", "image/png").unwrap();
        let (b, meta) = r.store(b"png bytes", "b.png", "image/png").unwrap();
        assert_eq!(a, b);
        assert_eq!(meta.filename, "b.png");
        let (path, m) = r.resolve(&a, 100).unwrap();
        assert_eq!(std::fs::read(path).unwrap(), b"png bytes");
        assert_eq!(m.size, 9);
        assert!(matches!(r.resolve(&a, 3), Err(MediaError::TooLarge { .. })));
        assert!(matches!(r.resolve("sha256:nothex", 100), Err(MediaError::BadId(_))));
        assert!(matches!(r.resolve(&format!("sha256:{}", "0".repeat(64)), 100), Err(MediaError::NotFound(_))));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn filenames_lose_their_paths() {
        assert_eq!(clean_filename("../../etc/passwd"), "passwd");
        assert_eq!(clean_filename("..\\..\\x.png"), "x.png");
        assert_eq!(clean_filename(".hidden"), "hidden");
        assert_eq!(clean_filename("///"), "file");
    }

    #[test]
    fn the_sweeper_keeps_what_is_pinned() {
        let (r, dir) = root();
        r.store(b"one", "1", "text/plain").unwrap();
        let kept = r.sweep(Duration::ZERO, 0, Duration::from_secs(3600)).unwrap();
        assert_eq!((kept.removed, kept.kept_pinned), (0, 1));
        let swept = r.sweep(Duration::ZERO, 0, Duration::ZERO).unwrap();
        assert_eq!(swept.removed, 1);
        let _ = std::fs::remove_dir_all(dir);
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        fn cases() -> u32 {
            std::env::var("CLANKIE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
        }

        /// Names built from the pieces path tricks are made of.
        fn names() -> impl Strategy<Value = String> {
            let piece = prop_oneof![
                Just("..".to_owned()),
                Just(".".to_owned()),
                Just("/".to_owned()),
                Just("\\".to_owned()),
                Just("out".to_owned()),
                Just("inside".to_owned()),
                Just("sha256".to_owned()),
                Just("\0".to_owned()),
                Just("%2e%2e".to_owned()),
                Just("~".to_owned()),
                "[a-z]{1,6}",
                any::<char>().prop_map(String::from),
            ];
            proptest::collection::vec(piece, 0..10).prop_map(|v| v.concat())
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

            #[test]
            fn fuzz_safe_path_never_leaves_the_root(names in proptest::collection::vec(names(), 1..8)) {
                thread_local! {
                    // One root per test thread, with a symlink leading out of it and one staying inside.
                    static ROOT: (Root, PathBuf) = {
                        let (root, dir) = super::root();
                        let outside = dir.with_extension("outside");
                        std::fs::create_dir_all(&outside).unwrap();
                        std::fs::create_dir_all(dir.join("inside")).unwrap();
                        let _ = std::os::unix::fs::symlink(&outside, dir.join("out"));
                        let _ = std::os::unix::fs::symlink(dir.join("inside"), dir.join("sha256"));
                        (root, dir)
                    };
                }
                ROOT.with(|(root, dir)| {
                    let canonical = dir.canonicalize().unwrap();
                    for name in &names {
                        if let Ok(path) = root.safe_path(name) {
                            prop_assert!(path.starts_with(&canonical), "{name:?} -> {path:?}");
                            prop_assert!(path.components().all(|c| matches!(c, Component::Normal(_) | Component::RootDir)), "{name:?}");
                            // Whatever of it exists resolves inside the root.
                            let mut probe = path.clone();
                            while !probe.exists() {
                                probe = probe.parent().unwrap().to_path_buf();
                            }
                            prop_assert!(probe.canonicalize().unwrap().starts_with(&canonical), "{name:?} escapes through a link");
                        }
                    }
                    Ok(())
                })?;
            }
        }
    }
}
