//! The guilds as the bot stands in them: whether it is a member, what it may do in each channel
//! (Discord's computation over the roles and overwrites as they stand now), what Discord refuses
//! it, and the guild, channel, role and member objects Discord answers with.

use serde_json::{Value, json};

use crate::state::State;
use crate::state::config::{ChannelSpec, OverwriteSpec, shard_of};
use crate::state::permission;
use crate::state::permissions::{Grants, base_permissions, channel_permissions};
use crate::state::shapes::{self, user_json};

/// Why Discord refuses the bot a channel route, with Discord's status and JSON code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// 404, 10003: no such channel.
    #[error("Unknown Channel")]
    UnknownChannel,
    /// 403, 50001: the bot is not in the channel's guild, or cannot view the channel.
    #[error("Missing Access")]
    MissingAccess,
    /// 403, 50013: it can view the channel but lacks what the action needs.
    #[error("Missing Permissions")]
    MissingPermissions,
    /// 403, 50007: the DM's recipient closed their DMs.
    #[error("Cannot send messages to this user")]
    DmsClosed,
    /// 403, 50003: an action Discord allows only in guild channels.
    #[error("Cannot execute action on a DM channel")]
    InDm,
    /// 403, 160002: a reply where the bot may not read the message history.
    #[error("Cannot reply without permission to read message history")]
    ReplyWithoutHistory,
}

impl Refusal {
    /// Discord's JSON error code.
    pub fn code(self) -> u64 {
        match self {
            Refusal::UnknownChannel => 10003,
            Refusal::MissingAccess => 50001,
            Refusal::MissingPermissions => 50013,
            Refusal::DmsClosed => 50007,
            Refusal::InDm => 50003,
            Refusal::ReplyWithoutHistory => 160002,
        }
    }

    /// The HTTP status Discord answers with.
    pub fn status(self) -> u16 {
        match self {
            Refusal::UnknownChannel => 404,
            _ => 403,
        }
    }
}

/// Why an overwrite could not be set through the control API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OverwriteError {
    #[error("unknown channel {0}")]
    UnknownChannel(u64),
    #[error("channel {0} is a DM: it has no permission overwrites")]
    NotAGuildChannel(u64),
}

/// A guild channel of the loopback, where it sits in its guild.
struct Placed<'a> {
    spec: &'a ChannelSpec,
    guild: u64,
    position: usize,
}

impl State {
    fn placed(&self, channel: u64) -> Option<Placed<'_>> {
        let spec = self.config.channels.iter().find(|c| c.id == channel)?;
        let guild = spec.guild.unwrap_or(self.config.guild_id);
        let position = self.guild_channels(guild).position(|c| c.id == channel).unwrap_or(0);
        Some(Placed { spec, guild, position })
    }

    fn guild_channels(&self, guild: u64) -> impl Iterator<Item = &ChannelSpec> {
        self.config.channels.iter().filter(move |c| c.guild.unwrap_or(self.config.guild_id) == guild)
    }

    /// Whether the guild exists in the loopback, the bot a member or not.
    pub fn guild_exists(&self, guild: u64) -> bool {
        self.config.guilds().contains(&guild)
    }

    /// Whether the bot is a member of the guild (it exists and the bot was invited).
    pub fn bot_in_guild(&self, guild: u64) -> bool {
        self.guild_exists(guild) && !self.config.absent_guilds.contains(&guild)
    }

    /// The guilds the bot is in, the main one first.
    pub fn bot_guilds(&self) -> Vec<u64> {
        self.config.guilds().into_iter().filter(|g| self.bot_in_guild(*g)).collect()
    }

    /// A guild's name: the main guild's is configured, the others' made from their id.
    pub fn guild_name(&self, guild: u64) -> String {
        if guild == self.config.guild_id { self.config.guild_name.clone() } else { format!("Guild {guild}") }
    }

    fn bot_roles_in(&self, grants: &Grants, guild: u64) -> Vec<u64> {
        grants
            .roles
            .iter()
            .filter(|r| self.config.guild_of_role(r) == guild && r.id != guild && grants.bot_roles.contains(&r.id))
            .map(|r| r.id)
            .collect()
    }

    fn base_in(&self, grants: &Grants, guild: u64) -> u64 {
        let owner = self.config.owner_id == self.config.bot_user_id;
        base_permissions(guild, owner, &grants.roles, &self.bot_roles_in(grants, guild))
    }

    /// The bot's guild-wide permissions, before any channel; `None` where it is not a member.
    pub fn bot_base_permissions(&self, guild: u64) -> Option<u64> {
        self.bot_in_guild(guild).then(|| self.base_in(&self.grants.lock(), guild))
    }

    fn permissions_in(&self, grants: &Grants, placed: &Placed<'_>) -> u64 {
        let base = self.base_in(grants, placed.guild);
        let overwrites = grants.overwrites.get(&placed.spec.id).map(Vec::as_slice).unwrap_or_default();
        let roles = self.bot_roles_in(grants, placed.guild);
        channel_permissions(base, placed.guild, self.config.bot_user_id, &roles, overwrites, placed.spec.voice)
    }

    /// The bot's permissions in a channel as Discord computes them now; a DM's are the DM's own;
    /// a thread's its parent's (none at all in a private thread he does not see). `None` for an
    /// unknown channel or one of a guild the bot is not in.
    pub fn bot_permissions(&self, channel: u64) -> Option<u64> {
        match self.placed(channel) {
            Some(p) if self.bot_in_guild(p.guild) => Some(self.permissions_in(&self.grants.lock(), &p)),
            Some(_) => None,
            None if self.config.dm_channels.contains(&channel) => Some(permission::IN_DM),
            None => {
                let thread = self.thread(channel)?;
                let perms = self.bot_permissions(thread.parent)?;
                Some(if self.bot_sees_thread(&thread) { perms } else { 0 })
            }
        }
    }

    /// The permission a post into `channel` needs: SEND_MESSAGES_IN_THREADS in a thread (where
    /// SEND_MESSAGES has no effect), SEND_MESSAGES elsewhere.
    pub fn send_permission(&self, channel: u64) -> u64 {
        if self.thread(channel).is_some() { permission::SEND_MESSAGES_IN_THREADS } else { permission::SEND_MESSAGES }
    }

    /// The bot's roles in a guild (@everyone aside).
    pub(crate) fn bot_roles(&self, guild: u64) -> Vec<u64> {
        self.bot_roles_in(&self.grants.lock(), guild)
    }

    /// A channel as `GET /channels/{id}` answers the bot: a guild channel with its overwrites
    /// (a forum with its tags), a thread with its metadata (and his thread member), a DM.
    pub fn channel_json_for_bot(&self, channel: u64) -> Result<Value, Refusal> {
        // Only viewing matters here, not a voice channel's Connect.
        self.guild_of(channel).map_err(|()| Refusal::UnknownChannel)?;
        let perms = self.bot_permissions(channel).ok_or(Refusal::MissingAccess)?;
        if perms & permission::VIEW_CHANNEL == 0 {
            return Err(Refusal::MissingAccess);
        }
        if let Some(placed) = self.placed(channel) {
            return Ok(self.channel_whole(&self.grants.lock(), &placed));
        }
        if let Some(thread) = self.thread(channel) {
            return Ok(self.thread_json(&thread));
        }
        let recipient = self.lock().dm_recipients.get(&channel).copied();
        let recipients: Vec<Value> = recipient.map(|r| user_json(r, "user", false)).into_iter().collect();
        Ok(json!({ "id": channel.to_string(), "type": 1, "last_message_id": null, "flags": 0, "recipients": recipients }))
    }

    /// Whether `channel` is a forum (which takes posts, not messages).
    pub fn is_forum(&self, channel: u64) -> bool {
        self.config.channels.iter().any(|c| c.id == channel && c.is_forum())
    }

    /// What every channel route checks first: the channel exists (10003), the bot is in its guild
    /// and can view it, and a voice channel's chat also needs CONNECT (50001). The bot's
    /// permissions there when it may go on.
    pub fn channel_access(&self, channel: u64) -> Result<u64, Refusal> {
        if self.guild_of(channel).is_err() {
            return Err(Refusal::UnknownChannel);
        }
        let perms = self.bot_permissions(channel).ok_or(Refusal::MissingAccess)?;
        let voice = self.placed(channel).is_some_and(|p| p.spec.voice);
        if perms & permission::VIEW_CHANNEL == 0 || (voice && perms & permission::CONNECT == 0) {
            return Err(Refusal::MissingAccess);
        }
        Ok(perms)
    }

    /// Whether a post into `channel` goes to a DM whose recipient closed their DMs.
    pub fn dm_closed(&self, channel: u64) -> bool {
        let recipient = self.lock().dm_recipients.get(&channel).copied();
        recipient.is_some_and(|r| self.config.closed_dms.contains(&r))
    }

    /// Sets (replaces) the bot's member overwrite on a guild channel; `allow` and `deny` both 0
    /// remove it. Dispatches CHANNEL_UPDATE as Discord does (obfuscated if the bot can no longer
    /// view it). Returns the bot's permissions there now (`None` in a guild it is not in).
    pub fn set_bot_overwrite(&self, channel: u64, allow: u64, deny: u64) -> Result<Option<u64>, OverwriteError> {
        let (placed, before, perms) = self.replace_overwrite(channel, self.config.bot_user_id, allow, deny)?;
        if !self.bot_in_guild(placed.guild) {
            return Ok(None);
        }
        if before & permission::VIEW_CHANNEL == 0 && perms & permission::VIEW_CHANNEL != 0 {
            self.sync_threads_of(channel, placed.guild);
        }
        Ok(Some(perms))
    }

    /// Sets (replaces) a user's member overwrite on a guild channel, as a moderator does; both 0
    /// remove it. The bot is shown the changed overwrites (CHANNEL_UPDATE) where he can view the
    /// channel. Returns the user's permissions there now.
    pub fn set_member_overwrite(&self, channel: u64, user: u64, allow: u64, deny: u64) -> Result<u64, OverwriteError> {
        if user == self.config.bot_user_id {
            return self.set_bot_overwrite(channel, allow, deny).map(|_| self.member_permissions(channel, user).unwrap_or(0));
        }
        let (placed, _, _) = self.replace_overwrite(channel, user, allow, deny)?;
        Ok(self.user_permissions_in(&placed, user))
    }

    /// Replaces `member`'s overwrite on a guild channel and dispatches CHANNEL_UPDATE where the
    /// bot is shown the channel; the channel, and the bot's permissions there before and after.
    fn replace_overwrite(&self, channel: u64, member: u64, allow: u64, deny: u64) -> Result<(Placed<'_>, u64, u64), OverwriteError> {
        let Some(placed) = self.placed(channel) else {
            return Err(if self.config.dm_channels.contains(&channel) {
                OverwriteError::NotAGuildChannel(channel)
            } else {
                OverwriteError::UnknownChannel(channel)
            });
        };
        let (before, perms, update) = {
            let mut grants = self.grants.lock();
            let before = self.permissions_in(&grants, &placed);
            let overwrites = grants.overwrites.entry(channel).or_default();
            overwrites.retain(|o| !(o.member && o.id == member));
            if allow != 0 || deny != 0 {
                overwrites.push(OverwriteSpec { id: member, member: true, allow, deny });
            }
            let perms = self.permissions_in(&grants, &placed);
            (before, perms, self.channel_object(&grants, &placed, perms))
        };
        // Another's overwrite changes nothing of a channel he is shown obfuscated.
        let shown = member == self.config.bot_user_id || perms & permission::VIEW_CHANNEL != 0;
        if self.bot_in_guild(placed.guild) && shown {
            self.dispatch("CHANNEL_UPDATE", update);
        }
        Ok((placed, before, perms))
    }

    /// A member's permissions in a channel as Discord computes them for an interaction there: the
    /// bot's as [`State::bot_permissions`]; another's from @everyone, their roles and the
    /// overwrites (the guild's owner has all); a thread's its parent's. `None` in a DM or an
    /// unknown channel.
    pub fn member_permissions(&self, channel: u64, user: u64) -> Option<u64> {
        if user == self.config.bot_user_id {
            return self.bot_permissions(channel);
        }
        match self.placed(channel) {
            Some(placed) => Some(self.user_permissions_in(&placed, user)),
            None => self.member_permissions(self.thread(channel)?.parent, user),
        }
    }

    fn user_permissions_in(&self, placed: &Placed<'_>, user: u64) -> u64 {
        // Taken before the grants: the people's lock is never taken while they are held.
        let roles = self.lock().people.member(placed.guild, user).map(|m| m.roles.clone()).unwrap_or_default();
        let grants = self.grants.lock();
        let roles: Vec<u64> = roles
            .into_iter()
            .filter(|id| grants.roles.iter().any(|r| r.id == *id && self.config.guild_of_role(r) == placed.guild))
            .collect();
        let base = base_permissions(placed.guild, user == self.config.owner_id, &grants.roles, &roles);
        let overwrites = grants.overwrites.get(&placed.spec.id).map(Vec::as_slice).unwrap_or_default();
        channel_permissions(base, placed.guild, user, &roles, overwrites, placed.spec.voice)
    }

    /// The application's Message Content switch as it stands.
    pub fn message_content_intent(&self) -> bool {
        self.grants.lock().message_content
    }

    /// Flips the application's Message Content switch, as the Developer Portal does.
    pub fn set_message_content_intent(&self, on: bool) {
        self.grants.lock().message_content = on;
    }

    /// Whether an event reaches the bot at all: none of a guild it is not in, and no message or
    /// typing event of a channel it cannot view.
    pub(crate) fn bot_sees(&self, t: &str, d: &Value) -> bool {
        let id = |v: &Value| v.as_str().and_then(|s| s.parse::<u64>().ok());
        if let Some(guild) = id(&d["guild_id"])
            && !self.bot_in_guild(guild)
        {
            return false;
        }
        let channel_scoped = matches!(t, "MESSAGE_CREATE" | "MESSAGE_UPDATE" | "MESSAGE_DELETE" | "MESSAGE_DELETE_BULK" | "TYPING_START");
        match id(&d["channel_id"]) {
            Some(channel) if channel_scoped => self.bot_permissions(channel).is_none_or(|p| p & permission::VIEW_CHANNEL != 0),
            _ => true,
        }
    }

    /// A channel as the bot is shown it: whole when it can view it, obfuscated else.
    fn channel_object(&self, grants: &Grants, placed: &Placed<'_>, perms: u64) -> Value {
        if perms & permission::VIEW_CHANNEL != 0 {
            self.channel_whole(grants, placed)
        } else {
            shapes::hidden_channel_json(placed.spec, placed.guild, placed.position)
        }
    }

    /// A guild channel as it stands: its overwrites and its name now.
    fn channel_whole(&self, grants: &Grants, placed: &Placed<'_>) -> Value {
        let overwrites = grants.overwrites.get(&placed.spec.id).map(Vec::as_slice).unwrap_or_default();
        let mut v = shapes::channel_json(placed.spec, placed.guild, placed.position, overwrites);
        if let Some(name) = grants.names.get(&placed.spec.id) {
            v["name"] = json!(name);
        }
        v
    }

    /// A guild channel's name as it stands (renamed or configured); `None` for any other channel.
    pub fn channel_name(&self, channel: u64) -> Option<String> {
        let placed = self.placed(channel)?;
        Some(self.grants.lock().names.get(&channel).cloned().unwrap_or_else(|| placed.spec.name.clone()))
    }

    /// Renames a guild channel (not a thread or DM), as a moderator does: CHANNEL_UPDATE with the
    /// channel as the bot is shown it when the name changed, in a guild he is in. False for any
    /// other channel or a name not 1 to 100 characters.
    pub fn rename_channel(&self, channel: u64, name: &str) -> bool {
        let Some(placed) = self.placed(channel) else { return false };
        if !(1..=100).contains(&name.chars().count()) {
            return false;
        }
        let update = {
            let mut grants = self.grants.lock();
            let before = grants.names.insert(channel, name.to_owned());
            let changed = before.as_deref().unwrap_or(placed.spec.name.as_str()) != name;
            changed.then(|| self.channel_object(&grants, &placed, self.permissions_in(&grants, &placed)))
        };
        // Nothing of a guild he is not in reaches him (`dispatch` sees to it).
        if let Some(update) = update {
            self.dispatch("CHANNEL_UPDATE", update);
        }
        true
    }

    fn placed_in(&self, guild: u64) -> Vec<Placed<'_>> {
        self.guild_channels(guild).enumerate().map(|(position, spec)| Placed { spec, guild, position }).collect()
    }

    /// `GET /guilds/{id}/channels`: the channels the bot can view (Discord omits the others).
    pub fn guild_channels_json(&self, guild: u64) -> Vec<Value> {
        let grants = self.grants.lock();
        self.placed_in(guild)
            .iter()
            .filter_map(|p| {
                let perms = self.permissions_in(&grants, p);
                (perms & permission::VIEW_CHANNEL != 0).then(|| self.channel_object(&grants, p, perms))
            })
            .collect()
    }

    /// A guild's roles, @everyone first (position 0).
    pub fn roles_json(&self, guild: u64) -> Vec<Value> {
        let grants = self.grants.lock();
        self.roles_of(&grants, guild)
    }

    fn roles_of(&self, grants: &Grants, guild: u64) -> Vec<Value> {
        let mut roles: Vec<_> = grants.roles.iter().filter(|r| self.config.guild_of_role(r) == guild).collect();
        roles.sort_by_key(|r| r.id != guild);
        let bot = self.config.bot_user_id;
        roles
            .iter()
            .enumerate()
            .map(|(position, r)| shapes::role_json(r, position, (r.id != guild && grants.bot_roles.contains(&r.id)).then_some(bot)))
            .collect()
    }

    /// The bot's member object in a guild.
    pub fn bot_member_json(&self, guild: u64) -> Value {
        let roles = self.bot_roles_in(&self.grants.lock(), guild);
        shapes::member_json(user_json(self.config.bot_user_id, &self.config.bot_name, true), &roles, self.started_ms)
    }

    /// `GET /guilds/{id}`.
    pub fn guild_json(&self, guild: u64) -> Value {
        shapes::guild_json(guild, &self.guild_name(guild), self.config.owner_id, self.roles_json(guild))
    }

    /// `GET /users/@me/guilds`: the guilds the bot is in, with its guild-wide permissions.
    pub fn partial_guilds_json(&self) -> Vec<Value> {
        let grants = self.grants.lock();
        self.bot_guilds()
            .into_iter()
            .map(|g| {
                json!({
                    "id": g.to_string(), "name": self.guild_name(g), "icon": null, "banner": null, "owner": false,
                    "permissions": self.base_in(&grants, g).to_string(), "features": [],
                })
            })
            .collect()
    }

    /// GUILD_CREATE for each guild of `shard` the bot is in, as Discord sends them after READY:
    /// the guild with its roles, channels (obfuscated where the bot cannot view them), the active
    /// threads he sees (his thread member on those he is in), the bot's member and the voice
    /// states `voice_states` gives for it.
    pub(crate) fn guild_creates(&self, shard: u32, voice_states: &dyn Fn(u64) -> Vec<Value>) -> Vec<Value> {
        self.bot_guilds()
            .into_iter()
            .filter(|g| shard_of(Some(*g), self.config.shards) == shard)
            .map(|g| {
                let mut d = self.guild_json(g);
                let channels: Vec<Value> = {
                    let grants = self.grants.lock();
                    self.placed_in(g).iter().map(|p| self.channel_object(&grants, p, self.permissions_in(&grants, p))).collect()
                };
                d["channels"] = json!(channels);
                d["threads"] = json!(self.guild_threads_json(g));
                d["members"] = json!([self.bot_member_json(g)]);
                d["voice_states"] = json!(voice_states(g));
                d["member_count"] = json!(2);
                d["presences"] = json!([]);
                d["stage_instances"] = json!([]);
                d["guild_scheduled_events"] = json!([]);
                d["soundboard_sounds"] = json!([]);
                d["joined_at"] = json!(shapes::timestamp(self.started_ms));
                d["large"] = json!(false);
                d["unavailable"] = json!(false);
                d
            })
            .collect()
    }
}
