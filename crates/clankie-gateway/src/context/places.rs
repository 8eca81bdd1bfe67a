//! What the gateway has learned of the places messages are written in: channel facts, guild
//! roles and the audience facts heard, each kept until an event says it changed. Channel facts
//! are bounded: past the bound the least recently used go (a thread seen once in a busy
//! server does not stay for good). Data only, so the replica's state can hold it without
//! importing the gathering that fills it.

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
    /// Role ids mentioned that the guild's roles, fetched, did not hold: not fetched for again
    /// until a role event.
    pub unknown_roles: std::collections::HashSet<u64>,
    /// A roles fetch is under way.
    pub learning: bool,
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
    channels: Mutex<Kept>,
    guilds: Mutex<HashMap<u64, GuildRules>>,
    heard: tokio::sync::watch::Sender<Heard>,
}

/// Channel facts by id, with when each was last used, bounded by count.
#[derive(Debug, Default)]
struct Kept {
    facts: HashMap<u64, (ChannelFacts, u64)>,
    /// Ids by last use; the smallest goes first.
    by_use: std::collections::BTreeMap<u64, u64>,
    clock: u64,
    bound: usize,
}

impl Kept {
    fn touch(&mut self, id: u64) {
        self.clock += 1;
        let now = self.clock;
        if let Some((_, used)) = self.facts.get_mut(&id) {
            self.by_use.remove(used);
            *used = now;
            self.by_use.insert(now, id);
        }
    }

    fn insert(&mut self, id: u64, facts: ChannelFacts) {
        self.clock += 1;
        let now = self.clock;
        if let Some((_, used)) = self.facts.insert(id, (facts, now)) {
            self.by_use.remove(&used);
        }
        self.by_use.insert(now, id);
        while self.facts.len() > self.bound.max(1) {
            let Some((_, oldest)) = self.by_use.pop_first() else { break };
            self.facts.remove(&oldest);
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some((_, used)) = self.facts.remove(&id) {
            self.by_use.remove(&used);
        }
    }
}

impl Places {
    /// Places keeping the facts of at most `bound` channels and threads.
    pub(crate) fn new(bound: usize) -> Places {
        Places {
            channels: Mutex::new(Kept { bound, ..Kept::default() }),
            guilds: Mutex::default(),
            heard: tokio::sync::watch::channel(Heard::default()).0,
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many channels' facts are kept now.
    #[cfg(test)]
    pub(crate) fn channels_kept(&self) -> usize {
        self.kept().facts.len()
    }

    /// A channel's kept facts, if any: gathering fetches what is missing.
    pub(crate) fn channel(&self, id: u64) -> Option<ChannelFacts> {
        let mut kept = self.kept();
        kept.touch(id);
        kept.facts.get(&id).map(|(f, _)| f.clone())
    }

    /// Keeps a channel's facts as fetched, until an event says they changed.
    pub(crate) fn keep(&self, id: u64, facts: ChannelFacts) {
        self.kept().insert(id, facts);
    }

    /// Keeps a channel's facts as an event tells them, with what was learned of it before (a
    /// thread's starter, his membership). Whether it is archived now.
    pub(crate) fn refresh(&self, mut facts: ChannelFacts, id: u64) -> bool {
        let mut kept = self.kept();
        if let Some((old, _)) = kept.facts.get(&id) {
            facts.starter = old.starter.clone();
            facts.joined |= old.joined;
            facts.guild_id = facts.guild_id.or(old.guild_id);
        }
        let archived = facts.archived;
        kept.insert(id, facts);
        archived
    }

    /// Changes a kept channel's facts in place (joined, its starter); an unkept one stays unkept.
    pub(crate) fn update(&self, id: u64, change: impl FnOnce(&mut ChannelFacts)) {
        if let Some((f, _)) = self.kept().facts.get_mut(&id) {
            change(f);
        }
    }

    /// Whether a join of a kept `thread` is still to be asked for; asking marks it joined, so a
    /// burst of mentions asks once (a refused join unmarks it).
    pub(crate) fn mark_joining(&self, thread: u64) -> bool {
        let mut asked = false;
        self.update(thread, |f| asked = !std::mem::replace(&mut f.joined, true));
        asked
    }

    /// A message was edited: a thread started from it (the thread has its id) quotes the new
    /// words from now on.
    pub(crate) fn starter_edited(&self, message: u64, words: v1::Quoted) {
        self.update(message, |f| {
            if matches!(f.starter, Some(Some(_))) {
                f.starter = Some(Some(words));
            }
        });
    }

    /// A message was deleted: a thread started from it quotes no starter from now on.
    pub(crate) fn starter_deleted(&self, message: u64) {
        self.update(message, |f| f.starter = Some(None));
    }

    /// `author` asked to be forgotten: every thread starter of theirs kept here is dropped, so
    /// no later message carries their words from this cache.
    pub(crate) fn forget_starters_of(&self, author: u64) {
        for (facts, _) in self.kept().facts.values_mut() {
            if matches!(&facts.starter, Some(Some(q)) if q.author_id == author) {
                facts.starter = None;
            }
        }
    }

    /// A channel or thread changed or went: its facts are fetched again when next needed.
    pub(crate) fn forget_channel(&self, id: u64) {
        self.kept().remove(id);
    }

    /// A guild's roles or owner changed: they are fetched again when next needed.
    pub(crate) fn forget_guild(&self, id: u64) {
        self.guilds.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }

    /// The names of the `wanted` roles of a guild that are kept, and the ids neither kept nor
    /// known to be unknown (those a fetch of the guild's roles may still name).
    pub(crate) fn role_names(&self, guild: u64, wanted: &[u64]) -> (HashMap<u64, String>, Vec<u64>) {
        let guilds = self.guilds.lock().unwrap_or_else(|p| p.into_inner());
        let Some(g) = guilds.get(&guild) else { return (HashMap::new(), wanted.to_vec()) };
        let found: HashMap<u64, String> = g
            .roles
            .iter()
            .filter(|r| wanted.contains(&r.id.get()))
            .map(|r| (r.id.get(), crate::normalise::display_bounded(&r.name)))
            .collect();
        let unknown = wanted.iter().filter(|id| !found.contains_key(id) && !g.unknown_roles.contains(id)).copied().collect();
        (found, unknown)
    }

    /// The guild's roles were fetched and these ids are still not among them: kept as unknown
    /// until a role event.
    pub(crate) fn roles_unknown(&self, guild: u64, ids: &[u64]) {
        self.keep_guild(guild, |g| {
            let held: Vec<u64> = g.roles.iter().map(|r| r.id.get()).collect();
            g.unknown_roles.extend(ids.iter().filter(|id| !held.contains(id)));
        });
    }

    /// Whether a roles fetch for `guild` may start now (none under way); starting marks it.
    pub(crate) fn mark_learning_roles(&self, guild: u64) -> bool {
        let mut guilds = self.guilds.lock().unwrap_or_else(|p| p.into_inner());
        !std::mem::replace(&mut guilds.entry(guild).or_default().learning, true)
    }

    /// A roles fetch for `guild` ended.
    pub(crate) fn learned_roles(&self, guild: u64) {
        self.keep_guild(guild, |g| g.learning = false);
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
    fn ingest_the_thread_map_stays_under_its_bound_with_10000_threads_seen() {
        let places = Places::new(4_096);
        places.keep(1, ChannelFacts { name: "general".into(), ..Default::default() });
        for thread in 10_000..20_000 {
            places.refresh(ChannelFacts { name: format!("thread {thread}"), ..Default::default() }, thread);
            // The room people talk in stays in use, so it is never the one let go.
            assert!(places.channel(1).is_some(), "the busy channel was let go at thread {thread}");
            assert!(places.channels_kept() <= 4_096, "{} kept at thread {thread}", places.channels_kept());
        }
        assert_eq!(places.channels_kept(), 4_096);
        assert!(places.channel(10_000).is_none(), "the least recently used thread is still kept");
        assert!(places.channel(19_999).is_some_and(|f| f.name == "thread 19999"), "the newest thread was let go");
    }

    #[test]
    fn ingest_an_unknown_role_is_remembered_as_unknown_until_a_role_event() {
        let places = Places::new(16);
        places.keep_guild(7, |g| g.roles = vec![]);
        assert_eq!(places.role_names(7, &[1]).1, vec![1], "an unfetched role is not yet known to be unknown");
        places.roles_unknown(7, &[1]);
        assert!(places.role_names(7, &[1]).1.is_empty(), "a fetched and missing role is asked for again");
        places.forget_guild(7);
        assert_eq!(places.role_names(7, &[1]).1, vec![1], "a role event leaves the unknown id unknown for good");
    }

    #[test]
    fn erase_a_forgotten_persons_thread_starters_leave_the_cache_and_others_stay() {
        let places = Places::new(16);
        places.keep(1, thread_started_by(42));
        places.keep(2, thread_started_by(7));
        places.forget_starters_of(42);
        assert!(places.channel(1).is_some_and(|f| f.starter.is_none()), "bob's starter is still cached");
        assert!(places.channel(2).is_some_and(|f| matches!(f.starter, Some(Some(ref q)) if q.author_id == 7)), "ada's starter went too");
    }
}
