//! The body: posting, the tool card, history for cold lanes, live voice
//! sessions for routing, and outcome reactions.

use std::collections::HashMap;
use std::time::Duration;

use clankie_bus::{ConsumerSpec, Delivery};
use clankie_proto::{Family, LaneKey, v1};
use futures::StreamExt;
use prost::Message as _;
use serde_json::json;
use tokio::sync::mpsc;
use twilight_http::request::channel::reaction::RequestReactionType;
use twilight_model::id::Id;
use twilight_model::id::marker::MessageMarker;

use crate::{Gateway, GatewayError};

/// The bucket that maps each turn's tool card to its Discord message.
const CARDS_BUCKET: &str = "clankie-cards";

/// How long an outbound message a gateway took stays its own without word from it. While it
/// posts (a long reply waits on the channel's bucket) it says it is still at work; one that
/// dies holding a reply hands it on after this, and Discord's enforced nonce keeps the pieces
/// it did post from posting twice.
const BODY_ACK_WAIT: Duration = Duration::from_secs(10);
/// Outbound messages pulled at once; each is kept alive while it waits for its channel.
const BODY_PREFETCH: usize = 64;
/// A tool card's entry once it is removed: a tombstone for as long as the bucket keeps entries
/// (an hour), so a post redelivered after its removal never shows a card again.
const CARD_REMOVED: &[u8] = b"removed";

/// The longest a tenure's end spends naking what it held, in all.
const HAND_BACK_NAKS: Duration = Duration::from_secs(3);
/// How long a tenure's end waits for its posters to be dropped before it hands back what they held.
const HAND_BACK_WAIT: Duration = Duration::from_secs(1);
/// How long a channel's poster waits for more before it ends.
const POSTER_IDLE: Duration = Duration::from_secs(30);

/// The bucket that remembers how many pieces of each reply are posted, so a reply handed to
/// another replica (or the same one restarted) resumes at its next piece.
const POSTED_BUCKET: &str = "clankie-posted";
/// How long a reply's posted pieces are remembered.
const POSTED_FOR: Duration = Duration::from_secs(24 * 3600);

/// How long an outcome a gateway took stays its own before JetStream hands it to another (or
/// to the same one restarted). A reaction is one idempotent PUT, so a second try is harmless,
/// while a long wait leaves the room without the outcome after a gateway dies holding it.
const OUTCOME_ACK_WAIT: Duration = Duration::from_secs(5);
/// Outcomes pulled at once: few, so that those waiting behind a slow reaction are still
/// inside their ack wait when their turn comes.
const OUTCOME_PREFETCH: usize = 8;

/// How far a reply's posting got, as the posted-pieces bucket holds it.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Posted {
    /// Pieces posted, from the first.
    pieces: usize,
    /// The first piece's Discord message id.
    first_message: u64,
    /// Discord refused it for good: nothing will be posted, so its outcome waits no longer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    refused: bool,
}

/// The span of Discord's message-create bucket; [`crate::GatewayConfig::create_span`] holds the one in use.
pub const CREATE_SPAN: Duration = Duration::from_secs(5);

/// An outbound message waiting for its channel's poster; dropping it ends its progress acks.
struct Queued {
    d: Held,
    _done: tokio::sync::oneshot::Sender<()>,
}

/// An outbound message the body holds until it settles it (ack, nak or term). Dropped
/// unsettled, because the REST tenure ended under it, it is handed back: the replica naks
/// every such message in stream order for the next holder to take at once, instead of leaving
/// it to the ack wait while newer messages of its channel are posted first.
pub(crate) struct Held {
    d: Option<Delivery<v1::OutboundMessage>>,
    back: HandBack,
}

impl Held {
    fn new(d: Delivery<v1::OutboundMessage>, back: &HandBack) -> Held {
        back.held.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Held { d: Some(d), back: back.clone() }
    }

    fn delivery(&self) -> &Delivery<v1::OutboundMessage> {
        self.d.as_ref().expect("a held delivery until it is settled")
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(d) = self.d.take() {
            let _ = self.back.tx.send(d);
        }
        self.back.held.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Where unsettled outbound messages go when the body is dropped (see [`Held`]).
#[derive(Clone)]
pub(crate) struct HandBack {
    tx: mpsc::UnboundedSender<Delivery<v1::OutboundMessage>>,
    held: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// The receiving end of the hand-back, read when a tenure ends.
pub(crate) struct HandedBack {
    rx: std::sync::Mutex<mpsc::UnboundedReceiver<Delivery<v1::OutboundMessage>>>,
}

pub(crate) fn hand_back() -> (HandBack, HandedBack) {
    let (tx, rx) = mpsc::unbounded_channel();
    (HandBack { tx, held: Default::default() }, HandedBack { rx: std::sync::Mutex::new(rx) })
}

/// The body's consumer: dropped with the body, it hands back what it pulled and had not yet
/// given out, so those are not left to the ack wait either.
struct Pulled {
    consumer: clankie_bus::Consumer<v1::OutboundMessage>,
    back: HandBack,
}

impl Drop for Pulled {
    fn drop(&mut self) {
        while let Some(Ok(d)) = futures::FutureExt::now_or_never(self.consumer.next()) {
            let _ = self.back.tx.send(d);
        }
    }
}

/// How long a "replied" outcome waits, at a time, for its reply's first piece to be posted,
/// and how many times: about three seconds in all, well inside the outcome's ack wait.
const REPLY_WAIT: Duration = Duration::from_millis(250);
const REPLY_WAITS: i64 = 12;

/// Discord's limit on one message.
pub const MAX_MESSAGE: usize = 2000;

/// Splits text into pieces of at most `max` characters, preferring line
/// breaks, then sentence ends, then spaces.
pub fn split(text: &str, max: usize) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut rest = text.trim();
    while rest.chars().count() > max {
        let cut_byte = rest.char_indices().nth(max).map_or(rest.len(), |(i, _)| i);
        let window = &rest[..cut_byte];
        let at = window
            .rfind('\n')
            .or_else(|| window.rfind(". ").map(|i| i + 1))
            .or_else(|| window.rfind(['!', '?']).map(|i| i + 1))
            .or_else(|| window.rfind(' '))
            .filter(|&i| i > 0)
            .unwrap_or(cut_byte);
        pieces.push(rest[..at].trim_end().to_owned());
        rest = rest[at..].trim_start();
    }
    if !rest.is_empty() {
        pieces.push(rest.to_owned());
    }
    pieces
}

/// What closes a reply cut at its piece bound.
const CUT_NOTE: &str = "\n(I cut this short: it ran longer than I may post at once.)";

/// Keeps at most `max` pieces; a reply cut there ends with [`CUT_NOTE`], its last kept piece
/// shortened to leave room for it. Returns the pieces and how many were left out.
pub fn bound_pieces(mut pieces: Vec<String>, max: usize) -> (Vec<String>, usize) {
    let max = max.max(1);
    if pieces.len() <= max {
        return (pieces, 0);
    }
    let cut = pieces.len() - max;
    pieces.truncate(max);
    if let Some(last) = pieces.last_mut() {
        let room = MAX_MESSAGE - CUT_NOTE.chars().count();
        if last.chars().count() > room {
            *last = last.chars().take(room).collect::<String>().trim_end().to_owned();
        }
        last.push_str(CUT_NOTE);
    }
    (pieces, cut)
}

/// Discord's nonce for one piece of an outbound message: a stable number from its idempotency key.
pub fn nonce(key: &str, piece: usize) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes().chain(piece.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Discord nonces are at most 25 characters.
    (h >> 1).to_string()
}

/// A file name for Discord: media's cleaned name, else the one the captain gave.
fn clean_name(stored: &str, given: &str) -> String {
    let name = if stored.is_empty() { given } else { stored };
    name.rsplit(['/', '\\']).next().filter(|n| !n.is_empty()).unwrap_or("file").to_owned()
}

fn card_text(tools: &[String]) -> String {
    format!("🔧 working: {}", if tools.is_empty() { "tools".to_owned() } else { tools.join(", ") })
}

/// What a failed post means for the outbound message.
pub(crate) enum PostError {
    /// Worth another try later (5xx, rate limit, network).
    Retry,
    /// Discord refused it for good.
    Refused(u16),
    /// Discord refused it for a permission the bot lacks there (403 with 50001, 50007 or
    /// 50013): an operator's mend in the server settings, named in the receipt.
    Denied(Denied),
}

/// Discord's reasons for a 403 that an operator can mend, by its JSON error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Denied {
    /// 50001: the bot cannot see the channel (View Channel, or not in the server).
    MissingAccess,
    /// 50013: a permission the request needs is missing in the channel.
    MissingPermissions,
    /// 50007: the person does not take DMs from the server's members.
    CannotMessageUser,
    /// 160002: a reply without Read Message History in the channel.
    CannotReply,
}

impl Denied {
    fn from_code(code: u64) -> Option<Denied> {
        match code {
            50001 => Some(Denied::MissingAccess),
            50013 => Some(Denied::MissingPermissions),
            50007 => Some(Denied::CannotMessageUser),
            160002 => Some(Denied::CannotReply),
            _ => None,
        }
    }

    /// The receipt's codes: the refusal, then each permission the refused request needed
    /// (Discord's 50013 does not say which one of them is missing).
    pub(crate) fn codes(self, needs: &[&'static str]) -> Vec<&'static str> {
        match self {
            Denied::MissingAccess => vec!["missing_access", "needs_view_channel"],
            Denied::MissingPermissions => std::iter::once("missing_permissions").chain(needs.iter().copied()).collect(),
            Denied::CannotMessageUser => vec!["cannot_message_user"],
            Denied::CannotReply => vec!["missing_permissions", "needs_read_message_history"],
        }
    }
}

fn classify(e: &twilight_http::Error) -> PostError {
    use twilight_http::api_error::ApiError;
    // Discord bans a bot that makes too many invalid requests (401, 403, 429) in 10 minutes.
    if let twilight_http::error::ErrorType::Response { status, .. } = e.kind() {
        let status = status.get();
        let class = match status {
            401 => "401",
            403 => "403",
            404 => "404",
            429 => "429",
            500.. => "5xx",
            _ => "4xx",
        };
        metrics::counter!("clankie_gateway_rest_errors_total", "status" => class).increment(1);
    }
    match e.kind() {
        twilight_http::error::ErrorType::Response { status, .. } if status.get() == 429 || status.get() >= 500 => PostError::Retry,
        twilight_http::error::ErrorType::Response { status, error: ApiError::General(general), .. }
            if status.get() == 403 && Denied::from_code(general.code).is_some() =>
        {
            Denied::from_code(general.code).map_or(PostError::Refused(403), PostError::Denied)
        }
        twilight_http::error::ErrorType::Response { status, .. } => PostError::Refused(status.get()),
        _ => PostError::Retry,
    }
}

/// The permissions a reply or text update needs in its channel, as receipt codes.
fn post_needs(out: &v1::OutboundMessage) -> Vec<&'static str> {
    let mut needs = vec!["needs_send_messages"];
    if out.reply_to_message_id.is_some() {
        needs.push("needs_read_message_history");
    }
    if !out.artifacts.is_empty() {
        needs.push("needs_attach_files");
    }
    needs
}

impl Gateway {
    /// Pulls outbound messages and hands each to its channel's poster: one task per channel
    /// with messages waiting, which posts them in the order they came, so a long reply in one
    /// channel never holds up another's. Every message pulled is kept alive (progress acks)
    /// from the moment it is pulled until it is acked, queued or posting.
    pub(crate) async fn run_body(&self) -> Result<(), GatewayError> {
        // What a body that panicked held goes back first, in order, before newer messages are pulled.
        self.hand_back_held().await;
        let spec = ConsumerSpec::durable("gateway-body", Family::BodySend).with_ack_wait(BODY_ACK_WAIT).with_prefetch(BODY_PREFETCH, 0);
        let back = self.inner.hand_back.clone();
        let mut pulled = Pulled { consumer: self.inner.bus.consumer::<v1::OutboundMessage>(spec).await?, back: back.clone() };
        let consumer = &mut pulled.consumer;
        let mut posters: HashMap<u64, mpsc::UnboundedSender<Queued>> = HashMap::new();
        // Owned here: dropping the body (the REST lease lost) ends every poster at once.
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            let d = tokio::select! {
                d = consumer.next() => d?,
                Some(ended) = tasks.join_next(), if !tasks.is_empty() => {
                    // A poster that panicked is the body's panic: its supervisor restarts the
                    // body, and rebuilds the REST client when the limiter was what panicked.
                    if let Err(e) = ended
                        && e.is_panic()
                    {
                        std::panic::resume_unwind(e.into_panic());
                    }
                    continue;
                }
            };
            clankie_settings::fault::panic_once("gateway.body");
            tracing::debug!(stream_sequence = d.stream_sequence, delivered = d.delivered, "outbound message pulled");
            posters.retain(|_, poster| !poster.is_closed());
            let channel = d.event.channel_id;
            let (done, finished) = tokio::sync::oneshot::channel::<()>();
            let progress = d.progress();
            tasks.spawn(async move {
                let _ = progress.while_working(finished, BODY_ACK_WAIT / 3).await;
            });
            let queued = Queued { d: Held::new(d, &back), _done: done };
            let queued = match posters.get(&channel) {
                Some(poster) => match poster.send(queued) {
                    Ok(()) => continue,
                    Err(refused) => refused.0,
                },
                None => queued,
            };
            let (poster, queue) = mpsc::unbounded_channel();
            let _ = poster.send(queued);
            posters.insert(channel, poster);
            tasks.spawn(self.clone().post_in_channel(queue));
        }
    }

    /// One channel's poster: posts what its queue holds, in order, and ends once the queue
    /// has stayed empty for [`POSTER_IDLE`] (closing it first, so nothing sent is left behind).
    async fn post_in_channel(self, mut queue: mpsc::UnboundedReceiver<Queued>) {
        loop {
            let queued = match tokio::time::timeout(POSTER_IDLE, queue.recv()).await {
                Ok(Some(queued)) => queued,
                Ok(None) => return,
                Err(_) => {
                    queue.close();
                    match queue.try_recv() {
                        Ok(queued) => queued,
                        Err(_) => return,
                    }
                }
            };
            let span = tracing::info_span!("delivery", otel.name = "gateway.post", delivery_id = %queued.d.delivery().event.delivery_id);
            queued.d.delivery().traced(&span);
            let Queued { d, _done } = queued;
            tracing::Instrument::instrument(self.deliver(d), span).await;
        }
    }

    async fn deliver(&self, mut held: Held) {
        let out = &held.delivery().event;
        let result = match v1::OutboundKind::try_from(out.kind) {
            Ok(v1::OutboundKind::ToolCard) => self.tool_card(out).await,
            Ok(v1::OutboundKind::Reply | v1::OutboundKind::TextUpdate) => self.post(out).await,
            Ok(v1::OutboundKind::Direct) => self.direct(out).await,
            _ => Err(PostError::Refused(0)),
        };
        let (delivery_id, channel, key, needs) = (out.delivery_id.clone(), out.channel_id, out.idempotency_key.clone(), post_needs(out));
        // The tenure ended under it (the poster had not been dropped yet): it goes back with the
        // rest of the tenure's, in stream order, not a second later behind newer ones.
        if matches!(result, Err(PostError::Retry)) && !self.speaks_rest() {
            return;
        }
        // Settled from here on: a drop now must not hand it back as well.
        let Some(d) = held.d.take() else { return };
        match result {
            Ok(()) => {
                let _ = d.ack().await;
            }
            Err(PostError::Retry) => {
                let _ = d.nak_after(Duration::from_secs(1)).await;
            }
            Err(PostError::Refused(status)) => {
                tracing::warn!(status, "Discord refused an outbound message; dropped");
                self.remember_refused(&key).await;
                self.receipt("gateway.post_refused", &delivery_id, |r| {
                    r.with_id("channel", channel).with_count("status", i64::from(status)).with_code("refused")
                })
                .await;
                let _ = d.term().await;
            }
            Err(PostError::Denied(denied)) => {
                let needs = if denied == Denied::MissingPermissions { self.needs_in(channel, needs).await } else { needs };
                let codes = denied.codes(&needs);
                tracing::error!(
                    channel,
                    ?codes,
                    "Discord refused a post for a permission the bot lacks in the channel; dropped (give the bot's role the permission there, or run `clankie doctor`)"
                );
                self.remember_refused(&key).await;
                self.receipt("gateway.post_refused", &delivery_id, |r| {
                    codes.iter().fold(r.with_id("channel", channel).with_count("status", 403), |r, code| r.with_code(code))
                })
                .await;
                let _ = d.term().await;
            }
        }
    }

    /// `needs` as they are in `channel`: in a thread or forum post Send Messages in Threads
    /// instead of Send Messages, which has no effect there.
    async fn needs_in(&self, channel: u64, needs: Vec<&'static str>) -> Vec<&'static str> {
        if !needs.contains(&"needs_send_messages") || !self.channel_facts(channel).await.is_some_and(|f| f.is_thread()) {
            return needs;
        }
        needs.into_iter().map(|n| if n == "needs_send_messages" { "needs_send_messages_in_threads" } else { n }).collect()
    }

    /// Marks an outbound message Discord refused in the posted-pieces bucket, so a reply's
    /// outcome reaction stops waiting for it.
    async fn remember_refused(&self, key: &str) {
        let Ok(progress) = self.posted().await else { return };
        // Unreadable progress is left alone rather than written over with none.
        let Ok(mut done) = self.posted_so_far(key).await else { return };
        done.refused = true;
        if let Ok(value) = serde_json::to_vec(&done) {
            let _ = progress.put(clankie_bus::kv_key(key).as_str(), value.into()).await;
        }
    }

    /// Naks, in stream order, every outbound message the ended tenure held unsettled, once its
    /// posters have been dropped (briefly waited for): the next holder takes them at once and
    /// posts each channel's in the order they came.
    pub(crate) async fn hand_back_held(&self) {
        let deadline = tokio::time::Instant::now() + HAND_BACK_WAIT;
        while self.inner.hand_back.held.load(std::sync::atomic::Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut back = Vec::new();
        {
            let mut rx = self.inner.handed_back.rx.lock().unwrap_or_else(|p| p.into_inner());
            while let Ok(d) = rx.try_recv() {
                back.push(d);
            }
        }
        back.sort_by_key(|d| d.stream_sequence);
        // Bounded: with the bus away the rest are left to their ack wait (order is lost then anyway).
        let deadline = tokio::time::Instant::now() + HAND_BACK_NAKS;
        for d in &back {
            match tokio::time::timeout_at(deadline, d.nak_confirmed()).await {
                Ok(Ok(())) => {}
                _ => {
                    tracing::warn!("handing outbound messages back failed; the rest come back after their ack wait");
                    break;
                }
            }
        }
        if !back.is_empty() {
            let sequences: Vec<u64> = back.iter().map(|d| d.stream_sequence).collect();
            tracing::info!(handed_back = back.len(), ?sequences, "outbound messages handed back to the next REST holder, in order");
        }
    }

    async fn post(&self, out: &v1::OutboundMessage) -> Result<(), PostError> {
        let channel = Id::new_checked(out.channel_id).ok_or(PostError::Refused(0))?;
        let mut text = out.text.clone();
        let mut missing = 0;
        let mut files = Vec::new();
        for artifact in &out.artifacts {
            match self.resolve_artifact(&artifact.id).await {
                Some(reply) => files.push(twilight_model::http::attachment::Attachment::from_bytes(
                    clean_name(&reply.filename, &artifact.filename),
                    reply.data,
                    files.len() as u64,
                )),
                None => {
                    // An artifact that cannot be resolved costs the picture, never the words.
                    missing += 1;
                    text.push_str(&format!("\n(I couldn't attach {}: it wasn't available when I posted.)", artifact.filename));
                }
            }
        }
        let (pieces, cut) = bound_pieces(split(&text, MAX_MESSAGE), self.inner.config.reply_max_pieces);
        // Where an earlier holder of this reply got to: it resumes at the next piece. The first
        // piece's Discord id comes along: `clankie audit` counts a reply posted twice by it.
        let done = self.posted_so_far(&out.idempotency_key).await?;
        let (progress, key) = (self.posted().await?, clankie_bus::kv_key(&out.idempotency_key));
        let resumed = done.pieces.min(pieces.len());
        let mut first_message = done.first_message;
        for (i, piece) in pieces.iter().enumerate().skip(resumed) {
            if !self.speaks_rest() {
                return Err(PostError::Retry);
            }
            let mut body = json!({
                "content": piece,
                "nonce": nonce(&out.idempotency_key, i),
                "enforce_nonce": true,
                "allowed_mentions": { "parse": [], "replied_user": true },
            });
            if i == 0
                && let Some(reply_to) = out.reply_to_message_id
            {
                body["message_reference"] = json!({ "message_id": reply_to.to_string(), "fail_if_not_exists": false });
            }
            let last = i + 1 == pieces.len();
            if last && !files.is_empty() {
                body["attachments"] = files.iter().map(|f| json!({ "id": f.id, "filename": f.filename })).collect();
            }
            let bytes = serde_json::to_vec(&body).map_err(|_| PostError::Refused(0))?;
            let mut create = self.inner.budget.create_turn(channel.get()).await;
            let slot = self.inner.budget.pace().await;
            let http = self.inner.http.get();
            let request = http.create_message(channel).payload_json(&bytes);
            let request = if last && !files.is_empty() { request.attachments(&files) } else { request };
            clankie_settings::fault::point("gateway.before_post");
            if let Some(held) = clankie_settings::fault::hold("gateway.before_post") {
                tokio::time::sleep(held).await;
            }
            self.fence()?;
            create.sending();
            let posted = request.await;
            drop(slot);
            drop(create);
            let posted = posted.map_err(|e| classify(&e))?;
            clankie_settings::fault::point("gateway.after_accept");
            if i == 0 {
                first_message = posted.model().await.map(|m| m.id.get()).unwrap_or(0);
            }
            let now = Posted { pieces: i + 1, first_message, refused: false };
            if let Ok(value) = serde_json::to_vec(&now)
                && let Err(e) = progress.put(key.as_str(), value.into()).await
            {
                // The nonce still answers a repeat of this piece for a few minutes.
                tracing::warn!(error = %e, "a posted piece was not remembered");
            }
            if let Some(held) = clankie_settings::fault::hold("gateway.after_piece") {
                tokio::time::sleep(held).await;
            }
        }
        if out.kind == v1::OutboundKind::Reply as i32 {
            self.inner.typing.stop(out.channel_id).await;
        }
        self.receipt("gateway.posted", &out.delivery_id, |r| {
            r.with_id("channel", out.channel_id)
                .with_id("message", first_message)
                .with_id("key", out.idempotency_key.as_str())
                .with_code(if out.kind == v1::OutboundKind::Reply as i32 { "reply" } else { "text_update" })
                .with_count("pieces", pieces.len() as i64)
                .with_count("pieces_cut", cut as i64)
                .with_count("pieces_resumed", resumed as i64)
                .with_count("chars", text.chars().count() as i64)
                .with_count("artifacts_missing", missing)
                .with_count("artifacts_attached", files.len() as i64)
        })
        .await;
        Ok(())
    }

    /// An artifact's bytes through media, or `None` when it cannot be had in time.
    async fn resolve_artifact(&self, id: &str) -> Option<v1::MediaResolveReply> {
        let request = v1::MediaResolveRequest { artifact_id: id.to_owned(), want_bytes: true };
        match self
            .inner
            .bus
            .request::<_, v1::MediaResolveReply>(&clankie_proto::Subject::RpcMediaResolve, &request, Duration::from_secs(10))
            .await
        {
            Ok(mut reply) if reply.error.is_empty() => match self.inner.bus.bytes_of(std::mem::take(&mut reply.data), &reply.blob).await {
                Ok(data) => Some(v1::MediaResolveReply { data, ..reply }),
                Err(e) => {
                    tracing::warn!(error = %e, "a big artifact's blob could not be taken");
                    None
                }
            },
            Ok(reply) => {
                tracing::warn!(code = %reply.error, "artifact unresolved");
                None
            }
            Err(_) => {
                tracing::warn!("media unreachable; posting without the artifact");
                None
            }
        }
    }

    /// Posts, edits or removes a turn's tool card. The card's Discord message id lives in a
    /// shared bucket, so whichever gateway replica (or a restarted one) gets the edit or the
    /// removal finds the card another posted.
    async fn tool_card(&self, out: &v1::OutboundMessage) -> Result<(), PostError> {
        let channel = Id::new_checked(out.channel_id).ok_or(PostError::Refused(0))?;
        let turn = out.idempotency_key.rsplit_once(':').map_or(out.idempotency_key.as_str(), |(turn, _)| turn);
        let turn = turn.strip_suffix(":edit").unwrap_or(turn);
        let key = clankie_bus::kv_key(turn);
        let cards = self.cards().await?;
        let existing = match cards.get(key.as_str()).await {
            Ok(Some(v)) if v.as_ref() == CARD_REMOVED => {
                // Removed already (its removal came first): a late post or edit has nothing to do.
                return Ok(());
            }
            Ok(v) => v.and_then(|v| std::str::from_utf8(&v).ok()?.parse::<u64>().ok()).and_then(Id::<MessageMarker>::new_checked),
            Err(e) => {
                tracing::warn!(error = %e, "the tool card bucket is unreadable; trying again");
                return Err(PostError::Retry);
            }
        };
        if !self.speaks_rest() {
            return Err(PostError::Retry);
        }
        let mut create = match (v1::ToolCardOp::try_from(out.tool_card_op), existing) {
            (Ok(v1::ToolCardOp::Post), None) => Some(self.inner.budget.create_turn(channel.get()).await),
            _ => None,
        };
        let slot = self.inner.budget.pace().await;
        self.fence()?;
        if let Some(create) = &mut create {
            create.sending();
        }
        match (v1::ToolCardOp::try_from(out.tool_card_op), existing) {
            (Ok(v1::ToolCardOp::Post), None) => {
                let body = json!({ "content": card_text(&out.tool_names), "nonce": nonce(&out.idempotency_key, 0), "enforce_nonce": true });
                let bytes = serde_json::to_vec(&body).map_err(|_| PostError::Refused(0))?;
                let posted = self.inner.http.get().create_message(channel).payload_json(&bytes).await;
                drop(slot);
                drop(create);
                let posted = posted.map_err(|e| classify(&e))?;
                let message = posted.model().await.map_err(|_| PostError::Retry)?;
                if let Err(e) = cards.put(key.as_str(), message.id.get().to_string().into()).await {
                    // Posted but not remembered: the nonce makes the retry return this same message.
                    tracing::warn!(error = %e, "a tool card was posted but not remembered; trying again");
                    return Err(PostError::Retry);
                }
            }
            (Ok(v1::ToolCardOp::Post | v1::ToolCardOp::Edit), Some(id)) => {
                let text = card_text(&out.tool_names);
                let edited = self.inner.http.get().update_message(channel, id).content(Some(&text)).await;
                drop(slot);
                edited.map_err(|e| classify(&e))?;
            }
            (Ok(v1::ToolCardOp::Remove), Some(id)) => {
                let deleted = self.inner.http.get().delete_message(channel, id).await;
                drop(slot);
                match deleted {
                    Ok(_) => {}
                    // Already gone (a removal delivered twice): nothing left to do.
                    Err(e) if matches!(classify(&e), PostError::Refused(404)) => {}
                    Err(e) => return Err(classify(&e)),
                }
                if cards.put(key.as_str(), CARD_REMOVED.into()).await.is_err() {
                    return Err(PostError::Retry);
                }
            }
            // A removal before its post (a hand-over put the post behind it): remembered, so
            // the post, when it comes, is dropped instead of leaving a card nobody removes.
            (Ok(v1::ToolCardOp::Remove), None) => {
                if cards.put(key.as_str(), CARD_REMOVED.into()).await.is_err() {
                    return Err(PostError::Retry);
                }
            }
            // An edit of a card nobody posted: nothing to do.
            _ => {}
        }
        Ok(())
    }

    /// A direct message to one person, with its buttons: the DM channel is opened first (Discord
    /// answers with the same channel every time), and the enforced nonce posts it once.
    async fn direct(&self, out: &v1::OutboundMessage) -> Result<(), PostError> {
        let user = Id::new_checked(out.direct_user_id).ok_or(PostError::Refused(0))?;
        if !self.speaks_rest() {
            return Err(PostError::Retry);
        }
        let slot = self.inner.budget.pace().await;
        self.fence()?;
        let opened = self.inner.http.get().create_private_channel(user).await.map_err(|e| classify(&e))?;
        drop(slot);
        let channel = opened.model().await.map_err(|_| PostError::Retry)?.id;
        let body = json!({
            "content": out.text,
            "components": crate::commands::components(&out.buttons),
            "nonce": nonce(&out.idempotency_key, 0),
            "enforce_nonce": true,
        });
        let bytes = serde_json::to_vec(&body).map_err(|_| PostError::Refused(0))?;
        let slot = self.inner.budget.pace().await;
        self.fence()?;
        self.inner.http.get().create_message(channel).payload_json(&bytes).await.map_err(|e| classify(&e))?;
        drop(slot);
        self.receipt("gateway.direct", &out.delivery_id, |r| {
            r.with_id("user", out.direct_user_id).with_id("channel", channel.get()).with_count("buttons", out.buttons.len() as i64)
        })
        .await;
        Ok(())
    }

    /// Whether at least the first piece of the reply keyed `key` is posted; an unreadable
    /// bucket holds no outcome back.
    async fn reply_is_out(&self, key: &str) -> bool {
        self.posted_so_far(key).await.map_or(true, |p| p.pieces > 0 || p.refused)
    }

    /// How far the posting of the outbound message keyed `key` got (nothing yet: the default).
    async fn posted_so_far(&self, key: &str) -> Result<Posted, PostError> {
        match self.posted().await?.get(clankie_bus::kv_key(key).as_str()).await {
            Ok(v) => Ok(v.and_then(|v| serde_json::from_slice::<Posted>(&v).ok()).unwrap_or_default()),
            Err(e) => {
                tracing::warn!(error = %e, "the posted-pieces bucket is unreadable");
                Err(PostError::Retry)
            }
        }
    }

    async fn posted(&self) -> Result<clankie_bus::KeyValue, PostError> {
        let opened = self.inner.posted.get_or_try_init(|| self.inner.bus.key_value(POSTED_BUCKET, POSTED_FOR)).await;
        opened.cloned().map_err(|e| {
            tracing::warn!(error = %e, "the posted-pieces bucket is unavailable");
            PostError::Retry
        })
    }

    async fn cards(&self) -> Result<clankie_bus::KeyValue, PostError> {
        let opened = self.inner.cards.get_or_try_init(|| self.inner.bus.key_value(CARDS_BUCKET, Duration::from_secs(3600))).await;
        opened.cloned().map_err(|e| {
            tracing::warn!(error = %e, "the tool card bucket is unavailable");
            PostError::Retry
        })
    }

    pub(crate) async fn run_history(&self) -> Result<(), GatewayError> {
        let mut requests = self.inner.bus.serve(Family::RpcHistory.wildcard(), "body").await?;
        while let Some(msg) = requests.next().await {
            // A stage of the turn that asked, when it was traced.
            let span = tracing::info_span!("gateway.history", otel.kind = "server");
            clankie_bus::Bus::serving(&msg, &span);
            let reply = match v1::HistoryRequest::decode(msg.payload.clone()) {
                Ok(req) => tracing::Instrument::instrument(self.history(&req), span).await,
                Err(_) => v1::HistoryReply { messages: vec![], error: "request_undecodable".into() },
            };
            if let Err(e) = self.inner.bus.respond(&msg, &reply).await {
                tracing::warn!(error = %e, "history reply not sent");
            }
        }
        Ok(())
    }

    async fn history(&self, req: &v1::HistoryRequest) -> v1::HistoryReply {
        let Some(channel) = Id::new_checked(req.channel_id) else {
            return v1::HistoryReply { messages: vec![], error: "bad_channel".into() };
        };
        let limit = req.limit.clamp(1, 100) as u16;
        let _slot = self.inner.budget.pace().await;
        let fetched = match Id::new_checked(req.before_message_id) {
            Some(before) => self.inner.http.get().channel_messages(channel).before(before).limit(limit).await,
            None => self.inner.http.get().channel_messages(channel).limit(limit).await,
        };
        let messages = match fetched {
            Ok(response) => match response.models().await {
                Ok(m) => m,
                Err(_) => return v1::HistoryReply { messages: vec![], error: "undecodable".into() },
            },
            Err(_) => return v1::HistoryReply { messages: vec![], error: "fetch_failed".into() },
        };
        let bot = self.bot_id();
        let mut out: Vec<v1::HistoryMessage> = messages
            .iter()
            .map(|m| v1::HistoryMessage {
                message_id: m.id.get(),
                author_id: m.author.id.get(),
                author_name: crate::normalise::display_name(&m.author, m.member.as_ref().and_then(|p| p.nick.as_deref())),
                author_is_bot: m.author.bot,
                is_him: m.author.id.get() == bot,
                content: crate::normalise::as_people_see_it(&m.content, &m.mentions, &crate::normalise::Names::default()),
                at_ms: m.timestamp.as_micros() / 1000,
            })
            .collect();
        // Discord lists newest first; a prompt reads oldest first.
        out.reverse();
        v1::HistoryReply { messages: out, error: String::new() }
    }

    pub(crate) async fn run_voice_sessions(&self) -> Result<(), GatewayError> {
        // Every gateway replica needs every guild's current session, so each reads the stream from
        // the last message per guild with a consumer of its own, named by its replica id and
        // made afresh at start (a restart must read the current sessions again, not resume).
        let name = format!("gateway-voice-{}", self.inner.config.replica);
        let mut spec = ConsumerSpec::durable(name, Family::VoiceSession).last_per_subject().fresh();
        spec.ack_wait = Duration::from_secs(30);
        let mut consumer = self.inner.bus.consumer::<v1::VoiceSession>(spec).await?;
        loop {
            let d = consumer.next().await?;
            {
                let mut voice = self.inner.voice.write().unwrap_or_else(|p| p.into_inner());
                match d.event.channel_id {
                    Some(_) => voice.insert(d.event.guild_id, d.event.clone()),
                    None => voice.remove(&d.event.guild_id),
                };
            }
            let _ = d.ack().await;
        }
    }

    /// The live voice channel of a guild, as this gateway knows it: none once the session's
    /// owner stopped vouching for it (it died with the room empty, say).
    pub fn live_voice_channel(&self, guild: u64) -> Option<u64> {
        self.inner.voice.read().unwrap_or_else(|p| p.into_inner()).get(&guild).and_then(|s| s.live_channel(clankie_bus::now_ms()))
    }

    pub(crate) async fn run_outcome_reactions(&self) -> Result<(), GatewayError> {
        if !self.inner.config.outcome_reactions {
            return std::future::pending().await;
        }
        let spec = ConsumerSpec::durable("gateway-outcomes", Family::LaneOutcome)
            .with_ack_wait(OUTCOME_ACK_WAIT)
            .with_prefetch(OUTCOME_PREFETCH, 0);
        let mut consumer = self.inner.bus.consumer::<v1::DeliveryOutcome>(spec).await?;
        loop {
            let d = consumer.next().await?;
            let span = tracing::info_span!("delivery", otel.name = "gateway.outcome_reaction", delivery_id = %d.event.delivery_id);
            d.traced(&span);
            tracing::Instrument::instrument(self.react(d), span).await;
        }
    }

    /// Shows one outcome on its message as a reaction, once its reply is out.
    async fn react(&self, d: clankie_bus::Delivery<v1::DeliveryOutcome>) {
        let outcome = &d.event;
        let (Ok(lane), Ok(message)) = (outcome.lane.parse::<LaneKey>(), outcome.delivery_id.parse::<u64>()) else {
            let _ = d.term().await;
            return;
        };
        let (Some(channel), Some(message)) = (Id::new_checked(lane.channel()), Id::new_checked(message)) else {
            let _ = d.term().await;
            return;
        };
        let kind = v1::OutcomeKind::try_from(outcome.kind).unwrap_or(v1::OutcomeKind::Unspecified);
        // A withdrawn message is gone from Discord: there is nothing to react on.
        if kind == v1::OutcomeKind::Withdrawn {
            let _ = d.ack().await;
            return;
        }
        // "Replied" is shown once the reply is: a reaction never races ahead of its reply.
        // Waited for by redelivery, so the outcomes behind it go on meanwhile; bounded, so a
        // reply that never posts cannot hold its outcome back for long.
        if kind == v1::OutcomeKind::Replied
            && matches!(lane, LaneKey::Room { .. } | LaneKey::Dm { .. })
            && !outcome.turn_id.is_empty()
            && d.delivered < REPLY_WAITS
            && !self.reply_is_out(&format!("reply:{}", outcome.turn_id)).await
        {
            let _ = d.nak_after(REPLY_WAIT).await;
            return;
        }
        let emoji = RequestReactionType::Unicode { name: kind.reaction() };
        // Replies first: the outcome waits while the budget is crowded, well inside its ack wait.
        let slot = self.inner.budget.give_way(OUTCOME_ACK_WAIT / 3).await;
        if !self.speaks_rest() {
            let _ = d.nak_after(Duration::from_millis(500)).await;
            return;
        }
        clankie_settings::fault::point("gateway.before_reaction");
        if let Some(held) = clankie_settings::fault::hold("gateway.before_reaction") {
            tokio::time::sleep(held).await;
        }
        if self.fence().is_err() {
            let _ = d.nak_after(Duration::from_millis(500)).await;
            return;
        }
        let reacted = self.inner.http.get().create_reaction(channel, message, &emoji).await;
        drop(slot);
        match reacted {
            Ok(_) => {
                clankie_settings::fault::point("gateway.after_reaction");
                let _ = d.ack().await;
            }
            Err(e) => match classify(&e) {
                PostError::Retry => {
                    let _ = d.nak_after(Duration::from_secs(1)).await;
                }
                PostError::Refused(_) => {
                    let _ = d.term().await;
                }
                PostError::Denied(denied) => {
                    let codes = denied.codes(&["needs_read_message_history", "needs_add_reactions"]);
                    tracing::error!(
                        channel = channel.get(),
                        ?codes,
                        "Discord refused an outcome's reaction for a permission the bot lacks in the channel"
                    );
                    self.receipt("gateway.reaction_refused", &outcome.delivery_id, |r| {
                        codes.iter().fold(r.with_id("channel", channel.get()).with_count("status", 403), |r, code| r.with_code(code))
                    })
                    .await;
                    let _ = d.term().await;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_splits_at_natural_boundaries_under_the_limit() {
        let sentence = "This is one sentence about the bracket. ";
        let text = sentence.repeat(120);
        let pieces = split(&text, MAX_MESSAGE);
        assert!(pieces.len() >= 3);
        assert!(pieces.iter().all(|p| p.chars().count() <= MAX_MESSAGE));
        assert!(pieces.iter().all(|p| p.ends_with('.')), "{:?}", pieces.iter().map(|p| &p[p.len() - 5..]).collect::<Vec<_>>());
        assert_eq!(pieces.join(" ").split_whitespace().count(), text.split_whitespace().count());
    }

    #[test]
    fn text_without_boundaries_still_splits() {
        let pieces = split(&"x".repeat(4500), MAX_MESSAGE);
        assert_eq!(pieces.iter().map(|p| p.chars().count()).collect::<Vec<_>>(), [2000, 2000, 500]);
        assert_eq!(split("short", MAX_MESSAGE), ["short"]);
        let multibyte = "é".repeat(2001);
        assert!(split(&multibyte, MAX_MESSAGE).iter().all(|p| p.chars().count() <= MAX_MESSAGE));
    }

    #[test]
    fn reply_pieces_past_the_bound_are_cut_with_a_note_inside_the_limit() {
        let pieces = split(&"word ".repeat(2_000 * 3), MAX_MESSAGE);
        let whole = pieces.len();
        let (kept, cut) = bound_pieces(pieces.clone(), 3);
        assert_eq!((kept.len(), cut), (3, whole - 3));
        assert!(kept[2].ends_with(CUT_NOTE));
        assert!(kept.iter().all(|p| p.chars().count() <= MAX_MESSAGE), "{:?}", kept.iter().map(|p| p.chars().count()).collect::<Vec<_>>());
        assert_eq!(kept[..2], pieces[..2]);
        assert_eq!(bound_pieces(pieces.clone(), whole), (pieces, 0));
    }

    #[test]
    fn nonces_are_stable_distinct_and_short() {
        assert_eq!(nonce("reply:1", 0), nonce("reply:1", 0));
        assert_ne!(nonce("reply:1", 0), nonce("reply:1", 1));
        assert_ne!(nonce("reply:1", 0), nonce("reply:2", 0));
        assert!(nonce("reply:1", 0).len() <= 25);
    }
}
