//! Permissions as Discord keeps them: the computation Discord documents over the bits of
//! [`permission`](crate::state::permission)
//! (`developers/topics/permissions.mdx`: base, overwrites, implicit denials), and the guilds'
//! roles and channel overwrites as they stand, which the control API changes at run time.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::state::config::{LoopbackConfig, OverwriteSpec, RoleSpec};

use crate::state::permission::{ADMINISTRATOR, ALL, CONNECT, SEND_MESSAGES, SENDING, VIEW_CHANNEL, VOICE};

/// A member's permissions across a guild, before any channel: @everyone's, with its roles'
/// added; the owner and an administrator have all.
pub fn base_permissions(guild: u64, owner: bool, roles: &[RoleSpec], member_roles: &[u64]) -> u64 {
    if owner {
        return ALL;
    }
    let everyone = roles.iter().find(|r| r.id == guild).map_or(0, |r| r.permissions);
    let perms = roles.iter().filter(|r| r.id != guild && member_roles.contains(&r.id)).fold(everyone, |p, r| p | r.permissions);
    if perms & ADMINISTRATOR != 0 { ALL } else { perms }
}

/// A member's permissions in a channel from its guild-wide `base`: @everyone's overwrite (deny,
/// then allow), its roles' overwrites together (all denies, then all allows), its own (deny,
/// then allow); then what is implicitly lost: everything without VIEW_CHANNEL, the voice
/// permissions in a voice channel without CONNECT, and what sending brings without SEND_MESSAGES.
pub fn channel_permissions(base: u64, guild: u64, member: u64, member_roles: &[u64], overwrites: &[OverwriteSpec], voice: bool) -> u64 {
    if base & ADMINISTRATOR != 0 {
        return ALL;
    }
    let mut perms = base;
    if let Some(o) = overwrites.iter().find(|o| !o.member && o.id == guild) {
        perms = (perms & !o.deny) | o.allow;
    }
    let (allow, deny) = overwrites
        .iter()
        .filter(|o| !o.member && o.id != guild && member_roles.contains(&o.id))
        .fold((0, 0), |(allow, deny), o| (allow | o.allow, deny | o.deny));
    perms = (perms & !deny) | allow;
    if let Some(o) = overwrites.iter().find(|o| o.member && o.id == member) {
        perms = (perms & !o.deny) | o.allow;
    }
    if perms & VIEW_CHANNEL == 0 {
        return 0;
    }
    if voice && perms & CONNECT == 0 {
        perms &= !VOICE;
    }
    if perms & SEND_MESSAGES == 0 {
        perms &= !SENDING;
    }
    perms
}

/// The roles and overwrites as they stand, and the application's Message Content switch; and
/// the guild channels renamed since the start, the one other thing of a guild that changes.
pub(crate) struct Grants {
    pub roles: Vec<RoleSpec>,
    pub bot_roles: Vec<u64>,
    /// Each guild channel's overwrites.
    pub overwrites: HashMap<u64, Vec<OverwriteSpec>>,
    pub message_content: bool,
    /// The names of guild channels renamed at run time, by channel (the others keep their configured one).
    pub names: HashMap<u64, String>,
}

/// [`Grants`] behind a lock: read by every request, changed by the control API.
pub(crate) struct Keeper(Mutex<Grants>);

impl Keeper {
    /// The grants a loopback of `config` starts with.
    pub fn seeded(config: &LoopbackConfig) -> Keeper {
        let (roles, bot_roles) = config.roles_with_defaults();
        let overwrites = config.channels.iter().map(|c| (c.id, c.overwrites.clone())).collect();
        let message_content = config.message_content_intent;
        Keeper(Mutex::new(Grants { roles, bot_roles, overwrites, message_content, names: HashMap::new() }))
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Grants> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::permission::*;

    const GUILD: u64 = 100;
    const BOT: u64 = 4242;
    const MODS: u64 = 7;

    fn role(id: u64, permissions: u64) -> RoleSpec {
        RoleSpec { id, name: format!("role-{id}"), permissions, guild: None }
    }

    fn role_overwrite(id: u64, allow: u64, deny: u64) -> OverwriteSpec {
        OverwriteSpec { id, member: false, allow, deny }
    }

    fn member_overwrite(id: u64, allow: u64, deny: u64) -> OverwriteSpec {
        OverwriteSpec { id, member: true, allow, deny }
    }

    fn roles() -> Vec<RoleSpec> {
        vec![role(GUILD, VIEW_CHANNEL | SEND_MESSAGES | READ_MESSAGE_HISTORY), role(MODS, ADD_REACTIONS)]
    }

    #[test]
    fn base_is_everyone_with_the_members_roles_added() {
        assert_eq!(base_permissions(GUILD, false, &roles(), &[]), VIEW_CHANNEL | SEND_MESSAGES | READ_MESSAGE_HISTORY);
        assert_eq!(base_permissions(GUILD, false, &roles(), &[MODS]), VIEW_CHANNEL | SEND_MESSAGES | READ_MESSAGE_HISTORY | ADD_REACTIONS);
    }

    #[test]
    fn a_role_overwrite_deny_beats_an_everyone_overwrite_allow() {
        let base = base_permissions(GUILD, false, &roles(), &[MODS]);
        let overwrites = [role_overwrite(GUILD, ATTACH_FILES, 0), role_overwrite(MODS, 0, ATTACH_FILES | SEND_MESSAGES)];
        let perms = channel_permissions(base, GUILD, BOT, &[MODS], &overwrites, false);
        assert_eq!(perms & SEND_MESSAGES, 0, "the role's deny of Send Messages stands over @everyone's base");
        assert_eq!(perms & ATTACH_FILES, 0, "the role's deny stands over @everyone's overwrite allow");
        // Without the role, @everyone's allow is what counts.
        let without = channel_permissions(base_permissions(GUILD, false, &roles(), &[]), GUILD, BOT, &[], &overwrites, false);
        assert_ne!(without & ATTACH_FILES, 0);
    }

    #[test]
    fn a_role_overwrite_allow_beats_another_roles_deny() {
        let others = 8;
        let mut all = roles();
        all.push(role(others, 0));
        let base = base_permissions(GUILD, false, &all, &[MODS, others]);
        let overwrites = [role_overwrite(MODS, 0, SEND_MESSAGES), role_overwrite(others, SEND_MESSAGES, 0)];
        assert_ne!(channel_permissions(base, GUILD, BOT, &[MODS, others], &overwrites, false) & SEND_MESSAGES, 0);
    }

    #[test]
    fn a_member_overwrite_allow_beats_a_role_deny() {
        let base = base_permissions(GUILD, false, &roles(), &[MODS]);
        let overwrites = [role_overwrite(MODS, 0, SEND_MESSAGES), member_overwrite(BOT, SEND_MESSAGES, 0)];
        assert_ne!(channel_permissions(base, GUILD, BOT, &[MODS], &overwrites, false) & SEND_MESSAGES, 0);
        // Another member's overwrite is not the bot's.
        let others = [role_overwrite(MODS, 0, SEND_MESSAGES), member_overwrite(BOT + 1, SEND_MESSAGES, 0)];
        assert_eq!(channel_permissions(base, GUILD, BOT, &[MODS], &others, false) & SEND_MESSAGES, 0);
    }

    #[test]
    fn administrator_bypasses_every_overwrite() {
        let mut all = roles();
        all.push(role(9, ADMINISTRATOR));
        let base = base_permissions(GUILD, false, &all, &[9]);
        assert_eq!(base, ALL);
        let overwrites = [role_overwrite(GUILD, 0, VIEW_CHANNEL), member_overwrite(BOT, 0, ALL)];
        assert_eq!(channel_permissions(base, GUILD, BOT, &[9], &overwrites, false), ALL);
    }

    #[test]
    fn the_owner_has_everything_whatever_its_roles() {
        assert_eq!(base_permissions(GUILD, true, &[], &[]), ALL);
    }

    #[test]
    fn no_view_channel_zeroes_the_rest() {
        let base = base_permissions(GUILD, false, &roles(), &[MODS]);
        let overwrites = [member_overwrite(BOT, 0, VIEW_CHANNEL)];
        assert_eq!(channel_permissions(base, GUILD, BOT, &[MODS], &overwrites, false), 0);
    }

    #[test]
    fn a_voice_channel_without_connect_loses_its_voice_permissions() {
        let base = VIEW_CHANNEL | CONNECT | SPEAK | USE_VAD | SEND_MESSAGES;
        let perms = channel_permissions(base, GUILD, BOT, &[], &[member_overwrite(BOT, 0, CONNECT)], true);
        assert_eq!(perms, VIEW_CHANNEL | SEND_MESSAGES);
        // The same overwrite in a text channel takes Connect alone.
        assert_eq!(channel_permissions(base, GUILD, BOT, &[], &[member_overwrite(BOT, 0, CONNECT)], false), base & !CONNECT);
    }

    #[test]
    fn without_send_messages_files_and_embeds_go_too() {
        let base = VIEW_CHANNEL | SEND_MESSAGES | ATTACH_FILES | EMBED_LINKS | READ_MESSAGE_HISTORY;
        let perms = channel_permissions(base, GUILD, BOT, &[], &[member_overwrite(BOT, 0, SEND_MESSAGES)], false);
        assert_eq!(perms, VIEW_CHANNEL | READ_MESSAGE_HISTORY);
    }

    #[test]
    fn the_bits_are_discords_and_the_invite_is_274881154112() {
        use twilight_model::guild::Permissions as P;
        let pairs = [
            (ADD_REACTIONS, P::ADD_REACTIONS),
            (VIEW_CHANNEL, P::VIEW_CHANNEL),
            (SEND_MESSAGES, P::SEND_MESSAGES),
            (EMBED_LINKS, P::EMBED_LINKS),
            (ATTACH_FILES, P::ATTACH_FILES),
            (READ_MESSAGE_HISTORY, P::READ_MESSAGE_HISTORY),
            (CONNECT, P::CONNECT),
            (SPEAK, P::SPEAK),
            (USE_VAD, P::USE_VAD),
            (SEND_MESSAGES_IN_THREADS, P::SEND_MESSAGES_IN_THREADS),
            (ADMINISTRATOR, P::ADMINISTRATOR),
            (MANAGE_MESSAGES, P::MANAGE_MESSAGES),
            (USE_APPLICATION_COMMANDS, P::USE_SLASH_COMMANDS),
            (BYPASS_SLOWMODE, P::BYPASS_SLOWMODE),
        ];
        for (ours, theirs) in pairs {
            assert_eq!(ours, theirs.bits(), "{theirs:?}");
        }
        assert_eq!(BOT_INVITE, 274_881_154_112);
        assert_eq!(BOT_INVITE_WITHOUT_THREADS, 3_247_168);
        assert_eq!(ALL & P::all().bits(), P::all().bits(), "ALL holds every permission twilight knows");
    }
}
