//! What a lane shows the model of one delivery: the audience rule applied to the words it
//! carries of other people, its text files and pictures fetched through media, as one user
//! message.

use clankie_agent::UserMessage;
use clankie_proto::{Subject, v1};

use crate::{Captain, Held, prompt};

impl Captain {
    /// Fetches, side by side, the context ingest left to fetch for the messages a turn is about
    /// to read (`context_pending`: a reply chain, a link, a thread's starter), and merges it in.
    /// Past [`crate::CaptainConfig::context_timeout`] or without a body to ask, the turn reads
    /// what ingest found.
    pub(crate) async fn context_before_turn(&self, held: impl Iterator<Item = &mut Held>) {
        let config = &self.inner.config;
        let asks = held.filter(|h| h.ingress.context_pending && !h.is_change()).map(|h| async move {
            let request = v1::ContextRequest {
                guild_id: h.ingress.guild_id,
                channel_id: h.ingress.channel_id,
                message_id: h.message_id(),
                reply_chain_depth: config.reply_chain_depth,
            };
            let subject = Subject::RpcContext { channel: h.ingress.channel_id };
            let no_body = std::time::Duration::from_millis(500).min(config.context_timeout);
            match self.inner.bus.request_within::<_, v1::ContextReply>(&subject, &request, config.context_timeout, no_body).await {
                Ok(reply) if reply.error.is_empty() => {
                    merge_context(&mut h.ingress, reply);
                    h.ingress.context_pending = false;
                }
                Ok(reply) => tracing::warn!(code = %reply.error, "a message's context could not be gathered; the turn reads it without"),
                Err(e) => tracing::warn!(error = %e, "a message's context was not gathered in time; the turn reads it without"),
            }
        });
        futures::future::join_all(asks).await;
    }

    /// The people who asked to be forgotten; everyone, when the list cannot be read.
    pub(crate) async fn forgotten(&self) -> clankie_proto::audience::Forgotten {
        match self.inner.store.forgotten_users().await {
            Ok(people) => clankie_proto::audience::Forgotten::new(people),
            Err(e) => {
                tracing::warn!(error = %e, "forgotten people not readable; other people's words are left out");
                clankie_proto::audience::Forgotten::unreadable()
            }
        }
    }

    /// `ingress` as the audience rule lets this lane see it (`clankie_proto::audience`): other
    /// people's words it carries, linked, quoted or starting its thread, checked against the
    /// forgotten and the owner's admitted channels.
    pub(crate) async fn ruled<'a>(&self, ingress: &'a v1::Ingress, admitted_channels: &[u64]) -> std::borrow::Cow<'a, v1::Ingress> {
        let carries = !ingress.quoted.is_empty() || ingress.thread.as_ref().is_some_and(|t| t.starter.is_some());
        if !carries {
            return std::borrow::Cow::Borrowed(ingress);
        }
        let mut ruled = ingress.clone();
        clankie_proto::audience::rule_ingress(&mut ruled, &self.forgotten().await, admitted_channels);
        std::borrow::Cow::Owned(ruled)
    }

    /// A delivery as the model sees it: its attributed block with its context (what it replies
    /// to or links, pointed at where the conversation `held` it already; its poll, stickers,
    /// embeds, forwards and text files), and its pictures fetched through media.
    /// Other people's words in it are as the audience rule lets them be ([`Captain::ruled`]).
    pub(super) async fn user_message(&self, h: &Held, held: &std::collections::HashSet<u64>, admitted_channels: &[u64]) -> UserMessage {
        let bound = self.inner.config.bounds.attachments_per_message;
        let pictures: Vec<&v1::Attachment> = h.ingress.attachments.iter().filter(|a| a.content_type.starts_with("image/")).collect();
        let shown = pictures.len().min(bound);
        if h.ingress.attachments.len() > bound {
            self.receipt("captain.bounded", h.delivery_id(), &h.lane, |r| {
                r.with_code("attachments_capped").with_count("attachments", h.ingress.attachments.len() as i64)
            })
            .await;
        }
        let files = self.text_files(h).await;
        let ingress = self.ruled(&h.ingress, admitted_channels).await;
        let (text, lines) = prompt::message_in_context(&ingress, shown, &|id| held.contains(&id), &files);
        let mut message = UserMessage { lines, ..UserMessage::new(h.ingress.author_name.clone(), h.delivery_id(), text) };
        for a in pictures.into_iter().take(shown) {
            if let Some((data, content_type)) = self.attachment_bytes(h, a, "picture").await
                && !data.is_empty()
            {
                use base64::Engine as _;
                let encoded = base64::engine::general_purpose::STANDARD.encode(&data);
                message.images.push(format!("data:{content_type};base64,{encoded}"));
            }
        }
        message
    }
}

impl Captain {
    /// The text files among a delivery's attachments (`.txt`, `.md`, code), fetched through
    /// media like pictures and read as UTF-8, each bounded; a file that is not text is left to
    /// its name.
    async fn text_files(&self, h: &Held) -> Vec<prompt::FileText> {
        let mut out = Vec::new();
        for a in h.ingress.attachments.iter().filter(|a| prompt::is_text_file(&a.filename, &a.content_type)).take(prompt::MAX_TEXT_FILES) {
            if let Some((bytes, _)) = self.attachment_bytes(h, a, "text file").await
                && let Some(text) = prompt::file_text(&bytes)
            {
                out.push(prompt::FileText { name: a.filename.clone(), text });
            }
        }
        out
    }

    /// One of a delivery's attachments, fetched through media (stored there first if need be),
    /// with its content type; `None`, logged with `what` it was, when it cannot be had: the
    /// lane then sees its name only.
    async fn attachment_bytes(&self, h: &Held, a: &v1::Attachment, what: &str) -> Option<(Vec<u8>, String)> {
        let request = v1::MediaAttachmentRequest { attachment: Some(a.clone()), delivery_id: h.delivery_id().to_owned() };
        let asked =
            self.inner.bus.request::<_, v1::MediaResolveReply>(&Subject::RpcMediaAttachment, &request, self.inner.config.media_timeout);
        let reply = match asked.await {
            Ok(reply) if reply.error.is_empty() => reply,
            Ok(reply) => {
                tracing::warn!(code = %reply.error, what, "an attachment could not be fetched; the lane sees its name only");
                return None;
            }
            Err(e) => {
                tracing::warn!(error = %e, what, "media unreachable; the lane sees the attachment's name only");
                return None;
            }
        };
        match self.inner.bus.bytes_of(reply.data, &reply.blob).await {
            Ok(bytes) => Some((bytes, reply.content_type)),
            Err(e) => {
                tracing::warn!(error = %e, what, "an attachment's blob could not be taken; the lane sees its name only");
                None
            }
        }
    }
}

/// Merges what the body gathered into a message as ingest would have carried it: the
/// replied-to message first (unless Discord sent it), then the chain above it and linked
/// messages, each message once; the thread as gathered, its starter included.
pub(crate) fn merge_context(ingress: &mut v1::Ingress, reply: v1::ContextReply) {
    let mut at = ingress.quoted.iter().position(|q| q.kind() == v1::QuotedKind::RepliedTo).map_or(0, |i| i + 1);
    if at == 0
        && let Some(replied) = reply.replied_to
    {
        ingress.reply_to_him |= replied.is_him;
        ingress.quoted.insert(0, replied);
        at = 1;
    }
    for q in reply.quoted {
        if q.message_id != 0 && ingress.quoted.iter().any(|held| held.message_id == q.message_id) {
            continue;
        }
        ingress.quoted.insert(at, q);
        at += 1;
    }
    if let Some(thread) = reply.thread {
        ingress.thread = Some(thread);
    }
}
