//! The offline engines: espeak-ng speaks, pocketsphinx transcribes. For rehearsal and tests, not
//! real rooms: pocketsphinx is reliable on synthesized speech only with a grammar of the phrases
//! it may hear.

use std::path::PathBuf;
use std::time::Duration;

use tokio::process::Command;

use crate::audio::Audio;
use crate::engine::{SpeechToText, TextToSpeech};
use crate::error::SpeechError;

/// pocketsphinx-en-us's acoustic model and dictionary, as Debian installs them.
const MODEL: &str = "/usr/share/pocketsphinx/model/en-us/en-us";
const DICTIONARY: &str = "/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict";
/// The rate pocketsphinx's model is trained at.
const STT_RATE: u32 = 16_000;

/// His names as the dictionary spells them out, since cmudict does not know them.
pub fn his_names() -> Vec<(String, String)> {
    vec![("clankie".into(), "K L AE NG K IY".into()), ("clanky".into(), "K L AE NG K IY".into())]
}

async fn run(mut command: Command, timeout: Duration, what: &str) -> Result<Vec<u8>, SpeechError> {
    command.kill_on_drop(true).stdin(std::process::Stdio::null());
    let output = match tokio::time::timeout(timeout, command.output()).await {
        Err(_) => return Err(SpeechError::Timeout),
        Ok(Err(e)) => return Err(SpeechError::Engine(format!("{what} could not run ({e}); deploy/local installs it"))),
        Ok(Ok(o)) => o,
    };
    if !output.status.success() {
        return Err(SpeechError::Engine(format!("{what} exited with {}", output.status)));
    }
    Ok(output.stdout)
}

/// espeak-ng, speaking at 160 words a minute.
pub struct Espeak {
    timeout: Duration,
}

impl Espeak {
    pub fn new(timeout: Duration) -> Espeak {
        Espeak { timeout }
    }
}

#[async_trait::async_trait]
impl TextToSpeech for Espeak {
    async fn synthesize(&self, text: &str) -> Result<Audio, SpeechError> {
        let mut command = Command::new("espeak-ng");
        command.args(["-s", "160", "--stdout", "--"]).arg(text);
        let audio = Audio::from_wav(&run(command, self.timeout, "espeak-ng").await?)?;
        if audio.pcm.is_empty() {
            return Err(SpeechError::EmptyAudio);
        }
        Ok(audio)
    }

    fn describe(&self) -> String {
        "espeak-ng (offline, for rehearsal)".into()
    }
}

/// pocketsphinx_continuous over a WAV file, with a grammar when one is given.
pub struct Pocketsphinx {
    grammar: Option<PathBuf>,
    dictionary: Option<PathBuf>,
    scratch: PathBuf,
    timeout: Duration,
}

impl Pocketsphinx {
    /// A transcriber; `extra_words` (word, phones) join the dictionary, so his names are known.
    pub fn new(grammar: Option<PathBuf>, extra_words: &[(String, String)], timeout: Duration) -> Result<Pocketsphinx, SpeechError> {
        static ENGINES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let engine = ENGINES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temp = std::env::temp_dir();
        sweep_scratch_of_the_dead(&temp);
        let scratch = temp.join(format!("{SCRATCH_PREFIX}{}-{engine}", std::process::id()));
        std::fs::create_dir_all(&scratch).map_err(|e| SpeechError::Engine(format!("scratch directory: {e}")))?;
        let dictionary = if extra_words.is_empty() {
            None
        } else {
            let mut dict = std::fs::read_to_string(DICTIONARY).unwrap_or_default();
            for (word, phones) in extra_words {
                dict.push_str(&format!("\n{} {}", word.to_lowercase(), phones));
            }
            let path = scratch.join("words.dict");
            std::fs::write(&path, dict).map_err(|e| SpeechError::Engine(format!("dictionary: {e}")))?;
            Some(path)
        };
        Ok(Pocketsphinx { grammar, dictionary, scratch, timeout })
    }
}

/// An engine's scratch directory is `clankie-stt-<pid>-<n>` in the temp directory.
const SCRATCH_PREFIX: &str = "clankie-stt-";

impl Drop for Pocketsphinx {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// Removes the scratch directories of processes that are gone: a killed process never drops
/// its engines, and a test suite kills many.
fn sweep_scratch_of_the_dead(temp: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(temp) else { return };
    if !std::path::Path::new("/proc/self").exists() {
        return;
    }
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(SCRATCH_PREFIX)).and_then(|rest| rest.split('-').next()) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !std::path::Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[async_trait::async_trait]
impl SpeechToText for Pocketsphinx {
    async fn transcribe(&self, audio: &Audio) -> Result<String, SpeechError> {
        if audio.pcm.is_empty() {
            return Err(SpeechError::EmptyAudio);
        }
        let pcm = clankie_pcm::resample(&audio.pcm, audio.rate, STT_RATE);
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let file = self.scratch.join(format!("utterance-{}.wav", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
        std::fs::write(&file, clankie_pcm::wav(&pcm, STT_RATE)).map_err(|e| SpeechError::Engine(format!("utterance file: {e}")))?;
        let mut command = Command::new("pocketsphinx_continuous");
        command.arg("-infile").arg(&file).args(["-hmm", MODEL, "-logfn", "/dev/null"]);
        if let Some(grammar) = &self.grammar {
            command.arg("-jsgf").arg(grammar);
        }
        if let Some(dict) = &self.dictionary {
            command.arg("-dict").arg(dict);
        }
        let result = run(command, self.timeout, "pocketsphinx_continuous").await;
        let _ = std::fs::remove_file(&file);
        let out = String::from_utf8_lossy(&result?).into_owned();
        Ok(out.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" "))
    }

    fn describe(&self) -> String {
        format!("pocketsphinx (offline, for rehearsal{})", if self.grammar.is_some() { ", with a grammar" } else { "" })
    }
}

/// A JSGF grammar whose one rule is any of `phrases` (lowercased, punctuation dropped).
pub fn grammar(phrases: &[&str]) -> String {
    let alternatives: Vec<String> = phrases
        .iter()
        .map(|p| p.to_lowercase().chars().map(|c| if c.is_alphanumeric() || c == '\'' { c } else { ' ' }).collect::<String>())
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect();
    format!("#JSGF V1.0;\ngrammar room;\npublic <line> = {};\n", alternatives.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_of_a_process_that_is_gone_is_swept_and_a_live_ones_is_kept() {
        let temp = std::env::temp_dir().join(format!("clankie-stt-sweep-test-{}", std::process::id()));
        let (dead, live, other) = (
            temp.join(format!("{SCRATCH_PREFIX}4194999-0")),
            temp.join(format!("{SCRATCH_PREFIX}{}-3", std::process::id())),
            temp.join("someone-elses"),
        );
        for dir in [&dead, &live, &other] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("words.dict"), "a AH").unwrap();
        }
        sweep_scratch_of_the_dead(&temp);
        assert!(!dead.exists(), "a pid above Linux's largest is no process");
        assert!(live.exists() && other.exists());
        std::fs::remove_dir_all(&temp).unwrap();
    }

    #[test]
    fn an_engine_removes_its_scratch_when_dropped() {
        let engine = Pocketsphinx::new(None, &[("clankie".into(), "K L AE NG K IY".into())], Duration::from_secs(1)).unwrap();
        let scratch = engine.scratch.clone();
        assert!(scratch.join("words.dict").exists());
        drop(engine);
        assert!(!scratch.exists());
    }
}
