//! What a message points at, gathered before it is published: the chain of messages it replies
//! to, the messages it links, what its thread is about, and the names behind the channels and
//! roles its words mention. Discord sends some of it with the message (the replied-to message,
//! mentioned members); the rest is fetched, bounded in count and in time, and a channel's facts
//! are kept until a channel or thread event says they changed.

pub(crate) mod places;

use std::collections::HashMap;
use std::time::Duration;

use clankie_proto::audience::{self, LinkRefusal};
use clankie_proto::v1;
use twilight_model::channel::message::{MessageReferenceType, MessageType};
use twilight_model::channel::{ChannelType, Message};
use twilight_model::guild::Permissions;
use twilight_model::id::Id;

use self::places::{ChannelFacts, GuildRules, Places};
use crate::doctor::channel_permissions;
use crate::error::GatewayError;
use crate::normalise::{self, Names};
use crate::state::Gateway;

/// How long gathering may hold a message back before it is published with what was found.
pub const GATHER_PATIENCE: Duration = Duration::from_secs(3);

/// What gathering found for one message.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    pub names: Names,
    /// Further up the reply chain (the replied-to message itself comes with the message), then
    /// linked messages.
    pub quoted: Vec<v1::Quoted>,
    /// The replied-to message when Discord did not send it.
    pub replied_to: Option<v1::Quoted>,
    pub thread: Option<v1::ThreadContext>,
    /// Links not followed, each with why.
    pub links_refused: Vec<LinkRefusal>,
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

    /// Gathers `message`'s context within [`GATHER_PATIENCE`]; past it, or on any refusal, the
    /// message goes on with what was found (it is never held back for good). The thread comes
    /// first, with a patience of its own: admission, quiet and trust follow a thread's parent.
    /// A bot's message is never admitted, so nothing is fetched for it.
    pub(crate) async fn gather(&self, message: &Message) -> Gathered {
        let mut gathered = Gathered::default();
        if message.author.bot {
            return gathered;
        }
        if message.guild_id.is_some() {
            gathered.thread = tokio::time::timeout(GATHER_PATIENCE, self.thread_context(message)).await.ok().flatten();
        }
        let _ = tokio::time::timeout(GATHER_PATIENCE, self.gather_into(message, &mut gathered)).await;
        gathered
    }

    async fn gather_into(&self, message: &Message, out: &mut Gathered) {
        let bot = self.bot_id();
        let guild = message.guild_id.map(|g| g.get());
        let (channels, roles) = normalise::mentioned_places(&message.content);
        for id in channels.into_iter().take(10) {
            if let Some(f) = self.channel_facts(id).await
                && f.guild_id == guild
            {
                out.names.channels.insert(id, normalise::display_bounded(&f.name));
            }
        }
        if let Some(g) = guild
            && !roles.is_empty()
        {
            let known = self.role_names(g, &roles).await;
            out.names.roles = known;
        }
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
            let _slot = self.budget().pace().await;
            match self.http().join_thread(message.channel_id).await {
                Ok(_) => self.places().update(channel, |f| f.joined = true),
                Err(e) => tracing::warn!(error = %e, "could not join a thread he was mentioned in"),
            }
        }
        let parent = match facts.parent_id {
            Some(p) => self.channel_facts(p).await.unwrap_or_default(),
            None => ChannelFacts::default(),
        };
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
        Some(v1::ThreadContext {
            parent_id: facts.parent_id.unwrap_or_default(),
            parent_name: normalise::display_bounded(&parent.name),
            name: normalise::display_bounded(&facts.name),
            kind: kind as i32,
            tags,
            starter,
            archived: facts.archived,
        })
    }

    /// A channel's facts: kept ones, else fetched (and kept). `None` when Discord refuses.
    pub(crate) async fn channel_facts(&self, id: u64) -> Option<ChannelFacts> {
        if let Some(f) = self.places().channel(id) {
            return Some(f);
        }
        let channel_id = Id::new_checked(id)?;
        let _slot = self.budget().pace().await;
        let channel = self.http().channel(channel_id).await.ok()?.model().await.ok()?;
        let facts = ChannelFacts::of(&channel);
        self.places().keep(id, facts.clone());
        Some(facts)
    }

    /// The names of `wanted` roles of a guild: kept ones, else the guild's roles fetched again.
    async fn role_names(&self, guild: u64, wanted: &[u64]) -> HashMap<u64, String> {
        let known = |places: &Places| {
            places.guild(guild).filter(|g| !g.roles.is_empty()).map(|g| {
                g.roles
                    .iter()
                    .filter(|r| wanted.contains(&r.id.get()))
                    .map(|r| (r.id.get(), normalise::display_bounded(&r.name)))
                    .collect::<HashMap<_, _>>()
            })
        };
        if let Some(found) = known(self.places())
            && found.len() == wanted.len()
        {
            return found;
        }
        let Some(guild_id) = Id::new_checked(guild) else { return HashMap::new() };
        let _slot = self.budget().pace().await;
        if let Ok(response) = self.http().roles(guild_id).await
            && let Ok(roles) = response.models().await
        {
            self.places().keep_guild(guild, |g| g.roles = roles);
        }
        known(self.places()).unwrap_or_default()
    }

    /// A guild's owner and roles: kept ones, else the guild fetched (and kept).
    async fn guild_rules(&self, guild: u64) -> Option<GuildRules> {
        if let Some(g) = self.places().guild(guild).filter(|g| g.owner.is_some() && !g.roles.is_empty()) {
            return Some(g);
        }
        let guild_id = Id::new_checked(guild)?;
        let _slot = self.budget().pace().await;
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
        let (Some(guild), Some(member)) = (message.guild_id, message.member.as_ref()) else { return false };
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
        let permissions = channel_permissions(guild, owner, message.author.id, &member.roles, &rules.roles, &overwrites);
        permissions.contains(Permissions::VIEW_CHANNEL | Permissions::READ_MESSAGE_HISTORY)
    }

    /// One message, fetched; `None` when it is gone or hidden from him.
    async fn fetch_message(&self, channel: u64, id: u64) -> Option<Message> {
        let (channel, id) = (Id::new_checked(channel)?, Id::new_checked(id)?);
        let _slot = self.budget().pace().await;
        self.http().message(channel, id).await.ok()?.model().await.ok()
    }

    /// A thread changed: its facts are kept as the update says (the name, the archived flag,
    /// the tags). Whether it was archived by this update.
    pub(crate) fn thread_updated(&self, thread: &twilight_model::channel::Channel) -> bool {
        let id = thread.id.get();
        let was_archived = self.places().channel(id).map(|f| f.archived);
        let mut facts = ChannelFacts::of(thread);
        if let Some(old) = self.places().channel(id) {
            facts.starter = old.starter;
            facts.joined = old.joined || facts.joined;
        }
        let archived = facts.archived;
        self.places().keep(id, facts);
        archived && was_archived != Some(true)
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
