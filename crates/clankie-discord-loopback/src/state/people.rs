//! The people of the loopback's guilds as Discord knows them: users by id and name (known once
//! they post or are given a nickname or roles), and each guild's members with their nickname,
//! roles and when they joined, which a message carries as its author's and each mentioned
//! user's partial member.

use std::collections::HashMap;

use crate::state::messages::{MentionedUser, now_ms};

/// A member of a guild other than the bot.
#[derive(Debug, Clone)]
pub(crate) struct GuildMember {
    pub nick: Option<String>,
    pub roles: Vec<u64>,
    pub joined_ms: i64,
}

/// Known users and guild members.
#[derive(Default)]
pub(crate) struct People {
    users: HashMap<u64, String>,
    members: HashMap<(u64, u64), GuildMember>,
}

impl People {
    /// Knows a user by name, and as a member of `guild` from now if not one yet.
    pub fn know(&mut self, guild: Option<u64>, id: u64, name: &str) -> Option<&mut GuildMember> {
        self.users.entry(id).or_insert_with(|| name.to_owned());
        let guild = guild?;
        Some(self.members.entry((guild, id)).or_insert_with(|| GuildMember { nick: None, roles: Vec::new(), joined_ms: now_ms() }))
    }

    /// A known user's name.
    pub fn name(&self, id: u64) -> Option<&str> {
        self.users.get(&id).map(String::as_str)
    }

    /// A member of a guild.
    pub fn member(&self, guild: u64, id: u64) -> Option<&GuildMember> {
        self.members.get(&(guild, id))
    }
}

/// What a message's content mentions, as Discord resolves it: whether the bot, the known users
/// (the bot aside) and the roles of the message's guild.
pub(crate) struct Resolved {
    pub bot: bool,
    pub users: Vec<MentionedUser>,
    pub roles: Vec<u64>,
}
