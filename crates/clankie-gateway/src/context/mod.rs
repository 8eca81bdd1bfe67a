//! What a message points at: the chain of messages it replies to, the messages it links, what
//! its thread is about, and the names behind the channels and roles its words mention.
//!
//! Two places gather it. Ingest ([`Gateway::gather_known`]) takes only what Discord sent with
//! the message and what the places cache holds (filled by GUILD_CREATE and channel and thread
//! events), so no message waits on Discord's REST API behind another; it marks the message
//! `context_pending` when something is left to fetch. A lane that admits such a message asks
//! for the rest before its turn ([`Gateway::run_context`], `clankie.rpc.context.<channel>`):
//! fetched then, bounded in count and in time, on the REST budget's low-priority share, so a
//! reply never waits behind it and messages nobody answers cost no request.

pub(crate) mod places;

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use prost::Message as _;
use tracing::Instrument;

use clankie_proto::audience::{self, LinkRefusal};
use clankie_proto::{Family, v1};
use twilight_model::channel::message::{MessageReferenceType, MessageType};
use twilight_model::channel::{ChannelType, Message};
use twilight_model::guild::Permissions;
use twilight_model::id::Id;

use self::places::{ChannelFacts, GuildRules};
use crate::doctor::channel_permissions;
use crate::error::GatewayError;
use crate::normalise::{self, Names};
use crate::state::Gateway;

/// How long a lane's context request may take before it is answered with what was found.
pub const GATHER_PATIENCE: Duration = Duration::from_secs(3);

/// What gathering found for one message.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    /// Further up the reply chain (the replied-to message itself comes with the message), then
    /// linked messages.
    pub quoted: Vec<v1::Quoted>,
    /// The replied-to message when Discord did not send it.
    pub replied_to: Option<v1::Quoted>,
    pub thread: Option<v1::ThreadContext>,
    /// Links not followed, each with why.
    pub links_refused: Vec<LinkRefusal>,
}

/// What ingest knows of a message's context without asking Discord.
#[derive(Debug, Default)]
pub(crate) struct Known {
    pub names: Names,
    pub thread: Option<v1::ThreadContext>,
    /// Something is left to fetch: a lane that admits the message asks for it.
    pub pending: bool,
}

impl Gateway {
    /// Hears the audience facts (`clankie_audience`): every one recorded, then each new one. A
    /// forget drops the person's cached thread starters, and their old words fetched later come
    /// in as the marker; links follow the owner's admitted channels.
    pub(crate) async fn run_audience(&self) -> Result<(), GatewayError> {
        let mut facts = std::pin::pin!(self.bus().audience_facts());
        while let Some(fact) = futures::StreamExt::next(&mut facts).await {
            self.places().hear(fact);
        }
        Ok(())
    }

    /// The owner's admitted channels once heard; past [`GATHER_PATIENCE`] unheard, `None` (no
    /// link is followed on a list nobody has told this gateway).
    async fn admitted_channels(&self) -> Option<Vec<u64>> {
        let mut heard = self.places().heard_changes();
        let known = tokio::time::timeout(GATHER_PATIENCE, heard.wait_for(|h| h.admitted_channels.is_some())).await;
        known.ok()?.ok()?.admitted_channels.clone()
    }

    /// Applies the audience rule to what `ingress` carries of other people's words before it is
    /// published: a forgotten person's old words become the marker. How many it replaced.
    pub(crate) fn rule_carried(&self, ingress: &mut v1::Ingress) -> usize {
        self.places().rule_carried(ingress)
    }

    /// Gathers `message`'s context for a lane about to read it, until `deadline`; past it, or on
    /// any refusal, the lane goes on with what was found. The thread comes first.
    /// A bot's message is never admitted, so nothing is fetched for it.
    pub(crate) async fn gather(&self, message: &Message, deadline: tokio::time::Instant) -> Gathered {
        let mut gathered = Gathered::default();
        if message.author.bot {
            return gathered;
        }
        if message.guild_id.is_some() {
            gathered.thread = tokio::time::timeout_at(deadline, self.thread_context(message)).await.ok().flatten();
        }
        let _ = tokio::time::timeout_at(deadline, self.gather_into(message, &mut gathered)).await;
        gathered
    }

    async fn gather_into(&self, message: &Message, out: &mut Gathered) {
        let bot = self.bot_id();
        let guild = message.guild_id.map(|g| g.get());
        // The reply chain, for a reply only (not a forward, not a crosspost): the replied-to
        // message comes with the message unless Discord did not fetch it; each one above it is
        // fetched, up to the configured depth, while it stays a reply within this guild.
        let depth = self.config().reply_chain_depth;
        let replied = message.referenced_message.as_ref().map(|r| r.id.get());
        if message.kind == MessageType::Reply && depth > 0 {
            let mut next = match (&message.referenced_message, reply_of(message, guild)) {
                (Some(replied), _) => reply_of(replied, guild),
                (None, Some((channel, id))) => match self.fetch_message(channel, id).await {
                    Some(m) => {
                        out.replied_to = Some(normalise::quoted(&m, v1::QuotedKind::RepliedTo, bot));
                        reply_of(&m, guild)
                    }
                    None => None,
                },
                (None, None) => None,
            };
            let mut shown = 1;
            while shown < depth
                && let Some((channel, id)) = next.take()
                && let Some(m) = self.fetch_message(channel, id).await
            {
                out.quoted.push(normalise::quoted(&m, v1::QuotedKind::ReplyChain, bot));
                next = reply_of(&m, guild);
                shown += 1;
            }
        }
        // Links to messages of this guild only, checked against the channel itself (the guild
        // id in a link is whatever its writer typed): nothing of one guild reaches another.
        for (link_guild, channel, id) in normalise::message_links(&message.content) {
            let quoted_already = replied == Some(id)
                || out.replied_to.as_ref().is_some_and(|r| r.message_id == id)
                || out.quoted.iter().any(|q| q.message_id == id);
            if Some(link_guild) != guild || quoted_already {
                continue;
            }
            let Some(facts) = self.channel_facts(channel).await else { continue };
            if facts.guild_id != guild {
                continue;
            }
            let Some(admitted) = self.admitted_channels().await else {
                out.links_refused.push(LinkRefusal::NotAdmitted);
                continue;
            };
            let poster_views = self.poster_views(message, &facts).await;
            if let Err(refusal) = audience::rule_link(channel, &admitted, poster_views) {
                out.links_refused.push(refusal);
                continue;
            }
            if let Some(m) = self.fetch_message(channel, id).await
                && m.guild_id.is_none_or(|g| Some(g.get()) == guild)
            {
                let mut q = normalise::quoted(&m, v1::QuotedKind::Linked, bot);
                q.label = format!("#{}", normalise::display_bounded(&facts.name));
                out.quoted.push(q);
            }
        }
    }

    /// The thread a message was written in, if it was: its parent, name, kind, tags and
    /// starter. He joins a thread he is mentioned in, so its later messages reach him.
    async fn thread_context(&self, message: &Message) -> Option<v1::ThreadContext> {
        let channel = message.channel_id.get();
        let facts = self.channel_facts(channel).await?;
        if !facts.is_thread() {
            return None;
        }
        let bot = self.bot_id();
        if !facts.joined && message.mentions.iter().any(|m| m.id.get() == bot) {
            self.join_later(message.channel_id);
        }
        let parent = match facts.parent_id {
            Some(p) => self.channel_facts(p).await.unwrap_or_default(),
            None => ChannelFacts::default(),
        };
        let forum = matches!(parent.kind, Some(ChannelType::GuildForum | ChannelType::GuildMedia));
        // A thread started from a message has that message's id; it lives in the parent, and a
        // forum post's first message (the same id) in the thread. The first message is no starter of itself.
        let starter = match &facts.starter {
            Some(s) => s.clone(),
            None => {
                let home = if forum { channel } else { facts.parent_id.unwrap_or(channel) };
                let s = if message.id.get() == channel {
                    None
                } else {
                    self.fetch_message(home, channel).await.map(|m| normalise::quoted(&m, v1::QuotedKind::ThreadStarter, bot))
                };
                if message.id.get() != channel {
                    self.places().update(channel, |f| f.starter = Some(s.clone()));
                }
                s
            }
        };
        Some(thread_context(&facts, &parent, starter))
    }

    /// A channel's facts: kept ones, else fetched (and kept). `None` when Discord refuses.
    pub(crate) async fn channel_facts(&self, id: u64) -> Option<ChannelFacts> {
        if let Some(f) = self.places().channel(id) {
            return Some(f);
        }
        let channel_id = Id::new_checked(id)?;
        let _slot = self.budget().pace_context().await;
        let channel = self.http().channel(channel_id).await.ok()?.model().await.ok()?;
        let facts = ChannelFacts::of(&channel);
        self.places().keep(id, facts.clone());
        Some(facts)
    }

    /// The names of `wanted` roles of a guild: kept ones, else the guild's roles fetched again,
    /// once: an id still unknown after that is kept as unknown until a role event, so a
    /// mention of a role that does not exist costs one fetch, not one per message.
    async fn role_names(&self, guild: u64, wanted: &[u64]) -> HashMap<u64, String> {
        let (found, unknown) = self.places().role_names(guild, wanted);
        if unknown.is_empty() {
            return found;
        }
        let Some(guild_id) = Id::new_checked(guild) else { return found };
        let _slot = self.budget().pace_context().await;
        if let Ok(response) = self.http().roles(guild_id).await
            && let Ok(roles) = response.models().await
        {
            self.places().keep_guild(guild, |g| g.roles = roles);
        }
        self.places().roles_unknown(guild, &unknown);
        self.places().role_names(guild, wanted).0
    }

    /// A guild's owner and roles: kept ones, else the guild fetched (and kept).
    async fn guild_rules(&self, guild: u64) -> Option<GuildRules> {
        if let Some(g) = self.places().guild(guild).filter(|g| g.owner.is_some() && !g.roles.is_empty()) {
            return Some(g);
        }
        let guild_id = Id::new_checked(guild)?;
        let _slot = self.budget().pace_context().await;
        let fetched = self.http().guild(guild_id).await.ok()?.model().await.ok()?;
        self.places().keep_guild(guild, |g| {
            g.owner = Some(fetched.owner_id.get());
            g.roles = fetched.roles;
        });
        self.places().guild(guild)
    }

    /// Whether the poster of `message` may view the channel `facts` describe and read its history, as Discord
    /// computes it from the guild's roles, the poster's and the channel's overwrites (a
    /// thread's parent's). A private thread, whose members he cannot list, and anything he
    /// could not look up count as not viewable.
    async fn poster_views(&self, message: &Message, facts: &ChannelFacts) -> bool {
        let Some(guild) = message.guild_id else { return false };
        // A message read over REST carries no member: the poster's roles are asked for then.
        let roles = match message.member.as_ref() {
            Some(member) => member.roles.clone(),
            None => {
                let _slot = self.budget().pace_context().await;
                let fetched = match self.http().guild_member(guild, message.author.id).await {
                    Ok(response) => response.model().await.ok(),
                    Err(_) => None,
                };
                match fetched {
                    Some(member) => member.roles,
                    None => return false,
                }
            }
        };
        let overwrites = if facts.is_thread() {
            if facts.kind == Some(ChannelType::PrivateThread) {
                return false;
            }
            match facts.parent_id {
                Some(parent) => match self.channel_facts(parent).await {
                    Some(p) => p.overwrites,
                    None => return false,
                },
                None => return false,
            }
        } else {
            facts.overwrites.clone()
        };
        let Some(rules) = self.guild_rules(guild.get()).await else { return false };
        let Some(owner) = rules.owner.and_then(Id::new_checked) else { return false };
        let permissions = channel_permissions(guild, owner, message.author.id, &roles, &rules.roles, &overwrites);
        permissions.contains(Permissions::VIEW_CHANNEL | Permissions::READ_MESSAGE_HISTORY)
    }

    /// One message, fetched; `None` when it is gone or hidden from him.
    async fn fetch_message(&self, channel: u64, id: u64) -> Option<Message> {
        let (channel, id) = (Id::new_checked(channel)?, Id::new_checked(id)?);
        let _slot = self.budget().pace_context().await;
        self.http().message(channel, id).await.ok()?.model().await.ok()
    }

    /// A thread changed: its facts are kept as the update says (the name, the archived flag,
    /// the tags), with what was learned of it (its starter, his membership). Whether it was
    /// archived by this update.
    pub(crate) fn thread_updated(&self, thread: &twilight_model::channel::Channel) -> bool {
        let was_archived = self.places().channel(thread.id.get()).map(|f| f.archived);
        let archived = self.places().refresh(ChannelFacts::of(thread), thread.id.get());
        archived && was_archived != Some(true)
    }

    /// A channel changed (its name, a forum's tags, its overwrites): kept as the update says.
    pub(crate) fn channel_updated(&self, channel: &twilight_model::channel::Channel) {
        self.places().refresh(ChannelFacts::of(channel), channel.id.get());
    }

    /// A guild as GUILD_CREATE describes it: its channels, active threads, roles and owner are
    /// kept, so ingest knows them without asking.
    pub(crate) fn guild_seen(&self, guild: &twilight_model::gateway::payload::incoming::GuildCreate) {
        let twilight_model::gateway::payload::incoming::GuildCreate::Available(guild) = guild else { return };
        let id = guild.id.get();
        for channel in guild.channels.iter().chain(&guild.threads) {
            let mut facts = ChannelFacts::of(channel);
            // GUILD_CREATE's channels leave the guild id out: they are the guild's.
            facts.guild_id.get_or_insert(id);
            self.places().refresh(facts, channel.id.get());
        }
        self.places().keep_guild(id, |g| {
            g.owner = Some(guild.owner_id.get());
            g.roles = guild.roles.clone();
            g.unknown_roles.clear();
        });
    }

    /// Joins a thread he was mentioned in, off the ingest path, so its later messages reach him.
    fn join_later(&self, thread: Id<twilight_model::id::marker::ChannelMarker>) {
        if !self.places().mark_joining(thread.get()) {
            return;
        }
        let gateway = self.clone();
        tokio::spawn(async move {
            let _slot = gateway.budget().pace_context().await;
            match gateway.http().join_thread(thread).await {
                Ok(_) => {}
                Err(e) => {
                    gateway.places().update(thread.get(), |f| f.joined = false);
                    tracing::warn!(error = %e, "could not join a thread he was mentioned in");
                }
            }
        });
    }

    /// What ingest knows of `message`'s context from what Discord sent and the places cache,
    /// and whether anything is left to fetch. Only a message to him (a DM, a mention, a reply
    /// to him) in a channel never seen waits, once, for the channel's facts: a thread's parent
    /// decides where its messages are admitted.
    pub(crate) async fn gather_known(&self, message: &Message, bot: u64) -> Known {
        let mut known = Known::default();
        if message.author.bot {
            return known;
        }
        let guild = message.guild_id.map(|g| g.get());
        let to_him = guild.is_none()
            || message.mentions.iter().any(|m| m.id.get() == bot)
            || message.referenced_message.as_ref().is_some_and(|r| r.author.id.get() == bot);
        let (channels, roles) = normalise::mentioned_places(&message.content);
        for id in channels.into_iter().take(10) {
            if let Some(f) = self.places().channel(id)
                && f.guild_id == guild
            {
                known.names.channels.insert(id, normalise::display_bounded(&f.name));
            }
        }
        if let Some(g) = guild
            && !roles.is_empty()
        {
            let (found, unknown) = self.places().role_names(g, &roles);
            known.names.roles = found;
            if !unknown.is_empty() && to_him {
                self.learn_roles_later(g, unknown);
            }
        }
        if guild.is_some() {
            let channel = message.channel_id.get();
            let facts = match self.places().channel(channel) {
                Some(f) => Some(f),
                None if to_him => tokio::time::timeout(GATHER_PATIENCE, self.channel_facts(channel)).await.ok().flatten(),
                None => None,
            };
            if let Some(facts) = facts.filter(ChannelFacts::is_thread) {
                known.thread = self.thread_known(message, &facts, to_him).await;
                known.pending |=
                    known.thread.as_ref().is_some_and(|t| t.starter.is_none()) && facts.starter.is_none() && message.id.get() != channel;
            }
        }
        let depth = self.config().reply_chain_depth;
        if message.kind == MessageType::Reply && depth > 0 {
            known.pending |= match &message.referenced_message {
                Some(replied) => depth > 1 && reply_of(replied, guild).is_some(),
                None => reply_of(message, guild).is_some(),
            };
        }
        known.pending |= normalise::message_links(&message.content).iter().any(|(g, _, _)| Some(*g) == guild);
        known
    }

    /// A thread's context from the cache: its parent (fetched once for a message to him when
    /// unknown), name, kind and tags, and its starter when kept.
    async fn thread_known(&self, message: &Message, facts: &ChannelFacts, to_him: bool) -> Option<v1::ThreadContext> {
        if to_him && !facts.joined && message.mentions.iter().any(|m| m.id.get() == self.bot_id()) {
            self.join_later(message.channel_id);
        }
        let parent = match facts.parent_id {
            Some(p) => match self.places().channel(p) {
                Some(f) => f,
                None if to_him => tokio::time::timeout(GATHER_PATIENCE, self.channel_facts(p)).await.ok().flatten().unwrap_or_default(),
                None => ChannelFacts::default(),
            },
            None => ChannelFacts::default(),
        };
        Some(thread_context(facts, &parent, facts.starter.clone().flatten()))
    }

    /// Fetches a guild's roles off the ingest path (once at a time), so a later message names them.
    fn learn_roles_later(&self, guild: u64, unknown: Vec<u64>) {
        if !self.places().mark_learning_roles(guild) {
            return;
        }
        let gateway = self.clone();
        tokio::spawn(async move {
            gateway.role_names(guild, &unknown).await;
            gateway.places().learned_roles(guild);
        });
    }

    /// Answers context requests from lanes about to read a message, each on its own task.
    pub(crate) async fn run_context(&self) -> Result<(), GatewayError> {
        let mut requests = self.bus().serve(Family::RpcContext.wildcard(), "body").await?;
        while let Some(msg) = requests.next().await {
            let gateway = self.clone();
            let span = tracing::info_span!("gateway.context", otel.kind = "server");
            clankie_bus::Bus::serving(&msg, &span);
            tokio::spawn(
                async move {
                    let reply = match v1::ContextRequest::decode(msg.payload.clone()) {
                        Ok(req) => gateway.context_for(&req).await,
                        Err(_) => v1::ContextReply { error: "request_undecodable".into(), ..Default::default() },
                    };
                    if let Err(e) = gateway.bus().respond(&msg, &reply).await {
                        tracing::warn!(error = %e, "context reply not sent");
                    }
                }
                .instrument(span),
            );
        }
        Ok(())
    }

    /// A message's context as a lane reads it: the message fetched as it is now, then gathered,
    /// all within [`GATHER_PATIENCE`], and ruled as ingest rules what it carries.
    async fn context_for(&self, req: &v1::ContextRequest) -> v1::ContextReply {
        let deadline = tokio::time::Instant::now() + GATHER_PATIENCE;
        let fetched = tokio::time::timeout_at(deadline, self.fetch_message(req.channel_id, req.message_id)).await;
        let Ok(Some(mut message)) = fetched else {
            return v1::ContextReply { error: "message_unavailable".into(), ..Default::default() };
        };
        // REST's message object names no guild: the channel's facts say whose it is.
        if let Some(guild) = req.guild_id {
            let facts = tokio::time::timeout_at(deadline, self.channel_facts(req.channel_id)).await.ok().flatten();
            if facts.and_then(|f| f.guild_id) != Some(guild) {
                return v1::ContextReply { error: "wrong_place".into(), ..Default::default() };
            }
        }
        message.guild_id = req.guild_id.and_then(Id::new_checked);
        let gathered = self.gather(&message, deadline).await;
        let links_refused = gathered.links_refused.len() as u32;
        let mut carried = v1::Ingress { quoted: gathered.quoted, thread: gathered.thread, ..Default::default() };
        // The replied-to message as Discord holds it now: the ingress lacks it when the dispatch left it out.
        let replied = gathered.replied_to.or_else(|| {
            (message.kind == MessageType::Reply && req.reply_chain_depth > 0)
                .then(|| message.referenced_message.as_deref().map(|r| normalise::quoted(r, v1::QuotedKind::RepliedTo, self.bot_id())))
                .flatten()
        });
        if let Some(r) = replied {
            carried.quoted.insert(0, r);
        }
        let forgotten = self.rule_carried(&mut carried);
        let replied_to = gathered_replied(&mut carried.quoted);
        let depth = req.reply_chain_depth as usize;
        let mut chain = 0;
        carried.quoted.retain(|q| {
            if q.kind() != v1::QuotedKind::ReplyChain {
                return true;
            }
            chain += 1;
            chain < depth
        });
        self.receipt("gateway.context", &req.message_id.to_string(), |r| {
            r.with_id("channel", req.channel_id)
                .with_count("quoted", carried.quoted.len() as i64 + i64::from(replied_to.is_some()))
                .with_count("links_refused", i64::from(links_refused))
                .with_count("forgotten", forgotten as i64)
                .with_flag("thread", carried.thread.is_some())
        })
        .await;
        v1::ContextReply { replied_to, quoted: carried.quoted, thread: carried.thread, links_refused, error: String::new() }
    }
}

/// The replied-to message taken out of `quoted`, where context gathering put it first.
fn gathered_replied(quoted: &mut Vec<v1::Quoted>) -> Option<v1::Quoted> {
    (quoted.first().is_some_and(|q| q.kind() == v1::QuotedKind::RepliedTo)).then(|| quoted.remove(0))
}

/// A thread's context from its facts and its parent's, with `starter` as its first message.
fn thread_context(facts: &ChannelFacts, parent: &ChannelFacts, starter: Option<v1::Quoted>) -> v1::ThreadContext {
    let forum = matches!(parent.kind, Some(ChannelType::GuildForum | ChannelType::GuildMedia));
    let kind = match facts.kind {
        Some(ChannelType::PrivateThread) => v1::ThreadKind::Private,
        Some(ChannelType::AnnouncementThread) => v1::ThreadKind::Announcement,
        _ if forum => v1::ThreadKind::ForumPost,
        _ => v1::ThreadKind::Public,
    };
    let tags = facts
        .applied
        .iter()
        .filter_map(|id| parent.tags.iter().find(|(t, _)| t == id))
        .map(|(_, n)| normalise::display_bounded(n))
        .collect();
    v1::ThreadContext {
        parent_id: facts.parent_id.unwrap_or_default(),
        parent_name: normalise::display_bounded(&parent.name),
        name: normalise::display_bounded(&facts.name),
        kind: kind as i32,
        tags,
        starter,
        archived: facts.archived,
    }
}

/// The message `message` replies to, as (channel, message), when it is a reply within `guild`.
fn reply_of(message: &Message, guild: Option<u64>) -> Option<(u64, u64)> {
    if message.kind != MessageType::Reply {
        return None;
    }
    let r = message.reference.as_ref()?;
    if r.kind != MessageReferenceType::Default || r.guild_id.is_some_and(|g| Some(g.get()) != guild) {
        return None;
    }
    Some((r.channel_id.unwrap_or(message.channel_id).get(), r.message_id?.get()))
}
