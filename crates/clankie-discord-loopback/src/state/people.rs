//! The people of the loopback's guilds as Discord knows them: users by id and name (known once
//! they post or are given a nickname or roles), and each guild's members with their nickname,
//! roles and when they joined, which a message carries as its author's and each mentioned
//! user's partial member.

use std::collections::HashMap;

use serde_json::Value;

use crate::state::State;
use crate::state::messages::{MentionedUser, now_ms, parse_mentions};
use crate::state::shapes::{self, partial_member_json, user_json};

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

impl State {
    /// Resolves `<@id>`, `<@!id>` and `<@&id>` in `content` against the users the loopback knows
    /// and the roles of `guild` (none in a DM).
    pub(crate) fn resolve_mentions(&self, people: &People, guild: Option<u64>, content: &str) -> Resolved {
        let (users, roles) = parse_mentions(content);
        let bot = self.config.bot_user_id;
        let roles = match guild {
            Some(g) => {
                let grants = self.grants.lock();
                roles
                    .into_iter()
                    .filter(|r| *r != g && grants.roles.iter().any(|role| role.id == *r && self.config.guild_of_role(role) == g))
                    .collect()
            }
            None => Vec::new(),
        };
        Resolved {
            bot: users.contains(&bot),
            users: users
                .iter()
                .filter(|u| **u != bot)
                .filter_map(|u| people.name(*u).map(|name| MentionedUser { id: *u, name: name.to_owned() }))
                .collect(),
            roles,
        }
    }

    /// A user's partial member in `guild` as a gateway message carries it: the bot's with his
    /// roles, a known member's with their nickname and roles.
    pub(crate) fn partial_member(&self, people: &People, guild: u64, user: u64) -> Option<Value> {
        if user == self.config.bot_user_id {
            return Some(partial_member_json(None, &self.bot_roles(guild), self.started_ms));
        }
        people.member(guild, user).map(|m| partial_member_json(m.nick.as_deref(), &m.roles, m.joined_ms))
    }

    /// Sets (or clears) a member's nickname in `guild`; the user becomes known.
    pub fn set_nick(&self, guild: u64, author: &str, nick: Option<&str>) {
        let mut inner = self.lock();
        if let Some(m) = inner.people.know(Some(guild), State::user_id(author), author) {
            m.nick = nick.map(str::to_owned);
        }
    }

    /// Sets a member's roles in `guild` (@everyone never listed); the user becomes known.
    pub fn set_member_roles(&self, guild: u64, author: &str, roles: &[u64]) {
        let mut inner = self.lock();
        if let Some(m) = inner.people.know(Some(guild), State::user_id(author), author) {
            m.roles = roles.iter().copied().filter(|r| *r != guild).collect();
        }
    }

    /// A known member as `GET /guilds/{id}/members/{user}` answers it.
    pub fn known_member_json(&self, guild: u64, user: u64) -> Option<Value> {
        let inner = self.lock();
        let name = inner.people.name(user)?;
        let member = inner.people.member(guild, user)?;
        let mut v = shapes::member_json(user_json(user, name, false), &member.roles, member.joined_ms);
        v["nick"] = serde_json::json!(member.nick);
        Some(v)
    }
}
