//! What happens to threads: the State's side of [`threads`](crate::state::threads) (starting,
//! archiving, deleting, joining) and the gateway events each change sends the bot, gated as
//! Discord gates them.

use serde_json::{Value, json};

use crate::state::config::ChannelKind;
use crate::state::messages::now_ms;
use crate::state::permission;
use crate::state::shapes::{self, thread_member_json};
use crate::state::threads::{ANNOUNCEMENT_THREAD, NewThread, PRIVATE_THREAD, PUBLIC_THREAD, Thread, ThreadError};
use crate::state::{NewMessage, State, Upload};

impl State {
    /// A thread as it stands.
    pub fn thread(&self, id: u64) -> Option<Thread> {
        self.threads.lock().get(&id).cloned()
    }

    /// Every live thread, oldest first.
    pub fn all_threads(&self) -> Vec<Thread> {
        self.threads.lock().values().cloned().collect()
    }

    /// Whether the bot sees a thread now: its parent viewable, and a private one only as a member
    /// or with MANAGE_THREADS there.
    pub(crate) fn bot_sees_thread(&self, t: &Thread) -> bool {
        let Some(perms) = self.bot_permissions(t.parent) else { return false };
        perms & permission::VIEW_CHANNEL != 0
            && (t.kind != PRIVATE_THREAD || t.joined(self.config.bot_user_id).is_some() || perms & permission::MANAGE_THREADS != 0)
    }

    /// The thread as the bot is shown it.
    pub(crate) fn thread_json(&self, t: &Thread) -> Value {
        shapes::thread_json(t, self.config.bot_user_id)
    }

    /// Dispatches a thread event if the bot sees the thread (Discord tells nobody of a thread
    /// they cannot view).
    fn dispatch_thread(&self, t: &Thread, event: &str, d: Value) {
        if self.bot_sees_thread(t) {
            self.dispatch(event, d);
        }
    }

    /// Starts a thread: from a message its id is the message's (PUBLIC_THREAD, or
    /// ANNOUNCEMENT_THREAD under an announcement channel); without one a new id (PUBLIC_THREAD,
    /// or PRIVATE_THREAD when `private`). THREAD_CREATE (`newly_created`) reaches the bot if he
    /// sees it; a thread he starts has him as a member, told by THREAD_MEMBERS_UPDATE too.
    pub(crate) fn start_thread(&self, new: NewThread<'_>) -> Result<u64, ThreadError> {
        let spec = self.config.channels.iter().find(|c| c.id == new.parent);
        let Some(spec) = spec else {
            let known = self.guild_of(new.parent).is_ok();
            return Err(if known { ThreadError::NoThreadsHere(new.parent) } else { ThreadError::UnknownChannel(new.parent) });
        };
        if spec.voice || spec.is_forum() {
            return Err(ThreadError::NoThreadsHere(new.parent));
        }
        let announcement = spec.kind == ChannelKind::Announcement;
        if announcement && new.private && new.from_message.is_none() {
            return Err(ThreadError::NoPrivateThreads);
        }
        if let Some(m) = new.from_message {
            if self.message(m).is_none_or(|m| m.channel_id != new.parent || m.spoken || m.ephemeral) {
                return Err(ThreadError::UnknownMessage(m));
            }
            if self.thread(m).is_some() {
                return Err(ThreadError::AlreadyStarted(m));
            }
        }
        let kind = match (announcement, new.from_message, new.private) {
            (true, _, _) => ANNOUNCEMENT_THREAD,
            (false, None, true) => PRIVATE_THREAD,
            _ => PUBLIC_THREAD,
        };
        let id = new.from_message.unwrap_or_else(|| self.fresh_id());
        let guild = spec.guild.unwrap_or(self.config.guild_id);
        self.create_thread(id, new.parent, guild, kind, new.name, new.owner, None)
    }

    /// Makes the thread, dispatches its THREAD_CREATE and, when the bot started it, his joining.
    #[allow(clippy::too_many_arguments)]
    fn create_thread(
        &self,
        id: u64,
        parent: u64,
        guild: u64,
        kind: u8,
        name: &str,
        owner: u64,
        applied_tags: Option<Vec<u64>>,
    ) -> Result<u64, ThreadError> {
        let now = now_ms();
        let thread = Thread {
            id,
            parent,
            guild,
            kind,
            name: name.to_owned(),
            owner,
            archived: false,
            locked: false,
            archive_ms: now,
            created_ms: now,
            applied_tags,
            members: vec![(owner, now)],
            message_count: 0,
            last_message_id: None,
        };
        {
            let mut threads = self.threads.lock();
            if threads.contains_key(&id) {
                return Err(ThreadError::AlreadyStarted(id));
            }
            threads.insert(id, thread.clone());
        }
        let mut d = self.thread_json(&thread);
        d["newly_created"] = json!(true);
        self.dispatch_thread(&thread, "THREAD_CREATE", d);
        if owner == self.config.bot_user_id {
            self.dispatch_thread(&thread, "THREAD_MEMBERS_UPDATE", self.members_update_json(&thread, now));
        }
        Ok(id)
    }

    /// A forum post: a PUBLIC_THREAD titled `title` with the named tags (unknown names left out),
    /// and its first message, whose id is the thread's, by `author` (`None`: the bot, with
    /// `files` uploaded). THREAD_CREATE, then MESSAGE_CREATE into the thread.
    pub(crate) fn forum_post(
        &self,
        forum: u64,
        author: Option<&str>,
        title: &str,
        tags: &[&str],
        first: NewMessage,
        files: Vec<Upload>,
    ) -> Result<(u64, u64), ThreadError> {
        let Some(spec) = self.config.channels.iter().find(|c| c.id == forum) else {
            return Err(ThreadError::UnknownChannel(forum));
        };
        if !spec.is_forum() {
            return Err(ThreadError::NotAForum(forum));
        }
        let applied: Vec<u64> = tags.iter().filter_map(|t| spec.tag_id(t)).collect();
        let guild = spec.guild.unwrap_or(self.config.guild_id);
        let owner = author.map_or(self.config.bot_user_id, State::user_id);
        let id = self.fresh_id();
        self.create_thread(id, forum, guild, PUBLIC_THREAD, title, owner, Some(applied))?;
        match author {
            Some(author) => {
                self.user_message_with_id(NewMessage { channel_id: id, author: author.to_owned(), ..first }, Some(id));
            }
            None => self.bot_post_with_id(id, first.content, first.embeds, files),
        }
        Ok((id, id))
    }

    /// THREAD_MEMBERS_UPDATE for the bot joining a thread at `at`.
    fn members_update_json(&self, t: &Thread, at: i64) -> Value {
        let bot = self.config.bot_user_id;
        let mut added = thread_member_json(t.id, bot, at);
        added["member"] = self.bot_member_json(t.guild);
        json!({
            "id": t.id.to_string(), "guild_id": t.guild.to_string(), "member_count": t.members.len().min(50),
            "added_members": [added],
        })
    }

    /// The bot joins a thread (his own post there, a mention in a private one, the join route):
    /// THREAD_MEMBERS_UPDATE with him added, then THREAD_CREATE with his thread member, as
    /// Discord tells anyone added to a thread. False when he already was a member or there is no
    /// such thread.
    pub(crate) fn bot_joins_thread(&self, thread: u64) -> bool {
        let bot = self.config.bot_user_id;
        let now = now_ms();
        let joined = {
            let mut threads = self.threads.lock();
            threads.get_mut(&thread).and_then(|t| t.join(bot, now).then(|| t.clone()))
        };
        let Some(t) = joined else { return false };
        self.dispatch_thread(&t, "THREAD_MEMBERS_UPDATE", self.members_update_json(&t, now));
        self.dispatch_thread(&t, "THREAD_CREATE", self.thread_json(&t));
        true
    }

    /// Changes a thread as `change` says (true when it changed something), then dispatches
    /// THREAD_UPDATE with the whole thread if it did. False for an unknown thread.
    fn update_thread(&self, thread: u64, change: impl FnOnce(&mut Thread) -> bool) -> bool {
        let changed = {
            let mut threads = self.threads.lock();
            let Some(t) = threads.get_mut(&thread) else { return false };
            change(t).then(|| t.clone())
        };
        if let Some(t) = changed {
            self.dispatch_thread(&t, "THREAD_UPDATE", self.thread_json(&t));
        }
        true
    }

    /// Archives or unarchives a thread: THREAD_UPDATE with its new metadata when it changed.
    /// False for an unknown thread.
    pub fn set_archived(&self, thread: u64, archived: bool) -> bool {
        self.update_thread(thread, |t| {
            let changed = t.archived != archived;
            if changed {
                t.archived = archived;
                t.archive_ms = now_ms();
            }
            changed
        })
    }

    /// Renames a thread, as a moderator or its owner does: THREAD_UPDATE with the whole thread
    /// when the name changed. False for an unknown thread or a name not 1 to 100 characters.
    pub fn rename_thread(&self, thread: u64, name: &str) -> bool {
        if !(1..=100).contains(&name.chars().count()) {
            return false;
        }
        self.update_thread(thread, |t| {
            let changed = t.name != name;
            name.clone_into(&mut t.name);
            changed
        })
    }

    /// Sets a forum post's `applied_tags` to the named tags of its forum, in that order:
    /// THREAD_UPDATE with the whole thread when they changed. False for an unknown thread, one
    /// that is not a forum post, or a name its forum has no tag of.
    pub fn set_post_tags(&self, thread: u64, tags: &[&str]) -> bool {
        let Some(parent) = self.thread(thread).map(|t| t.parent) else { return false };
        let Some(forum) = self.config.channels.iter().find(|c| c.id == parent && c.is_forum()) else { return false };
        let Some(mut ids) = tags.iter().map(|t| forum.tag_id(t)).collect::<Option<Vec<u64>>>() else { return false };
        let mut seen = std::collections::HashSet::new();
        ids.retain(|id| seen.insert(*id));
        self.update_thread(thread, |t| {
            let changed = t.applied_tags.as_ref() != Some(&ids);
            t.applied_tags = Some(ids);
            changed
        })
    }

    /// Deletes a thread: THREAD_DELETE `{id, guild_id, parent_id, type}`; its routes answer
    /// 10003 after. False for an unknown thread.
    pub fn delete_thread(&self, thread: u64) -> bool {
        let Some(t) = self.thread(thread) else { return false };
        let seen = self.bot_sees_thread(&t);
        self.threads.lock().remove(&thread);
        if seen {
            self.dispatch(
                "THREAD_DELETE",
                json!({ "id": t.id.to_string(), "guild_id": t.guild.to_string(), "parent_id": t.parent.to_string(), "type": t.kind }),
            );
        }
        true
    }

    /// What a message into a thread does to it before the message is stored: an archived
    /// (unlocked) thread is unarchived first (THREAD_UPDATE), its author joins (the bot's
    /// joining dispatched), a private thread takes in the users it mentions and the bot when
    /// mentioned if he can view the parent, and it counts the message.
    pub(crate) fn thread_activity(&self, thread: u64, id: u64, author: u64, mentions_bot: bool, mentioned: &[u64]) {
        let bot = self.config.bot_user_id;
        let now = now_ms();
        let (unarchived, bot_joins) = {
            let mut threads = self.threads.lock();
            let Some(t) = threads.get_mut(&thread) else { return };
            let unarchived = (t.archived && !t.locked).then(|| {
                t.archived = false;
                t.archive_ms = now;
                t.clone()
            });
            if author != bot {
                t.join(author, now);
            }
            if t.kind == PRIVATE_THREAD {
                for user in mentioned.iter().filter(|u| **u != bot) {
                    t.join(*user, now);
                }
            }
            t.message_count = t.message_count.saturating_add(1);
            t.last_message_id = Some(id);
            let wants_bot = author == bot || (t.kind == PRIVATE_THREAD && mentions_bot);
            (unarchived, (wants_bot && t.joined(bot).is_none()).then_some(t.parent))
        };
        if let Some(t) = unarchived {
            self.dispatch_thread(&t, "THREAD_UPDATE", self.thread_json(&t));
        }
        if let Some(parent) = bot_joins
            && (author == bot || self.bot_permissions(parent).is_some_and(|p| p & permission::VIEW_CHANNEL != 0))
        {
            self.bot_joins_thread(thread);
        }
    }

    /// The active threads of a guild the bot sees, as GUILD_CREATE lists them.
    pub(crate) fn guild_threads_json(&self, guild: u64) -> Vec<Value> {
        self.all_threads()
            .iter()
            .filter(|t| t.guild == guild && !t.archived && self.bot_sees_thread(t))
            .map(|t| self.thread_json(t))
            .collect()
    }

    /// THREAD_LIST_SYNC for a channel the bot just gained access to, when it has active threads
    /// he now sees, as Discord syncs them.
    pub(crate) fn sync_threads_of(&self, channel: u64, guild: u64) {
        let bot = self.config.bot_user_id;
        let threads: Vec<Thread> =
            self.all_threads().into_iter().filter(|t| t.parent == channel && !t.archived && self.bot_sees_thread(t)).collect();
        if threads.is_empty() {
            return;
        }
        let members: Vec<Value> = threads.iter().filter_map(|t| t.joined(bot).map(|at| thread_member_json(t.id, bot, at))).collect();
        self.dispatch(
            "THREAD_LIST_SYNC",
            json!({
                "guild_id": guild.to_string(), "channel_ids": [channel.to_string()],
                "threads": threads.iter().map(|t| self.thread_json(t)).collect::<Vec<_>>(), "members": members,
            }),
        );
    }
}
