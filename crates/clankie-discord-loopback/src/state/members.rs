//! The State's side of [`people`](crate::state::people): mentions resolved against the users
//! and roles it knows, and a member as a message carries them.

use serde_json::Value;

use crate::state::State;
use crate::state::messages::{MentionedUser, parse_mentions};
use crate::state::people::{People, Resolved};
use crate::state::shapes::{self, partial_member_json, user_json};

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
