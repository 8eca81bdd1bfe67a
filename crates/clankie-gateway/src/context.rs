//! What a message points at, gathered before it is published: the chain of messages it replies
//! to, the messages it links, what its thread is about, and the names behind the channels and
//! roles its words mention. Discord sends some of it with the message (the replied-to message,
//! mentioned members); the rest is fetched, bounded in count and in time, and a channel's facts
//! are kept until a channel or thread event says they changed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use clankie_proto::audience::{self, Forgotten, LinkRefusal};
use clankie_proto::v1;
use twilight_model::channel::message::{MessageReferenceType, MessageType};
use twilight_model::channel::permission_overwrite::PermissionOverwrite;
use twilight_model::channel::{ChannelType, Message};
use twilight_model::guild::{Permissions, Role};
use twilight_model::id::Id;

use crate::Gateway;
use crate::normalise::{self, Names};

/// How long gathering may hold a message back before it is published with what was found.
pub const GATHER_PATIENCE: Duration = Duration::from_secs(3);

/// A channel as a message's context needs it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChannelFacts {
    pub name: String,
    pub kind: Option<ChannelType>,
    pub guild_id: Option<u64>,
    pub parent_id: Option<u64>,
    /// A forum's tags, by id.
    pub tags: Vec<(u64, String)>,
    /// A forum post's applied tags.
    pub applied: Vec<u64>,
    pub archived: bool,
    /// A thread's starter message, once fetched (`Some(None)`: it has none, or it is gone).
    pub starter: Option<Option<v1::Quoted>>,
    /// He joined it (or asked to): Discord sends a thread's events to its members.
    pub joined: bool,
    /// Its permission overwrites (a thread has none: its parent's apply).
    pub overwrites: Vec<PermissionOverwrite>,
}

impl ChannelFacts {
    fn of(channel: &twilight_model::channel::Channel) -> ChannelFacts {
        ChannelFacts {
            name: channel.name.clone().unwrap_or_default(),
            kind: Some(channel.kind),
            guild_id: channel.guild_id.map(|g| g.get()),
            parent_id: channel.parent_id.map(|p| p.get()),
            tags: channel.available_tags.iter().flatten().map(|t| (t.id.get(), t.name.clone())).collect(),
            applied: channel.applied_tags.iter().flatten().map(|t| t.get()).collect(),
            archived: channel.thread_metadata.as_ref().is_some_and(|m| m.archived),
            starter: None,
            joined: channel.member.is_some(),
            overwrites: channel.permission_overwrites.clone().unwrap_or_default(),
        }
    }

    /// A thread of any kind.
    pub fn is_thread(&self) -> bool {
        matches!(self.kind, Some(ChannelType::PublicThread | ChannelType::PrivateThread | ChannelType::AnnouncementThread))
    }
}

/// A guild as a link's permission check needs it: its owner and roles.
#[derive(Debug, Clone, Default)]
struct GuildRules {
    owner: Option<u64>,
    roles: Vec<Role>,
}

/// The audience facts the gateway has heard (`clankie_audience`): who is forgotten, and the
/// owner's admitted channels (`None` until heard: no link is followed before then).
#[derive(Debug, Clone, Default)]
pub(crate) struct Heard {
    pub forgotten: Forgotten,
    pub admitted_channels: Option<Vec<u64>>,
}

/// The channel facts, guild roles and audience facts this gateway has learned, each kept until
/// an event says it changed. Only the gateway's ingest reads and writes it, through its methods.
#[derive(Debug)]
pub(crate) struct Places {
    channels: Mutex<HashMap<u64, ChannelFacts>>,
    guilds: Mutex<HashMap<u64, GuildRules>>,
    heard: tokio::sync::watch::Sender<Heard>,
}

impl Default for Places {
    fn default() -> Places {
        Places { channels: Mutex::default(), guilds: Mutex::default(), heard: tokio::sync::watch::channel(Heard::default()).0 }
    }
}

impl Places {
    fn channel(&self, id: u64) -> Option<ChannelFacts> {
        self.channels.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
    }

    fn keep(&self, id: u64, facts: ChannelFacts) {
        self.channels.lock().unwrap_or_else(|p| p.into_inner()).insert(id, facts);
    }

    fn update(&self, id: u64, change: impl FnOnce(&mut ChannelFacts)) {
        if let Some(f) = self.channels.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&id) {
            change(f);
        }
    }

    /// A message was edited or deleted: a thread started from it (the thread has its id) fetches
    /// its starter again when next needed, so no message there carries the old words.
    pub(crate) fn forget_starter(&self, message: u64) {
        self.update(message, |f| f.starter = None);
    }

    /// `author` asked to be forgotten: every thread starter of theirs kept here is dropped, so
    /// no later message carries their words from this cache.
    pub(crate) fn forget_starters_of(&self, author: u64) {
        for facts in self.channels.lock().unwrap_or_else(|p| p.into_inner()).values_mut() {
            if matches!(&facts.starter, Some(Some(q)) if q.author_id == author) {
                facts.starter = None;
            }
        }
    }

    /// A channel or thread changed or went: its facts are fetched again when next needed.
    pub(crate) fn forget_channel(&self, id: u64) {
        self.channels.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }

    /// A guild's roles or owner changed: they are fetched again when next needed.
    pub(crate) fn forget_guild(&self, id: u64) {
        self.guilds.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }

    fn guild(&self, id: u64) -> Option<GuildRules> {
        self.guilds.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
    }

    fn keep_guild(&self, id: u64, change: impl FnOnce(&mut GuildRules)) {
        change(self.guilds.lock().unwrap_or_else(|p| p.into_inner()).entry(id).or_default());
    }

    /// One audience fact heard: a forget also drops that person's cached thread starters.
    pub(crate) fn hear(&self, fact: clankie_bus::AudienceFact) {
        match fact {
            clankie_bus::AudienceFact::Forgotten { user_id, at_ms } => {
                self.forget_starters_of(user_id);
                self.heard.send_modify(|h| h.forgotten.record(user_id, at_ms));
            }
            clankie_bus::AudienceFact::AdmittedChannels(channels) => self.heard.send_modify(|h| h.admitted_channels = Some(channels)),
        }
    }

    /// What has been heard so far.
    pub(crate) fn heard(&self) -> Heard {
        self.heard.borrow().clone()
    }
}

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
    pub(crate) async fn run_audience(&self) -> Result<(), crate::GatewayError> {
        let mut facts = std::pin::pin!(self.inner.bus.audience_facts());
        while let Some(fact) = futures::StreamExt::next(&mut facts).await {
            self.inner.places.hear(fact);
        }
        Ok(())
    }

    /// The owner's admitted channels once heard; past [`GATHER_PATIENCE`] unheard, `None` (no
    /// link is followed on a list nobody has told this gateway).
    async fn admitted_channels(&self) -> Option<Vec<u64>> {
        let mut heard = self.inner.places.heard.subscribe();
        let known = tokio::time::timeout(GATHER_PATIENCE, heard.wait_for(|h| h.admitted_channels.is_some())).await;
        known.ok()?.ok()?.admitted_channels.clone()
    }

    /// Applies the audience rule to what `ingress` carries of other people's words before it is
    /// published: a forgotten person's old words become the marker. How many it replaced.
    pub(crate) fn rule_carried(&self, ingress: &mut v1::Ingress) -> usize {
        let heard = self.inner.places.heard();
        audience::rule_ingress(ingress, &heard.forgotten, &[]).forgotten
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
        let depth = self.inner.config.reply_chain_depth;
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
            let _slot = self.inner.budget.pace().await;
            match self.inner.http.get().join_thread(message.channel_id).await {
                Ok(_) => self.inner.places.update(channel, |f| f.joined = true),
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
                    self.inner.places.update(channel, |f| f.starter = Some(s.clone()));
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
        if let Some(f) = self.inner.places.channel(id) {
            return Some(f);
        }
        let channel_id = Id::new_checked(id)?;
        let _slot = self.inner.budget.pace().await;
        let channel = self.inner.http.get().channel(channel_id).await.ok()?.model().await.ok()?;
        let facts = ChannelFacts::of(&channel);
        self.inner.places.keep(id, facts.clone());
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
        if let Some(found) = known(&self.inner.places)
            && found.len() == wanted.len()
        {
            return found;
        }
        let Some(guild_id) = Id::new_checked(guild) else { return HashMap::new() };
        let _slot = self.inner.budget.pace().await;
        if let Ok(response) = self.inner.http.get().roles(guild_id).await
            && let Ok(roles) = response.models().await
        {
            self.inner.places.keep_guild(guild, |g| g.roles = roles);
        }
        known(&self.inner.places).unwrap_or_default()
    }

    /// A guild's owner and roles: kept ones, else the guild fetched (and kept).
    async fn guild_rules(&self, guild: u64) -> Option<GuildRules> {
        if let Some(g) = self.inner.places.guild(guild).filter(|g| g.owner.is_some() && !g.roles.is_empty()) {
            return Some(g);
        }
        let guild_id = Id::new_checked(guild)?;
        let _slot = self.inner.budget.pace().await;
        let fetched = self.inner.http.get().guild(guild_id).await.ok()?.model().await.ok()?;
        self.inner.places.keep_guild(guild, |g| {
            g.owner = Some(fetched.owner_id.get());
            g.roles = fetched.roles;
        });
        self.inner.places.guild(guild)
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
        let permissions = crate::doctor::channel_permissions(guild, owner, message.author.id, &member.roles, &rules.roles, &overwrites);
        permissions.contains(Permissions::VIEW_CHANNEL | Permissions::READ_MESSAGE_HISTORY)
    }

    /// One message, fetched; `None` when it is gone or hidden from him.
    async fn fetch_message(&self, channel: u64, id: u64) -> Option<Message> {
        let (channel, id) = (Id::new_checked(channel)?, Id::new_checked(id)?);
        let _slot = self.inner.budget.pace().await;
        self.inner.http.get().message(channel, id).await.ok()?.model().await.ok()
    }

    /// A thread changed: its facts are kept as the update says (the name, the archived flag,
    /// the tags). Whether it was archived by this update.
    pub(crate) fn thread_updated(&self, thread: &twilight_model::channel::Channel) -> bool {
        let id = thread.id.get();
        let was_archived = self.inner.places.channel(id).map(|f| f.archived);
        let mut facts = ChannelFacts::of(thread);
        if let Some(old) = self.inner.places.channel(id) {
            facts.starter = old.starter;
            facts.joined = old.joined || facts.joined;
        }
        let archived = facts.archived;
        self.inner.places.keep(id, facts);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_started_by(author: u64) -> ChannelFacts {
        let starter = v1::Quoted { author_id: author, text: format!("words of {author}"), ..Default::default() };
        ChannelFacts { starter: Some(Some(starter)), ..Default::default() }
    }

    #[test]
    fn erase_a_forgotten_persons_thread_starters_leave_the_cache_and_others_stay() {
        let places = Places::default();
        places.keep(1, thread_started_by(42));
        places.keep(2, thread_started_by(7));
        places.forget_starters_of(42);
        assert!(places.channel(1).is_some_and(|f| f.starter.is_none()), "bob's starter is still cached");
        assert!(places.channel(2).is_some_and(|f| matches!(f.starter, Some(Some(ref q)) if q.author_id == 7)), "ada's starter went too");
    }
}
