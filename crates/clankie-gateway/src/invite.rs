//! What he asks a server for when he is invited: the permissions the code uses, each with why
//! and where, and the invite URL built from them and the application's id.

use std::time::Duration;

use twilight_model::guild::Permissions;

use crate::rest::budget::RestBudget;
use crate::rest::client::build;
use crate::state::Gateway;

/// One permission he needs: its name in Discord's server settings, what for, and the code that
/// needs it (a file of the workspace and a call in it, which a test finds there).
#[derive(Debug, Clone, Copy)]
pub struct Need {
    pub permission: Permissions,
    pub name: &'static str,
    pub why: &'static str,
    pub file: &'static str,
    pub uses: &'static str,
}

/// Every permission he uses, and no other: the invite asks for exactly these.
pub static NEEDS: &[Need] = &[
    Need {
        permission: Permissions::VIEW_CHANNEL,
        name: "View Channels",
        why: "see the rooms he is admitted to and the messages in them",
        file: "crates/clankie-gateway/src/shard/socket.rs",
        uses: "Intents::GUILD_MESSAGES",
    },
    Need {
        permission: Permissions::SEND_MESSAGES,
        name: "Send Messages",
        why: "post his replies and show that he is typing",
        file: "crates/clankie-gateway/src/body/post.rs",
        uses: "create_message(channel)",
    },
    Need {
        permission: Permissions::SEND_MESSAGES_IN_THREADS,
        name: "Send Messages in Threads",
        why: "answer in threads and forum posts (Send Messages does not reach them)",
        file: "crates/clankie-gateway/src/body/post.rs",
        uses: "needs_send_messages_in_threads",
    },
    Need {
        permission: Permissions::READ_MESSAGE_HISTORY,
        name: "Read Message History",
        why: "read a room's recent messages into a lane (its history block)",
        file: "crates/clankie-gateway/src/body/history.rs",
        uses: "channel_messages(channel)",
    },
    Need {
        permission: Permissions::ATTACH_FILES,
        name: "Attach Files",
        why: "share a picture with a reply (share_picture)",
        file: "crates/clankie-gateway/src/body/post.rs",
        uses: "request.attachments(&files)",
    },
    Need {
        permission: Permissions::ADD_REACTIONS,
        name: "Add Reactions",
        why: "show each message's outcome as a reaction (CLANKIE_OUTCOME_REACTIONS)",
        file: "crates/clankie-gateway/src/body/reactions.rs",
        uses: "create_reaction(channel, message, &emoji)",
    },
    Need {
        permission: Permissions::CONNECT,
        name: "Connect",
        why: "join the voice rooms he keeps live (CLANKIE_VOICE_ROOMS)",
        file: "crates/clankie-gateway/src/voice.rs",
        uses: "UpdateVoiceState::new(guild, channel",
    },
    Need {
        permission: Permissions::SPEAK,
        name: "Speak",
        why: "talk in them",
        file: "crates/clankie-voice-body/src/speaking.rs",
        uses: "driver.play_input(input)",
    },
];

/// The permissions an invite asks for: every one in [`NEEDS`].
pub fn permissions() -> Permissions {
    NEEDS.iter().fold(Permissions::empty(), |all, need| all | need.permission)
}

/// The OAuth2 scopes an invite asks for: the bot itself and its `/clankie` command.
pub const SCOPES: &str = "bot applications.commands";

/// The URL that invites application `application_id` to a server the person picks, with the
/// permissions in [`NEEDS`].
pub fn invite_url(application_id: u64) -> String {
    format!(
        "https://discord.com/oauth2/authorize?client_id={application_id}&scope={}&permissions={}",
        SCOPES.replace(' ', "%20"),
        permissions().bits()
    )
}

/// Why the application could not be read from Discord.
#[derive(Debug, thiserror::Error)]
pub enum InviteError {
    #[error(
        "Discord refused the token (401): copy the bot's token again from the Developer Portal (your application, Bot, Reset Token) into CLANKIE_DISCORD_TOKEN"
    )]
    Unauthorized,
    /// No answer at all: the network, not the token.
    #[error("{at} could not be reached ({cause}): {}", unreachable_fix(*.stand_in))]
    Unreachable { at: String, cause: String, stand_in: bool },
    #[error("reading the application from Discord: {0}")]
    Discord(String),
}

/// What to do when `api` (a stand-in's host:port, or Discord itself) gave no answer at all.
pub(crate) fn unreachable_fix(stand_in: bool) -> &'static str {
    if stand_in {
        "start the stand-in CLANKIE_DISCORD_API names (`clankie loopback`), or unset CLANKIE_DISCORD_API for Discord itself"
    } else {
        "check this machine reaches https://discord.com (DNS, a firewall, an HTTPS proxy in HTTPS_PROXY), then run it again; in a container, run it where the gateway runs (`docker compose run --rm gateway clankie invite`)"
    }
}

/// Whether `e` is no answer at all (refused, timed out, cut off), rather than Discord's answer.
pub(crate) fn unanswered(e: &twilight_http::Error) -> bool {
    use twilight_http::error::ErrorType;
    matches!(e.kind(), ErrorType::RequestError | ErrorType::RequestTimedOut | ErrorType::RequestCanceled)
}

/// The innermost cause of `e` (such as "Connection refused"), which twilight's own words omit.
pub(crate) fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

/// Where the API is, as the person configured it.
pub(crate) fn api_name(api: Option<&str>) -> String {
    api.map_or_else(|| "Discord (discord.com)".to_owned(), |a| format!("the Discord API at {a}"))
}

/// The id of the application whose bot `token` is (`GET /applications/@me`), asked of `api`
/// (a stand-in's host:port) or of Discord itself.
pub async fn application_id(token: &str, api: Option<&str>) -> Result<u64, InviteError> {
    let client = build(token, api);
    let failed = |e: twilight_http::Error| match e.kind() {
        twilight_http::error::ErrorType::Response { status, .. } if status.get() == 401 => InviteError::Unauthorized,
        _ if unanswered(&e) => InviteError::Unreachable { at: api_name(api), cause: root_cause(&e), stand_in: api.is_some() },
        _ => InviteError::Discord(e.to_string()),
    };
    let response = client.current_user_application().await.map_err(failed)?;
    let application = response.model().await.map_err(|e| InviteError::Discord(e.to_string()))?;
    Ok(application.id.get())
}

/// Every server the bot is in, read 200 at a time as Discord pages them.
pub(crate) async fn guilds_of(client: &twilight_http::Client) -> Result<Vec<twilight_model::user::CurrentUserGuild>, String> {
    guilds_paced(client, None).await
}

/// [`guilds_of`], each page's request taking its place in `budget` first (giving way to replies).
async fn guilds_paced(
    client: &twilight_http::Client,
    budget: Option<&RestBudget>,
) -> Result<Vec<twilight_model::user::CurrentUserGuild>, String> {
    let mut all: Vec<twilight_model::user::CurrentUserGuild> = Vec::new();
    loop {
        let mut request = client.current_user_guilds().limit(200);
        if let Some(last) = all.last() {
            request = request.after(last.id);
        }
        let _slot = match budget {
            Some(b) => Some(b.give_way(INVITE_GIVES_WAY).await),
            None => None,
        };
        let page = request.await.map_err(|e| e.to_string())?.models().await.map_err(|e| e.to_string())?;
        let full = page.len() == 200;
        all.extend(page);
        if !full {
            return Ok(all);
        }
    }
}

/// How long the start's invite check waits for replies to leave room in the REST budget.
const INVITE_GIVES_WAY: Duration = Duration::from_secs(5);

/// Whether he is missing from where he is meant to be: in no server, or not in one of `admitted`.
fn absent(guilds: &[twilight_model::user::CurrentUserGuild], admitted: &[u64]) -> bool {
    guilds.is_empty() || admitted.iter().any(|g| !guilds.iter().any(|have| have.id.get() == *g))
}

impl Gateway {
    /// Logs the invite URL while he is missing from a server he is meant for: once per
    /// process, from its first REST tenure (one replica speaks REST, so one says it), after
    /// Discord took the token (a refused token is presented once, by `/gateway/bot`), each
    /// request in the REST budget behind replies.
    pub(crate) async fn say_invite(self) {
        let mut accepted = self.token_accepted();
        if accepted.wait_for(|a| *a).await.is_err() {
            return;
        }
        let (budget, http) = (self.budget(), self.http());
        let application = {
            let _slot = budget.give_way(INVITE_GIVES_WAY).await;
            if !self.speaks_rest() {
                return;
            }
            match http.current_user_application().await {
                Ok(response) => response.model().await.ok(),
                Err(_) => None,
            }
        };
        let Some(application) = application else { return };
        let Ok(guilds) = guilds_paced(&http, Some(budget)).await else { return };
        if absent(&guilds, &self.config().guilds) {
            let url = invite_url(application.id.get());
            tracing::warn!(%url, "he is not in every server he is meant for yet: open this invite URL as someone who manages the server (`clankie doctor` checks the rest)");
        }
    }
}

/// The invite URL when he is in no server yet, or not in one of `admitted`
/// (`CLANKIE_DISCORD_GUILDS`): what a first start prints so the person can invite him. `None`
/// when he is everywhere he should be, or Discord could not be asked (the shards say why).
pub async fn wanted_invite(token: &str, api: Option<&str>, admitted: &[u64]) -> Option<String> {
    let client = build(token, api);
    let application = client.current_user_application().await.ok()?.model().await.ok()?;
    let guilds = guilds_of(&client).await.ok()?;
    absent(&guilds, admitted).then(|| invite_url(application.id.get()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file's code: its comments and its test module left out, so a use that only a comment
    /// or a test mentions is no use.
    fn code_only(source: &str) -> String {
        let before_tests = source.split("#[cfg(test)]").next().unwrap_or_default();
        before_tests
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .map(|l| match l.find(" // ") {
                Some(at) => &l[..at],
                None => l,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn operator_the_invite_code_only_leaves_out_comments_and_tests() {
        let source =
            "let a = 1; // create_message(channel)\n/// needs create_reaction(x)\nfn f() { play() }\n#[cfg(test)]\nmod t { join() }";
        let code = code_only(source);
        assert!(code.contains("play()") && code.contains("let a = 1;"));
        assert!(!code.contains("create_message") && !code.contains("create_reaction") && !code.contains("join()"), "{code}");
    }

    #[test]
    fn operator_the_invite_asks_for_exactly_the_permissions_listed_each_used_where_it_says() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut seen = Permissions::empty();
        for need in NEEDS {
            assert_eq!(need.permission.bits().count_ones(), 1, "{} is one permission", need.name);
            assert!(!seen.contains(need.permission), "{} is listed twice", need.name);
            seen |= need.permission;
            let source = std::fs::read_to_string(root.join(need.file)).unwrap_or_else(|e| panic!("{}: {e}", need.file));
            let code = code_only(&source);
            assert!(
                code.contains(need.uses),
                "{} is needed for `{}` in {}, whose code (not its comments or tests) lacks it",
                need.name,
                need.uses,
                need.file
            );
        }
        assert_eq!(permissions(), seen);
        let url = invite_url(42);
        let asked: u64 = url.rsplit_once("permissions=").and_then(|(_, p)| p.parse().ok()).unwrap();
        assert_eq!(Permissions::from_bits_truncate(asked), seen, "{url}");
        assert!(url.starts_with("https://discord.com/oauth2/authorize?client_id=42&scope=bot%20applications.commands&"), "{url}");
        // View, Send, Send in Threads, Read History, Attach, Add Reactions, Connect, Speak.
        assert_eq!(asked, 1024 | 2048 | (1 << 38) | 65536 | 32768 | 64 | 1_048_576 | 2_097_152, "{url}");
    }
}
