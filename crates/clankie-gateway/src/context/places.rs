//! What the gateway has learned of the places messages are written in: channel facts, guild
//! roles and the audience facts heard, each kept until an event says it changed. Data only, so
//! the replica's state can hold it without importing the gathering that fills it.

use std::collections::HashMap;
use std::sync::Mutex;

use clankie_proto::audience::Forgotten;
use clankie_proto::v1;
use twilight_model::channel::ChannelType;
use twilight_model::channel::permission_overwrite::PermissionOverwrite;
use twilight_model::guild::Role;

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
    /// A channel's facts as Discord sent them; what is learned later (its starter) starts empty.
    pub(crate) fn of(channel: &twilight_model::channel::Channel) -> ChannelFacts {
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
pub(crate) struct GuildRules {
    pub owner: Option<u64>,
    pub roles: Vec<Role>,
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
    /// A channel's kept facts, if any: gathering fetches what is missing.
    pub(crate) fn channel(&self, id: u64) -> Option<ChannelFacts> {
        self.channels.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
    }

    /// Keeps a channel's facts as fetched or as an update says, until an event says they changed.
    pub(crate) fn keep(&self, id: u64, facts: ChannelFacts) {
        self.channels.lock().unwrap_or_else(|p| p.into_inner()).insert(id, facts);
    }

    /// Changes a kept channel's facts in place (joined, its starter); an unkept one stays unkept.
    pub(crate) fn update(&self, id: u64, change: impl FnOnce(&mut ChannelFacts)) {
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

    /// A guild's kept owner and roles, if any: a link's permission check fetches what is missing.
    pub(crate) fn guild(&self, id: u64) -> Option<GuildRules> {
        self.guilds.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
    }

    /// Keeps what was fetched of a guild, until a role or guild event says it changed.
    pub(crate) fn keep_guild(&self, id: u64, change: impl FnOnce(&mut GuildRules)) {
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

    /// Applies the audience rule to what `ingress` carries of other people's words, under the
    /// heard facts as they stand (no copy of the forgotten list per message): a forgotten
    /// person's old words become the marker. How many it replaced.
    pub(crate) fn rule_carried(&self, ingress: &mut v1::Ingress) -> usize {
        clankie_proto::audience::rule_ingress(ingress, &self.heard.borrow().forgotten, &[]).forgotten
    }

    /// Watches what is heard: a link waits for the owner's admitted channels to come in.
    pub(crate) fn heard_changes(&self) -> tokio::sync::watch::Receiver<Heard> {
        self.heard.subscribe()
    }
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
