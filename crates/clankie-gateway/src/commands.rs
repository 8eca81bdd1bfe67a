//! The owner's controls inside Discord: the `/clankie` command set, registered once across
//! replicas, and every interaction a shard of this replica receives answered inside Discord's
//! 3 s: deferred at once (ephemeral), asked of a captain over `clankie.rpc.command`, then the
//! deferred answer edited in through the interaction's webhook.

use std::time::Duration;

use clankie_proto::{Subject, v1};
use serde_json::{Value, json};
use twilight_model::application::command::Command;
use twilight_model::application::interaction::application_command::{CommandDataOption, CommandOptionValue};
use twilight_model::application::interaction::{Interaction, InteractionData, InteractionType};
use twilight_model::channel::message::component::ButtonStyle;
use twilight_model::channel::message::{Component, MessageFlags};
use twilight_model::http::interaction::{InteractionResponse, InteractionResponseData, InteractionResponseType};
use twilight_model::id::Id;

use crate::state::Gateway;

/// The one command; everything is a subcommand of it.
pub const COMMAND: &str = "clankie";
/// The bucket that remembers which command set was registered.
const COMMANDS_BUCKET: &str = "clankie-commands";
/// How long a captain may take over a command (forgetting a person waits for busy lanes).
const ANSWER_WITHIN: Duration = Duration::from_secs(60);
/// How long a command waits for some captain to listen (one restarting) before the person is
/// told none can answer now, instead of watching "thinking…" for the whole minute.
const NO_CAPTAIN_FOR: Duration = Duration::from_secs(10);

/// The command set as Discord's bulk overwrite takes it.
pub fn command_set() -> Value {
    let sub =
        |name: &str, description: &str, options: Value| json!({ "type": 1, "name": name, "description": description, "options": options });
    json!([{
        "type": 1,
        // Discord sets the version; twilight's model needs one to build the request.
        "version": "1",
        "name": COMMAND,
        "description": "Clankie's controls",
        "contexts": [0, 1],
        "options": [
            sub("status", "Where he is now: rooms running, the voice room, quiet channels", json!([])),
            sub("memory", "Memory he proposed, to approve or reject", json!([])),
            {
                "type": 2, "name": "voice", "description": "Call him into voice or out of it",
                "options": [
                    sub("join", "Join a voice channel", json!([{ "type": 3, "name": "channel", "description": "The voice channel's id", "required": true }])),
                    sub("leave", "Leave voice in this server", json!([])),
                ],
            },
            sub("quiet", "He answers nobody in this channel for a while", json!([{
                "type": 4, "name": "minutes", "description": "For how long", "required": true, "min_value": 1, "max_value": 1440,
            }])),
            // At most 90 days: the captain's `MAX_DAYS`, the longest bill it gives.
            sub("usage", "What his model use cost: per day, lane and room", json!([{
                "type": 4, "name": "days", "description": "Over the last how many days (7 when not given)", "required": false, "min_value": 1, "max_value": 90,
            }])),
            // Discord takes a subcommand's required options before its optional ones.
            sub("remind", "Remind you of something later, here or by DM", json!([
                { "type": 3, "name": "what", "description": "What to remind you of", "required": true, "max_length": 300 },
                {
                    "type": 3, "name": "when", "description": "When: in 10 minutes, tomorrow 9:00, 2026-12-24 18:00 (your time zone)",
                    "required": true, "max_length": 100,
                },
                { "type": 5, "name": "dm", "description": "Send it to you alone, by DM", "required": false },
                {
                    "type": 3, "name": "every", "description": "Owner only: a repeating check-in, as cron with seconds first (0 0 19 * * FRI)",
                    "required": false, "max_length": 100,
                },
            ])),
            sub("reminders", "Your pending reminders, to cancel", json!([])),
            sub("timezone", "Your time zone, which reminders are read in", json!([{
                "type": 3, "name": "zone", "description": "An IANA name such as Europe/Berlin; empty shows yours", "required": false, "max_length": 64,
            }, {
                "type": 6, "name": "user", "description": "Owner only: someone else's", "required": false,
            }])),
            sub("forget-me", "Erase what you said from his memory", json!([])),
        ],
    }])
}

/// A short digest of the command set: a changed set is registered again.
fn set_digest(set: &Value) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    set.to_string().hash(&mut h);
    format!("{:016x}", h.finish())
}

/// What the captain is asked, read from an interaction; `None` for one that is not ours.
pub fn request_of(interaction: &Interaction) -> Option<v1::CommandRequest> {
    let user_id = interaction.author_id()?.get();
    let mut request = v1::CommandRequest {
        interaction_id: interaction.id.get().to_string(),
        user_id,
        guild_id: interaction.guild_id.map(|g| g.get()),
        channel_id: interaction.channel.as_ref().map(|c| c.id.get()).or(interaction.channel_id_compat())?,
        member_permissions: interaction.member.as_ref().and_then(|m| m.permissions).map(|p| p.bits()),
        in_thread: interaction.channel.as_ref().is_some_and(|c| c.kind.is_thread()),
        ..Default::default()
    };
    match (&interaction.kind, interaction.data.as_ref()?) {
        (InteractionType::ApplicationCommand, InteractionData::ApplicationCommand(data)) if data.name == COMMAND => {
            let first = data.options.first()?;
            match &first.value {
                CommandOptionValue::SubCommandGroup(inner) => {
                    let sub = inner.first()?;
                    request.command = format!("{} {}", first.name, sub.name);
                    if let CommandOptionValue::SubCommand(options) = &sub.value {
                        request.custom_id = string_option(options, "channel").unwrap_or_default();
                    }
                }
                CommandOptionValue::SubCommand(options) => {
                    request.command = first.name.clone();
                    request.minutes = integer_option(options, "minutes").unwrap_or(0);
                    request.days = integer_option(options, "days").unwrap_or(0);
                    request.text = string_option(options, "what").unwrap_or_default();
                    request.when = string_option(options, "when").unwrap_or_default();
                    request.cron = string_option(options, "every").unwrap_or_default();
                    request.direct = bool_option(options, "dm").unwrap_or(false);
                    request.time_zone = string_option(options, "zone").unwrap_or_default();
                    request.for_user = string_option(options, "user").and_then(|u| u.parse().ok());
                }
                _ => return None,
            }
        }
        (InteractionType::MessageComponent, InteractionData::MessageComponent(data)) => {
            request.command = "button".into();
            request.custom_id.clone_from(&data.custom_id);
            if let Some(message) = &interaction.message {
                request.message_id = message.id.get();
                request.message_text.clone_from(&message.content);
                request.message_buttons = buttons_of(&message.components);
            }
        }
        _ => return None,
    }
    Some(request)
}

fn string_option(options: &[CommandDataOption], name: &str) -> Option<String> {
    options.iter().find(|o| o.name == name).and_then(|o| match &o.value {
        CommandOptionValue::String(s) => Some(s.clone()),
        CommandOptionValue::Channel(c) => Some(c.get().to_string()),
        CommandOptionValue::User(u) => Some(u.get().to_string()),
        CommandOptionValue::Integer(i) => Some(i.to_string()),
        _ => None,
    })
}

fn integer_option(options: &[CommandDataOption], name: &str) -> Option<i64> {
    options.iter().find(|o| o.name == name).and_then(|o| match &o.value {
        CommandOptionValue::Integer(i) => Some(*i),
        CommandOptionValue::String(s) => s.parse().ok(),
        _ => None,
    })
}

fn bool_option(options: &[CommandDataOption], name: &str) -> Option<bool> {
    options.iter().find(|o| o.name == name).and_then(|o| match &o.value {
        CommandOptionValue::Boolean(b) => Some(*b),
        _ => None,
    })
}

/// The buttons of a message's action rows, in order, as the captain gave them.
pub fn buttons_of(components: &[Component]) -> Vec<v1::CommandButton> {
    let mut out = Vec::new();
    for c in components {
        match c {
            Component::ActionRow(row) => out.extend(buttons_of(&row.components)),
            Component::Button(b) => out.push(v1::CommandButton {
                custom_id: b.custom_id.clone().unwrap_or_default(),
                label: b.label.clone().unwrap_or_default(),
                danger: b.style == ButtonStyle::Danger,
            }),
            _ => {}
        }
    }
    out
}

/// Buttons as Discord's components: one action row per two (Approve, Reject of one fact).
pub fn components(buttons: &[v1::CommandButton]) -> Vec<Component> {
    buttons
        .chunks(2)
        .take(5)
        .filter_map(|row| {
            let row: Vec<Value> = row
                .iter()
                .map(|b| json!({ "type": 2, "style": if b.danger { 4 } else { 3 }, "label": b.label, "custom_id": b.custom_id }))
                .collect();
            serde_json::from_value(json!({ "type": 1, "components": row })).ok()
        })
        .collect()
}

trait ChannelIdCompat {
    fn channel_id_compat(&self) -> Option<u64>;
}

impl ChannelIdCompat for Interaction {
    #[allow(deprecated)]
    fn channel_id_compat(&self) -> Option<u64> {
        self.channel_id.map(|c| c.get())
    }
}

impl Gateway {
    /// Registers the command set unless a replica already registered this very set: the
    /// first to create its digest's key in the shared bucket registers, the rest do nothing.
    pub(crate) async fn register_commands(&self, application_id: u64) {
        let Some(app) = Id::new_checked(application_id) else { return };
        let set = command_set();
        let Ok(commands) = serde_json::from_value::<Vec<Command>>(set.clone()) else {
            tracing::error!("the command set does not parse as Discord commands");
            return;
        };
        let key = format!("set.{}", set_digest(&set));
        let bucket = match self.bus().key_value(COMMANDS_BUCKET, Duration::from_secs(30 * 24 * 3600)).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "the commands bucket is unavailable; commands not registered");
                return;
            }
        };
        if bucket.create(&key, self.config().replica.clone().into_bytes().into()).await.is_err() {
            tracing::debug!("the command set is registered already");
            return;
        }
        match self.http().interaction(app).set_global_commands(&commands).await {
            Ok(_) => {
                tracing::info!(commands = commands.len(), "command set registered");
                self.receipt("gateway.commands_registered", &key, |r| r.with_count("commands", commands.len() as i64)).await;
            }
            Err(e) => {
                // Another start tries again.
                tracing::warn!(error = %e, "the command set could not be registered");
                let _ = bucket.delete(&key).await;
            }
        }
    }

    /// Answers one interaction: deferred at once, then the captain's answer edited in.
    pub(crate) async fn interaction(&self, interaction: Interaction) {
        let Some(request) = request_of(&interaction) else { return };
        let app = interaction.application_id;
        let http = self.http();
        let client = http.interaction(app);
        let button = request.command == "button";
        let deferred = InteractionResponse {
            kind: if button {
                InteractionResponseType::DeferredUpdateMessage
            } else {
                InteractionResponseType::DeferredChannelMessageWithSource
            },
            data: (!button).then(|| InteractionResponseData { flags: Some(MessageFlags::EPHEMERAL), ..Default::default() }),
        };
        let id = request.interaction_id.clone();
        if let Err(e) = client.create_response(interaction.id, &interaction.token, &deferred).await {
            tracing::warn!(error = %e, "an interaction could not be deferred in time");
            self.receipt("gateway.interaction", &id, |r| r.with_code("defer_failed")).await;
            return;
        }
        // A command that goes on after its first answer (a forget) sends its last one here;
        // listened to before asking, so it cannot come first.
        let done = match request.interaction_id.parse::<u64>() {
            Ok(interaction) if request.command == "forget-me" => {
                self.bus().listen::<v1::CommandReply>(&Subject::RpcCommandDone { interaction }).await.ok()
            }
            _ => None,
        };
        let asked = self.bus().request_within::<_, v1::CommandReply>(&Subject::RpcCommand, &request, ANSWER_WITHIN, NO_CAPTAIN_FOR);
        let reply = match asked.await {
            Ok(reply) => reply,
            Err(e) => {
                tracing::warn!(error = %e, "no captain answered a command");
                v1::CommandReply {
                    text: "I can't do that right now; try again in a moment.".into(),
                    code: "captain_unavailable".into(),
                    ..Default::default()
                }
            }
        };
        let rows = components(&reply.buttons);
        let edited = client.update_response(&interaction.token).content(Some(&reply.text)).components(Some(&rows)).await;
        let code = clankie_proto::command_reply_code(&reply.code);
        self.receipt("gateway.interaction", &id, |r| {
            r.with_code(if button { "button" } else { "command" })
                .with_code(code)
                .with_id("user", request.user_id)
                .with_id("channel", request.channel_id)
                .with_flag("edited", edited.is_ok())
        })
        .await;
        if let Err(e) = edited {
            tracing::warn!(error = %e, "an interaction's answer could not be edited in");
        }
        let (true, Some(mut done)) = (reply.more, done) else { return };
        let last = match tokio::time::timeout(FINAL_ANSWER_WITHIN, futures::StreamExt::next(&mut done)).await {
            Ok(Some(last)) => last,
            _ => {
                tracing::warn!("a command's final answer did not come while its interaction could still be edited");
                self.receipt("gateway.interaction", &id, |r| r.with_code("command").with_code("final_answer_missing")).await;
                return;
            }
        };
        let edited =
            client.update_response(&interaction.token).content(Some(&last.text)).components(Some(&components(&last.buttons))).await;
        let code = clankie_proto::command_reply_code(&last.code);
        self.receipt("gateway.interaction", &id, |r| {
            r.with_code("command")
                .with_code(code)
                .with_id("user", request.user_id)
                .with_flag("edited", edited.is_ok())
                .with_flag("final", true)
        })
        .await;
        if let Err(e) = edited {
            tracing::warn!(error = %e, "a command's final answer could not be edited in");
        }
    }
}

/// How long a command answered "working on it" may take to send its final answer: the
/// interaction's token, and so its answer, can be edited for 15 minutes.
const FINAL_ANSWER_WITHIN: Duration = Duration::from_secs(14 * 60);

#[cfg(test)]
mod tests {
    use twilight_model::guild::Permissions;

    use super::*;

    #[test]
    fn slash_the_command_set_parses_as_discord_commands() {
        let set: Vec<Command> = serde_json::from_value(command_set()).expect("commands");
        assert_eq!(set.len(), 1);
        let names: Vec<&str> = set[0].options.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["status", "memory", "voice", "quiet", "usage", "remind", "reminders", "timezone", "forget-me"]);
        assert_eq!(set_digest(&command_set()), set_digest(&command_set()));
    }

    #[test]
    fn slash_every_subcommand_takes_its_required_options_first() {
        for sub in command_set()[0]["options"].as_array().expect("subcommands") {
            let required: Vec<bool> =
                sub["options"].as_array().into_iter().flatten().map(|o| o["required"].as_bool().unwrap_or(false)).collect();
            assert!(required.windows(2).all(|w| w[0] || !w[1]), "{}: a required option after an optional one", sub["name"]);
        }
    }

    /// An INTERACTION_CREATE's `d` as Discord sends it for `/clankie <sub>` in a guild channel.
    fn slash_in_guild(sub: &str, options: Value, permissions: &str) -> Interaction {
        serde_json::from_value(json!({
            "id": "1300000000000000001", "application_id": "4242", "type": 2, "token": "itok", "version": 1,
            "guild_id": "100", "channel_id": "200", "channel": { "id": "200", "type": 0 },
            "authorizing_integration_owners": { "0": "100" }, "context": 0, "entitlements": [], "locale": "en-US",
            "app_permissions": "0",
            "member": {
                "user": { "id": "10042", "username": "ada", "discriminator": "0", "global_name": null, "avatar": null },
                "roles": [], "joined_at": null, "deaf": false, "mute": false, "flags": 0, "nick": null,
                "communication_disabled_until": null, "permissions": permissions,
            },
            "data": {
                "id": "77", "name": COMMAND, "type": 1,
                "options": [{ "name": sub, "type": 1, "options": options }],
            },
        }))
        .expect("an interaction")
    }

    #[test]
    fn slash_remind_reads_what_when_dm_and_every() {
        let options = json!([
            { "name": "what", "type": 3, "value": "call the venue" },
            { "name": "when", "type": 3, "value": "tomorrow 9:00" },
            { "name": "dm", "type": 5, "value": true },
            { "name": "every", "type": 3, "value": "0 0 19 * * FRI" },
        ]);
        let denied_sending = (Permissions::all() - Permissions::SEND_MESSAGES).bits();
        let request = request_of(&slash_in_guild("remind", options, &denied_sending.to_string())).expect("ours");
        assert_eq!(request.command, "remind");
        assert_eq!((request.user_id, request.guild_id, request.channel_id), (10042, Some(100), 200));
        assert_eq!(request.text, "call the venue");
        assert_eq!(request.when, "tomorrow 9:00");
        assert!(request.direct);
        assert_eq!(request.cron, "0 0 19 * * FRI");
        assert_eq!(request.member_permissions, Some(denied_sending));

        let plain = json!([{ "name": "what", "type": 3, "value": "tea" }, { "name": "when", "type": 3, "value": "in 10 minutes" }]);
        let request = request_of(&slash_in_guild("remind", plain, "0")).expect("ours");
        assert_eq!((request.direct, request.cron.as_str(), request.member_permissions), (false, "", Some(0)));

        let zone = json!([{ "name": "zone", "type": 3, "value": "Europe/Berlin" }]);
        let request = request_of(&slash_in_guild("timezone", zone, "2048")).expect("ours");
        assert_eq!((request.command.as_str(), request.time_zone.as_str()), ("timezone", "Europe/Berlin"));
    }

    #[test]
    fn slash_in_a_dm_has_no_member_permissions() {
        let interaction: Interaction = serde_json::from_value(json!({
            "id": "1300000000000000002", "application_id": "4242", "type": 2, "token": "itok", "version": 1,
            "channel_id": "900", "channel": { "id": "900", "type": 1 }, "authorizing_integration_owners": { "0": "0" },
            "context": 1, "entitlements": [], "locale": "en-US",
            "app_permissions": "0",
            "user": { "id": "10042", "username": "ada", "discriminator": "0", "global_name": null, "avatar": null },
            "data": { "id": "77", "name": COMMAND, "type": 1, "options": [{ "name": "reminders", "type": 1, "options": [] }] },
        }))
        .expect("an interaction");
        let request = request_of(&interaction).expect("ours");
        assert_eq!((request.command.as_str(), request.guild_id, request.member_permissions), ("reminders", None, None));
    }

    #[test]
    fn button_rows_hold_two_buttons_each_and_at_most_five_rows() {
        let buttons: Vec<v1::CommandButton> =
            (0..14).map(|i| v1::CommandButton { custom_id: format!("b{i}"), label: "x".into(), danger: i % 2 == 1 }).collect();
        let rows = components(&buttons);
        assert_eq!(rows.len(), 5);
        let json = serde_json::to_value(&rows).unwrap();
        assert_eq!(json[0]["components"].as_array().unwrap().len(), 2);
        assert_eq!(json[0]["components"][1]["style"], 4);
    }

    #[test]
    fn button_a_messages_rows_read_back_as_the_buttons_they_were_made_from() {
        let buttons: Vec<v1::CommandButton> =
            (0..6).map(|i| v1::CommandButton { custom_id: format!("b{i}"), label: format!("L{i}"), danger: i % 2 == 1 }).collect();
        assert_eq!(buttons_of(&components(&buttons)), buttons);
    }
}
