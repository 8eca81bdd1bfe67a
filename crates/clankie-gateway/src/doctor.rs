//! `clankie doctor`'s Discord half: what Discord itself says about the bot, read the way the
//! gateway reads it (the token, the application's Message Content switch, the servers he is
//! admitted to, his permissions in every admitted channel, forum and voice room, his slash
//! command), each answered with a check and the one-line fix a person can act on.

use std::collections::HashMap;

use twilight_model::channel::permission_overwrite::{PermissionOverwrite, PermissionOverwriteType};
use twilight_model::channel::{Channel, ChannelType};
use twilight_model::guild::{Permissions, Role};
use twilight_model::id::Id;
use twilight_model::id::marker::{ApplicationMarker, GuildMarker, RoleMarker, UserMarker};
use twilight_model::oauth::{Application, ApplicationFlags};
use twilight_model::user::CurrentUser;

use crate::invite::{NEEDS, invite_url};

/// One line of the doctor's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked, a word or two (`token`, `guilds`, `permissions`).
    pub name: &'static str,
    pub ok: bool,
    /// What was found, in a sentence.
    pub found: String,
    /// What to do about it; empty when it passed.
    pub fix: String,
}

impl Check {
    pub fn pass(name: &'static str, found: impl Into<String>) -> Check {
        Check { name, ok: true, found: found.into(), fix: String::new() }
    }

    pub fn fail(name: &'static str, found: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name, ok: false, found: found.into(), fix: fix.into() }
    }
}

/// What the Discord checks read besides the token: where he is admitted.
#[derive(Debug, Clone, Default)]
pub struct Admitted {
    /// The servers he is admitted to; empty admits every server he is in.
    pub guilds: Vec<u64>,
    /// Where `guilds` was set, as a person edits it (named in a failed line).
    pub guilds_from: &'static str,
    /// The channels he is admitted to (the owner settings); empty admits every channel.
    pub channels: Vec<u64>,
    /// `CLANKIE_VOICE_ROOMS` as (guild, channel).
    pub voice_rooms: Vec<(u64, u64)>,
}

const TOKEN_FIX: &str =
    "copy the bot's token again from the Developer Portal (your application, Bot, Reset Token) into CLANKIE_DISCORD_TOKEN";
const CONTENT_FIX: &str =
    "turn on Message Content Intent in the Developer Portal (your application, Bot, Privileged Gateway Intents), then restart the gateway";

/// The permissions a text channel he talks in needs, from the invite's list.
fn text_needs() -> Permissions {
    NEEDS
        .iter()
        .map(|n| n.permission)
        .filter(|p| !p.intersects(Permissions::CONNECT | Permissions::SPEAK))
        .fold(Permissions::empty(), |a, p| a | p)
}

/// The permissions a forum needs: its posts are threads, so what a text channel needs with
/// Send Messages in Threads and without Send Messages (a forum's "Create Posts", which he does not do).
fn forum_needs() -> Permissions {
    text_needs() - Permissions::SEND_MESSAGES
}

/// The permissions a voice room he keeps live needs.
fn voice_needs() -> Permissions {
    Permissions::VIEW_CHANNEL | Permissions::CONNECT | Permissions::SPEAK
}

/// The names of `missing` as the server settings show them, in the invite's order.
pub fn permission_names(missing: Permissions) -> Vec<&'static str> {
    NEEDS.iter().filter(|n| missing.contains(n.permission)).map(|n| n.name).collect()
}

/// A member's permissions in a channel, as Discord computes them: the @everyone role's and
/// his roles' together (everything for ADMINISTRATOR or the owner), then the channel's
/// overwrites: @everyone's, his roles' (every deny, then every allow), his own ([`implicit_denials`]
/// follows; a member in timeout is not modelled).
pub fn channel_permissions(
    guild: Id<GuildMarker>,
    owner: Id<UserMarker>,
    member: Id<UserMarker>,
    member_roles: &[Id<RoleMarker>],
    roles: &[Role],
    overwrites: &[PermissionOverwrite],
) -> Permissions {
    if member == owner {
        return Permissions::all();
    }
    let everyone_id = guild.cast::<RoleMarker>();
    let mut base = roles.iter().find(|r| r.id == everyone_id).map_or(Permissions::empty(), |r| r.permissions);
    for role in roles.iter().filter(|r| member_roles.contains(&r.id)) {
        base |= role.permissions;
    }
    if base.contains(Permissions::ADMINISTRATOR) {
        return Permissions::all();
    }
    let mut permissions = base;
    if let Some(o) = overwrites.iter().find(|o| o.kind == PermissionOverwriteType::Role && o.id.get() == guild.get()) {
        permissions = (permissions - o.deny) | o.allow;
    }
    let (mut deny, mut allow) = (Permissions::empty(), Permissions::empty());
    for o in overwrites.iter().filter(|o| o.kind == PermissionOverwriteType::Role && member_roles.iter().any(|r| r.get() == o.id.get())) {
        deny |= o.deny;
        allow |= o.allow;
    }
    permissions = (permissions - deny) | allow;
    if let Some(o) = overwrites.iter().find(|o| o.kind == PermissionOverwriteType::Member && o.id.get() == member.get()) {
        permissions = (permissions - o.deny) | o.allow;
    }
    if !permissions.contains(Permissions::VIEW_CHANNEL) {
        return Permissions::empty();
    }
    permissions
}

/// What Discord takes away implicitly once the overwrites are applied: without Send Messages
/// the permissions that only go with a message; in a voice channel without Connect, the
/// voice permissions.
pub fn implicit_denials(permissions: Permissions, voice: bool) -> Permissions {
    let mut permissions = permissions;
    if !permissions.contains(Permissions::SEND_MESSAGES) {
        permissions -=
            Permissions::ATTACH_FILES | Permissions::EMBED_LINKS | Permissions::MENTION_EVERYONE | Permissions::SEND_TTS_MESSAGES;
    }
    if voice && !permissions.contains(Permissions::CONNECT) {
        permissions -= Permissions::SPEAK
            | Permissions::USE_VAD
            | Permissions::STREAM
            | Permissions::PRIORITY_SPEAKER
            | Permissions::MUTE_MEMBERS
            | Permissions::DEAFEN_MEMBERS
            | Permissions::MOVE_MEMBERS;
    }
    permissions
}

/// Whether `e` is Discord refusing the token.
fn unauthorized(e: &twilight_http::Error) -> bool {
    matches!(e.kind(), twilight_http::error::ErrorType::Unauthorized)
        || matches!(e.kind(), twilight_http::error::ErrorType::Response { status, .. } if status.get() == 401)
}

/// Every Discord check, in the order a person mends them: a refused token ends the list there,
/// since nothing after it can be read.
pub async fn discord_checks(token: &str, api: Option<&str>, admitted: &Admitted) -> Vec<Check> {
    let client = crate::rest::client::build(token, api);
    let mut checks = Vec::new();
    let me = match bot_user(&client, api).await {
        Ok(me) => me,
        Err(failed) => {
            checks.push(failed);
            return checks;
        }
    };
    checks.push(Check::pass("token", format!("the bot user {} ({})", me.name, me.id)));
    let Some(application) = application(&client, &mut checks).await else { return checks };
    let invite = invite_url(application.id.get());
    let Some(guilds) = guilds(&client, admitted, &invite, &mut checks).await else { return checks };
    permissions(&client, me.id, &guilds, admitted, &mut checks).await;
    checks.push(command(&client, application.id).await);
    checks
}

/// The bot user the token is, or the line that says why it could not be read.
async fn bot_user(client: &twilight_http::Client, api: Option<&str>) -> Result<CurrentUser, Check> {
    let against = crate::invite::api_name(api);
    match client.current_user().await {
        Ok(r) => r.model().await.map_err(|e| {
            Check::fail(
                "token",
                format!("{against} answered /users/@me with what is not a user: {e}"),
                "point CLANKIE_DISCORD_API at Discord (or unset it)",
            )
        }),
        Err(e) if unauthorized(&e) => Err(Check::fail("token", format!("{against} refused the token (401)"), TOKEN_FIX)),
        Err(e) if crate::invite::unanswered(&e) => Err(Check::fail(
            "token",
            format!("{against} could not be reached ({})", crate::invite::root_cause(&e)),
            crate::invite::unreachable_fix(api.is_some()),
        )),
        Err(e) => Err(Check::fail("token", format!("{against} could not be asked: {e}"), "run doctor again; Discord may be down")),
    }
}

/// The application, with the line on its Message Content switch; `None` (and a failed line)
/// when it cannot be read.
async fn application(client: &twilight_http::Client, checks: &mut Vec<Check>) -> Option<Application> {
    let application = match client.current_user_application().await {
        Ok(r) => r.model().await.ok(),
        Err(_) => None,
    };
    let Some(application) = application else {
        checks.push(Check::fail("application", "the application could not be read (/applications/@me)", "check the token is a bot token"));
        return None;
    };
    let content = ApplicationFlags::GATEWAY_MESSAGE_CONTENT | ApplicationFlags::GATEWAY_MESSAGE_CONTENT_LIMITED;
    if application.flags.is_some_and(|f| f.intersects(content)) {
        checks.push(Check::pass("message content", "the Message Content intent is on"));
    } else {
        checks.push(Check::fail(
            "message content",
            "the Message Content intent is off (the gateway would be closed with 4014)",
            CONTENT_FIX,
        ));
    }
    Some(application)
}

/// The admitted servers he is in, by id with their names, and the line that says whether he is
/// in every one; `None` when the list could not be read.
async fn guilds(
    client: &twilight_http::Client,
    admitted: &Admitted,
    invite: &str,
    checks: &mut Vec<Check>,
) -> Option<Vec<(Id<GuildMarker>, String)>> {
    let guilds = match crate::invite::guilds_of(client).await {
        Ok(guilds) => guilds,
        Err(e) => {
            checks.push(Check::fail(
                "guilds",
                format!("the servers he is in could not be read: {e}"),
                "run doctor again; Discord may be down",
            ));
            return None;
        }
    };
    let names: HashMap<u64, String> = guilds.iter().map(|g| (g.id.get(), g.name.clone())).collect();
    let missing: Vec<u64> = admitted.guilds.iter().copied().filter(|g| !names.contains_key(g)).collect();
    let checked: Vec<u64> = if admitted.guilds.is_empty() {
        names.keys().copied().collect()
    } else {
        admitted.guilds.iter().copied().filter(|g| names.contains_key(g)).collect()
    };
    if !missing.is_empty() {
        let list = missing.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        checks.push(Check::fail(
            "guilds",
            format!("he is not in {list}, admitted in {}", admitted.guilds_from),
            format!("invite him with {invite} (a person with Manage Server picks the server)"),
        ));
    } else if guilds.is_empty() {
        checks.push(Check::fail("guilds", "he is in no server", format!("invite him with {invite}")));
    } else {
        checks.push(Check::pass("guilds", format!("he is in {} of them: {}", checked.len(), list_guilds(&checked, &names))));
    }
    let mut checked = checked;
    checked.sort_unstable();
    Some(
        checked
            .into_iter()
            .filter_map(|g| Some((Id::<GuildMarker>::new_checked(g)?, names.get(&g).cloned().unwrap_or_default())))
            .collect(),
    )
}

/// How the permission checks of the servers went, for the closing line.
#[derive(Debug, Default)]
struct Tally {
    lacking: usize,
    text_rooms: usize,
    forums: usize,
    voice_rooms: usize,
}

/// His permissions in every admitted room of every server checked: a failed line for each
/// room that lacks one, and one passing line when none does.
async fn permissions(
    client: &twilight_http::Client,
    me: Id<UserMarker>,
    guilds: &[(Id<GuildMarker>, String)],
    admitted: &Admitted,
    checks: &mut Vec<Check>,
) {
    let mut tally = Tally::default();
    for (guild, guild_name) in guilds {
        let read = async {
            let g = client.guild(*guild).await.ok()?.model().await.ok()?;
            let member = client.guild_member(*guild, me).await.ok()?.model().await.ok()?;
            let channels = client.guild_channels(*guild).await.ok()?.models().await.ok()?;
            Some((g, member, channels))
        };
        let Some((g, member, channels)) = read.await else {
            checks.push(Check::fail(
                "permissions",
                format!("the roles and channels of {guild_name} ({guild}) could not be read"),
                "run doctor again",
            ));
            tally.lacking += 1;
            continue;
        };
        let server = Server { id: *guild, name: guild_name, owner: g.owner_id, me, my_roles: &member.roles, roles: &g.roles };
        for channel in &channels {
            if let Some(check) = room(&server, channel, admitted, &mut tally) {
                checks.push(check);
            }
        }
        for (vg, vc) in admitted.voice_rooms.iter().filter(|(vg, _)| *vg == guild.get()) {
            if !channels.iter().any(|c| c.id.get() == *vc) {
                tally.lacking += 1;
                checks.push(Check::fail(
                    "permissions",
                    format!("the voice room {vc} of CLANKIE_VOICE_ROOMS is not a channel of {vg}"),
                    "copy the room's id again (Developer Mode, right-click the room, Copy Channel ID)",
                ));
            }
        }
    }
    if tally.lacking == 0 && !guilds.is_empty() {
        checks.push(Check::pass(
            "permissions",
            format!(
                "every permission he needs in {} text channel(s), {} forum(s) and {} voice room(s)",
                tally.text_rooms, tally.forums, tally.voice_rooms
            ),
        ));
    }
}

/// A server as its permission computation needs it.
struct Server<'a> {
    id: Id<GuildMarker>,
    name: &'a str,
    owner: Id<UserMarker>,
    me: Id<UserMarker>,
    my_roles: &'a [Id<RoleMarker>],
    roles: &'a [Role],
}

/// One room's line: `None` for a room he does not use (another kind, not admitted) or has all
/// he needs in.
fn room(server: &Server<'_>, channel: &Channel, admitted: &Admitted, tally: &mut Tally) -> Option<Check> {
    let voice_room = admitted.voice_rooms.iter().any(|(vg, vc)| *vg == server.id.get() && *vc == channel.id.get());
    let listed = admitted.channels.contains(&channel.id.get());
    let admitted_here = admitted.channels.is_empty() || listed;
    let needs = match channel.kind {
        ChannelType::GuildText | ChannelType::GuildAnnouncement if admitted_here => text_needs(),
        ChannelType::GuildForum if admitted_here => forum_needs(),
        ChannelType::GuildVoice | ChannelType::GuildStageVoice if voice_room => voice_needs(),
        _ => return None,
    };
    let voice = matches!(channel.kind, ChannelType::GuildVoice | ChannelType::GuildStageVoice);
    let overwrites = channel.permission_overwrites.as_deref().unwrap_or(&[]);
    let has = channel_permissions(server.id, server.owner, server.me, server.my_roles, server.roles, overwrites);
    let has = implicit_denials(has, voice);
    let name = channel.name.clone().unwrap_or_default();
    if has.is_empty() && !voice_room && !listed {
        // A room hidden from him is a room he was not meant to be in: said, not failed.
        return Some(Check::pass(
            "permissions",
            format!("#{name} ({}) in {} is hidden from him; he will not answer there", channel.id, server.name),
        ));
    }
    match channel.kind {
        _ if voice_room => tally.voice_rooms += 1,
        ChannelType::GuildForum => tally.forums += 1,
        _ => tally.text_rooms += 1,
    }
    let missing = needs - has;
    if missing.is_empty() {
        return None;
    }
    tally.lacking += 1;
    let names = permission_names(missing).join(", ");
    Some(Check::fail(
        "permissions",
        format!("in #{name} ({}) of {} he lacks {names}", channel.id, server.name),
        format!("Server Settings, Roles (his role), or #{name}'s Edit Channel, Permissions: allow {names} for him"),
    ))
}

/// Whether his slash command is registered.
async fn command(client: &twilight_http::Client, application: Id<ApplicationMarker>) -> Check {
    let registered = match client.interaction(application).global_commands().await {
        Ok(r) => r.models().await.map(|c| c.iter().any(|c| c.name == crate::commands::COMMAND)).unwrap_or(false),
        Err(_) => false,
    };
    if registered {
        Check::pass("slash command", format!("/{} is registered", crate::commands::COMMAND))
    } else {
        Check::fail(
            "slash command",
            format!("/{} is not registered", crate::commands::COMMAND),
            "start the gateway once: it registers the command when it starts",
        )
    }
}

fn list_guilds(ids: &[u64], names: &HashMap<u64, String>) -> String {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.iter().map(|id| format!("{} ({id})", names.get(id).map_or("?", String::as_str))).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(id: u64, permissions: Permissions) -> Role {
        serde_json::from_value(serde_json::json!({
            "id": id.to_string(), "name": "r", "color": 0, "colors": { "primary_color": 0, "secondary_color": null, "tertiary_color": null }, "hoist": false, "managed": false, "mentionable": false,
            "permissions": permissions.bits().to_string(), "position": 0, "flags": 0,
        }))
        .unwrap()
    }

    fn overwrite(id: u64, member: bool, allow: Permissions, deny: Permissions) -> PermissionOverwrite {
        PermissionOverwrite {
            id: Id::new(id),
            kind: if member { PermissionOverwriteType::Member } else { PermissionOverwriteType::Role },
            allow,
            deny,
        }
    }

    #[test]
    fn permissions_apply_everyone_then_roles_then_the_member_as_discord_does() {
        let (guild, owner, bot, bot_role) = (Id::new(100), Id::new(1), Id::new(4242), Id::new(150));
        let roles = [role(100, Permissions::VIEW_CHANNEL | Permissions::SEND_MESSAGES), role(150, Permissions::ADD_REACTIONS)];
        let has = |o: &[PermissionOverwrite]| channel_permissions(guild, owner, bot, &[bot_role], &roles, o);
        assert_eq!(has(&[]), Permissions::VIEW_CHANNEL | Permissions::SEND_MESSAGES | Permissions::ADD_REACTIONS);
        // His role's deny beats @everyone's allow; his own allow beats his role's deny.
        let everyone_allows = overwrite(100, false, Permissions::ATTACH_FILES, Permissions::empty());
        let role_denies = overwrite(150, false, Permissions::empty(), Permissions::SEND_MESSAGES | Permissions::ATTACH_FILES);
        assert!(!has(&[everyone_allows, role_denies]).contains(Permissions::SEND_MESSAGES));
        let member_allows = overwrite(4242, true, Permissions::SEND_MESSAGES, Permissions::empty());
        assert!(has(&[everyone_allows, role_denies, member_allows]).contains(Permissions::SEND_MESSAGES));
        assert!(!has(&[everyone_allows, role_denies, member_allows]).contains(Permissions::ATTACH_FILES));
        // Without View Channel, nothing else counts.
        let hidden = overwrite(100, false, Permissions::empty(), Permissions::VIEW_CHANNEL);
        assert_eq!(has(&[hidden]), Permissions::empty());
        // Administrator and the owner pass every overwrite.
        let admin = [role(100, Permissions::ADMINISTRATOR)];
        assert_eq!(channel_permissions(guild, owner, bot, &[], &admin, &[hidden]), Permissions::all());
        assert_eq!(channel_permissions(guild, bot, bot, &[], &[], &[hidden]), Permissions::all());
    }

    #[test]
    fn without_send_messages_files_go_too_and_without_connect_speak_goes() {
        let text = Permissions::VIEW_CHANNEL | Permissions::ATTACH_FILES | Permissions::ADD_REACTIONS;
        assert_eq!(implicit_denials(text, false), Permissions::VIEW_CHANNEL | Permissions::ADD_REACTIONS);
        assert_eq!(implicit_denials(text | Permissions::SEND_MESSAGES, false), text | Permissions::SEND_MESSAGES);
        let voice = Permissions::VIEW_CHANNEL | Permissions::SPEAK | Permissions::SEND_MESSAGES;
        assert_eq!(implicit_denials(voice, true), Permissions::VIEW_CHANNEL | Permissions::SEND_MESSAGES);
        assert_eq!(implicit_denials(voice, false), voice, "a text channel keeps what it was given");
    }

    #[test]
    fn text_rooms_need_the_invites_text_permissions_and_voice_rooms_connect_and_speak() {
        assert_eq!(
            text_needs(),
            Permissions::VIEW_CHANNEL
                | Permissions::SEND_MESSAGES
                | Permissions::SEND_MESSAGES_IN_THREADS
                | Permissions::READ_MESSAGE_HISTORY
                | Permissions::ATTACH_FILES
                | Permissions::ADD_REACTIONS
        );
        // A forum's posts are threads: he answers in them, never starts one.
        assert_eq!(forum_needs(), text_needs() - Permissions::SEND_MESSAGES);
        assert!(forum_needs().contains(Permissions::SEND_MESSAGES_IN_THREADS));
        assert_eq!(permission_names(Permissions::SEND_MESSAGES | Permissions::SPEAK), ["Send Messages", "Speak"]);
    }
}
