//! Media: everything that touches the attachment root.
//!
//! The root is always `clankie_settings::attachment_root`, the one derivation
//! every service shares. An inbound attachment is downloaded (bounded in
//! size, type and time) only when a lane asks for it, once however many ask,
//! and stored under its sha256; messages no lane admits cost no download.
//! Artifacts resolve over NATS
//! request/reply to a path (co-located services) or to bytes; any name that
//! leads out of the root is refused with a receipt, and the service serves
//! the next request.

mod root;
pub mod service;

use std::time::Duration;

use clankie_bus::{Bus, BusError, now_ms};
use clankie_proto::{Family, ReceiptKind, v1};
use clankie_settings::{Settings, attachment_root};
use futures::StreamExt;
use prost::Message as _;

pub use root::{MediaError, Meta, Root, SweepReport, clean_filename};

/// Content types media accepts.
pub const ACCEPTED_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp", "text/plain", "application/pdf"];

/// Whether an inbound attachment's type is one a lane may read: the accepted types, and any
/// text (`text/x-python`, `text/markdown`, JSON), which a lane reads as words.
pub fn accepted_inbound(content_type: &str) -> bool {
    ACCEPTED_TYPES.contains(&content_type) || content_type.starts_with("text/") || content_type == "application/json"
}

/// How media behaves.
#[derive(Debug, Clone)]
pub struct MediaConfig {
    pub max_bytes: u64,
    pub download_timeout: Duration,
    pub max_age: Duration,
    pub max_total: u64,
    /// Anything stored or resolved this recently is kept by the sweeper (a reply may still be on its way).
    pub pinned_for: Duration,
    pub sweep_every: Duration,
}

impl MediaConfig {
    /// Media's configuration from settings.
    pub fn from_settings(settings: &Settings) -> MediaConfig {
        MediaConfig {
            max_bytes: settings.media_max_bytes,
            download_timeout: Duration::from_secs(20),
            max_age: settings.media_max_age,
            max_total: settings.media_max_total_bytes,
            pinned_for: Duration::from_secs(3600),
            sweep_every: Duration::from_secs(600),
        }
    }
}

/// The media service. Cheap to clone: each request runs on a task of its own.
#[derive(Clone)]
pub struct Media {
    bus: Bus,
    root: Root,
    config: MediaConfig,
    http: reqwest::Client,
    /// Attachments being downloaded now: a second ask waits for the first download.
    fetching: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<u64, std::sync::Arc<tokio::sync::Mutex<()>>>>>,
}

impl Media {
    /// Media over the settings' attachment root.
    pub fn new(bus: Bus, settings: &Settings, config: MediaConfig) -> Result<Media, MediaError> {
        clankie_agent::provider::install_tls_provider();
        let http = reqwest::Client::builder().timeout(config.download_timeout).build().map_err(|e| MediaError::Download(e.to_string()))?;
        Ok(Media { bus, root: Root::open(attachment_root(settings))?, config, http, fetching: Default::default() })
    }

    /// The root it serves.
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// Answers attachment, resolve, register and forget requests and sweeps, until the bus fails.
    pub async fn run(&self) -> Result<(), BusError> {
        let mut resolves = self.bus.serve(Family::RpcMediaResolve.wildcard(), "media").await?;
        let mut attachments = self.bus.serve(Family::RpcMediaAttachment.wildcard(), "media").await?;
        let mut registers = self.bus.serve(Family::RpcMediaRegister.wildcard(), "media").await?;
        let mut forgets = self.bus.serve(Family::RpcMediaForget.wildcard(), "media").await?;
        let mut sweep = tokio::time::interval(self.config.sweep_every);
        loop {
            tokio::select! {
                // Each request on a task of its own: a slow download or a big file never holds up the next.
                Some(msg) = resolves.next() => {
                    let media = self.clone();
                    let span = tracing::info_span!("media.resolve", otel.kind = "server");
                    clankie_bus::Bus::serving(&msg, &span);
                    tokio::spawn(tracing::Instrument::instrument(async move {
                        let reply = match v1::MediaResolveRequest::decode(msg.payload.clone()) {
                            Ok(req) => media.resolve(&req).await,
                            Err(_) => v1::MediaResolveReply { error: "bad_request".into(), ..Default::default() },
                        };
                        media.answer(&msg, &reply, |error| v1::MediaResolveReply { error, ..Default::default() }).await;
                    }, span));
                }
                Some(msg) = attachments.next() => {
                    let media = self.clone();
                    let span = tracing::info_span!("media.attachment", otel.kind = "server");
                    clankie_bus::Bus::serving(&msg, &span);
                    tokio::spawn(tracing::Instrument::instrument(async move {
                        let reply = match v1::MediaAttachmentRequest::decode(msg.payload.clone()) {
                            Ok(v1::MediaAttachmentRequest { attachment: Some(a), delivery_id }) => media.attachment_bytes(&a, &delivery_id).await,
                            _ => v1::MediaResolveReply { error: "bad_request".into(), ..Default::default() },
                        };
                        media.answer(&msg, &reply, |error| v1::MediaResolveReply { error, ..Default::default() }).await;
                    }, span));
                }
                Some(msg) = registers.next() => {
                    tracing::debug!(bytes = msg.payload.len(), "a register request taken");
                    let media = self.clone();
                    let span = tracing::info_span!("media.register", otel.kind = "server");
                    clankie_bus::Bus::serving(&msg, &span);
                    tokio::spawn(tracing::Instrument::instrument(async move {
                        let reply = match v1::MediaRegisterRequest::decode(msg.payload.clone()) {
                            Ok(req) => media.register(&req).await,
                            Err(_) => v1::MediaRegisterReply { artifact: None, error: "bad_request".into() },
                        };
                        media.answer(&msg, &reply, |error| v1::MediaRegisterReply { artifact: None, error }).await;
                    }, span));
                }
                Some(msg) = forgets.next() => {
                    let media = self.clone();
                    let span = tracing::info_span!("media.forget", otel.kind = "server");
                    clankie_bus::Bus::serving(&msg, &span);
                    tokio::spawn(tracing::Instrument::instrument(async move {
                        let reply = match v1::MediaForgetRequest::decode(msg.payload.clone()) {
                            Ok(req) => media.forget(req.attachment_ids).await,
                            Err(_) => v1::MediaForgetReply { error: "bad_request".into(), ..Default::default() },
                        };
                        media.answer(&msg, &reply, |error| v1::MediaForgetReply { error, ..Default::default() }).await;
                    }, span));
                }
                _ = sweep.tick() => {
                    let (max_age, max_total, pinned_for) = (self.config.max_age, self.config.max_total, self.config.pinned_for);
                    match self.on_disk(move |root| root.sweep(max_age, max_total, pinned_for)).await {
                        Ok(r) if r.removed > 0 => tracing::info!(removed = r.removed, bytes = r.bytes_freed, "swept the attachment root"),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "sweep failed"),
                    }
                }
            }
        }
    }

    /// Sends `reply`; when it cannot go (too big for a message, the bus away) the failure is
    /// logged and the asker gets `failed(code)` instead of waiting out its timeout.
    async fn answer<A: clankie_proto::Event>(&self, msg: &clankie_bus::Request, reply: &A, failed: impl FnOnce(String) -> A) {
        tracing::debug!(subject = %msg.subject, "answering a media request");
        if let Err(e) = self.bus.respond(msg, reply).await {
            tracing::warn!(error = %e, "a media reply could not be sent; answering with its failure");
            if let Err(e) = self.bus.respond(msg, &failed("reply_failed".into())).await {
                tracing::warn!(error = %e, "a media failure reply could not be sent either");
            }
        }
    }

    /// The artifact an inbound attachment became, downloading and storing it now if it has not
    /// been; asks for one attachment at once share its one download.
    async fn stored(&self, a: &v1::Attachment, delivery_id: &str) -> Result<String, MediaError> {
        let attachment = a.id;
        if let Some(id) = self.on_disk(move |root| Ok(root.attachment(attachment))).await? {
            return Ok(id);
        }
        let one_download = self.fetching.lock().unwrap_or_else(|p| p.into_inner()).entry(attachment).or_default().clone();
        let _downloading = one_download.lock().await;
        let stored = self.download(a, delivery_id).await;
        self.fetching.lock().unwrap_or_else(|p| p.into_inner()).remove(&attachment);
        stored
    }

    async fn download(&self, a: &v1::Attachment, delivery_id: &str) -> Result<String, MediaError> {
        let attachment = a.id;
        // Whoever held the download before us may have stored it.
        if let Some(id) = self.on_disk(move |root| Ok(root.attachment(attachment))).await? {
            return Ok(id);
        }
        match self.fetch(a).await {
            Ok((id, meta)) => {
                let indexed = id.clone();
                self.on_disk(move |root| root.index_attachment(attachment, &indexed)).await?;
                self.receipt("media.stored", delivery_id, |r| {
                    r.with_id("attachment", a.id).with_id("artifact", &id).with_count("bytes", meta.size as i64)
                })
                .await;
                Ok(id)
            }
            Err(e) => {
                tracing::warn!(code = e.code(), "inbound attachment refused");
                self.receipt("media.refused", delivery_id, |r| r.with_id("attachment", a.id).with_code(e.code())).await;
                Err(e)
            }
        }
    }

    /// A forgotten person's attachments leave the root (see [`Root::forget_attachments`]).
    pub async fn forget(&self, ids: Vec<u64>) -> v1::MediaForgetReply {
        match self.on_disk(move |root| root.forget_attachments(&ids)).await {
            Ok((attachments, files)) => {
                tracing::info!(attachments, files, "a forgotten person's attachments dropped");
                v1::MediaForgetReply { attachments, files, error: String::new() }
            }
            Err(e) => {
                tracing::warn!(code = e.code(), "a forgotten person's attachments could not be dropped");
                v1::MediaForgetReply { error: e.code().into(), ..Default::default() }
            }
        }
    }

    /// An inbound attachment's bytes, for a lane that wants to perceive it.
    pub async fn attachment_bytes(&self, a: &v1::Attachment, delivery_id: &str) -> v1::MediaResolveReply {
        match self.stored(a, delivery_id).await {
            Ok(id) => self.resolve(&v1::MediaResolveRequest { artifact_id: id, want_bytes: true }).await,
            Err(e) => v1::MediaResolveReply { error: e.code().to_owned(), ..Default::default() },
        }
    }

    async fn fetch(&self, a: &v1::Attachment) -> Result<(String, Meta), MediaError> {
        if let Some(held) = clankie_settings::fault::hold("media.fetch") {
            tokio::time::sleep(held).await;
        }
        let content_type = a.content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        if !accepted_inbound(&content_type) {
            return Err(MediaError::Type(content_type));
        }
        if a.size_bytes > self.config.max_bytes {
            return Err(MediaError::TooLarge { size: a.size_bytes, limit: self.config.max_bytes });
        }
        let response = self.http.get(&a.url).send().await.map_err(|e| MediaError::Download(e.without_url().to_string()))?;
        if !response.status().is_success() {
            return Err(MediaError::Download(format!("HTTP {}", response.status().as_u16())));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| MediaError::Download(e.without_url().to_string()))?;
            body.extend_from_slice(&chunk);
            if body.len() as u64 > self.config.max_bytes {
                return Err(MediaError::TooLarge { size: body.len() as u64, limit: self.config.max_bytes });
            }
        }
        let filename = a.filename.clone();
        self.on_disk(move |root| root.store(&body, &filename, &content_type)).await
    }

    /// Runs file work on the attachment root off the runtime's threads.
    async fn on_disk<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Root) -> Result<T, MediaError> + Send + 'static,
    ) -> Result<T, MediaError> {
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || work(&root)).await.map_err(|e| MediaError::Io(std::io::Error::other(e)))?
    }

    /// Stores an artifact a tool produced and answers its reference.
    pub async fn register(&self, req: &v1::MediaRegisterRequest) -> v1::MediaRegisterReply {
        let content_type = req.content_type.to_ascii_lowercase();
        let refused = |e: MediaError| v1::MediaRegisterReply { artifact: None, error: e.code().to_owned() };
        let taken;
        let req = if req.blob.is_empty() {
            req
        } else {
            match self.bus.take_blob(&req.blob).await {
                Ok(data) => {
                    taken = v1::MediaRegisterRequest { data, blob: String::new(), ..req.clone() };
                    &taken
                }
                Err(e) => {
                    tracing::warn!(error = %e, "an artifact's blob could not be taken");
                    return v1::MediaRegisterReply { artifact: None, error: "blob_unavailable".into() };
                }
            }
        };
        if !ACCEPTED_TYPES.contains(&content_type.as_str()) {
            return refused(MediaError::Type(content_type));
        }
        if req.data.len() as u64 > self.config.max_bytes {
            return refused(MediaError::TooLarge { size: req.data.len() as u64, limit: self.config.max_bytes });
        }
        let (data, filename, stored_type) = (req.data.clone(), req.filename.clone(), content_type.clone());
        match self.on_disk(move |root| root.store(&data, &filename, &stored_type)).await {
            Ok((id, meta)) => {
                self.receipt("media.registered", "", |r| r.with_id("artifact", &id).with_count("bytes", meta.size as i64)).await;
                v1::MediaRegisterReply {
                    artifact: Some(v1::ArtifactRef { id, filename: meta.filename, content_type: meta.content_type }),
                    error: String::new(),
                }
            }
            Err(e) => refused(e),
        }
    }

    /// Resolves an artifact to its path (and bytes when asked).
    pub async fn resolve(&self, req: &v1::MediaResolveRequest) -> v1::MediaResolveReply {
        let (artifact, limit) = (req.artifact_id.clone(), self.config.max_bytes);
        match self.on_disk(move |root| root.resolve(&artifact, limit)).await {
            Ok((path, meta)) => {
                let data = if req.want_bytes {
                    match tokio::fs::read(&path).await {
                        Ok(data) => data,
                        Err(_) => return v1::MediaResolveReply { error: "io".into(), ..Default::default() },
                    }
                } else {
                    Vec::new()
                };
                // Bytes over one message's limit go as a blob; the reply names it.
                let (data, blob) = match self.bus.hand_over(&req.artifact_id, data).await {
                    Ok(handed) => handed,
                    Err(e) => {
                        tracing::warn!(error = %e, "a big artifact could not be handed over as a blob");
                        return v1::MediaResolveReply { error: "blob_unavailable".into(), ..Default::default() };
                    }
                };
                v1::MediaResolveReply {
                    path: path.display().to_string(),
                    data,
                    content_type: meta.content_type,
                    filename: meta.filename,
                    size_bytes: meta.size,
                    error: String::new(),
                    blob,
                }
            }
            Err(e) => {
                if matches!(e, MediaError::OutsideRoot(_) | MediaError::BadId(_)) {
                    self.receipt("media.refused", "", |r| r.with_code(e.code())).await;
                }
                v1::MediaResolveReply { error: e.code().to_owned(), ..Default::default() }
            }
        }
    }

    async fn receipt(&self, kind: &'static str, delivery_id: &str, build: impl FnOnce(v1::Receipt) -> v1::Receipt) {
        let Ok(kind) = ReceiptKind::new(kind) else { return };
        let receipt = build(v1::Receipt::new(&kind, self.bus.service(), delivery_id, now_ms()));
        if let Err(e) = self.bus.publish_receipt(&receipt).await {
            tracing::warn!(error = %e, "receipt not published");
        }
    }
}
