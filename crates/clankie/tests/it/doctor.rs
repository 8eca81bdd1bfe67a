//! `clankie doctor` against the loopback Discord set up as a real server can be: a wrong token,
//! Message Content off, a server he was never invited to, Send Messages denied in one channel,
//! Send Messages in Threads lacking server-wide, no owner, the model on Anthropic's wire, the
//! speech engines, the console's token, and all well. Each failure is a ✗ line with its fix,
//! and the exit code says whether all passed.

use std::time::{Duration, Instant};

use clankie_discord_loopback::permission::{BOT_INVITE_WITHOUT_THREADS, SEND_MESSAGES_IN_THREADS};
use clankie_discord_loopback::{BOT_ROLE, ChannelKind, ChannelSpec, GUILD_OWNER, LoopbackConfig, NewMessage, OverwriteSpec};
use clankie_model_standin::{Reply, Script};
use clankie_store::OwnerSettings;

use crate::chaos::{Cast, GENERAL};

/// The loopback's second text channel of the main guild.
const LOBBIES: u64 = 201;
/// A forum the threads test adds to the main guild.
const FORUM: u64 = 203;
/// Send Messages, as Discord numbers it.
const SEND_MESSAGES: u64 = 1 << 11;
/// A console token as `openssl rand -hex 16` makes one.
const CONSOLE_TOKEN: &str = "6f1d0c9a4b7e2f83a5c4d1e0b9f8a7c6";

/// `clankie doctor` against the cast, as a person's shell runs it, with `env` on top; its exit
/// status and what it printed.
async fn doctor(cast: &Cast, env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("CLANKIE_") || k.ends_with("BACKTRACE")) {
        cmd.env_remove(k);
    }
    cmd.arg("doctor")
        .env("CLANKIE_NATS_URL", cast.nats.url())
        .env("CLANKIE_DATABASE_URL", cast.db.url())
        .env("CLANKIE_STATE_DIR", cast.dir.path())
        .env("CLANKIE_DISCORD_API", cast.discord.addr().to_string())
        .env("CLANKIE_DISCORD_TOKEN", &cast.discord.config().token)
        .env("CLANKIE_MODEL_BASE_URL", cast.standin.base_url())
        // As in the console's own container, where its token is checked.
        .env("CLANKIE_CONSOLE_ADDR", "127.0.0.1:8790")
        .env("CLANKIE_CONSOLE_TOKEN", CONSOLE_TOKEN)
        .env("CLANKIE_DISCORD_GUILDS", "100")
        .env("CLANKIE_VOICE_ROOMS", "100:300")
        .env("CLANKIE_STT_BASE_URL", cast.standin.base_url())
        .env("CLANKIE_TTS_BASE_URL", cast.standin.base_url())
        .env("CLANKIE_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output()).await.expect("doctor finished within 60 s").unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("clankie doctor {env:?} (exit {:?}):\n{printed}", out.status.code());
    (out.status.success(), printed)
}

/// The lines of `printed` that failed, with their fix lines.
fn failed(printed: &str) -> Vec<&str> {
    printed.lines().filter(|l| l.starts_with('✗') || l.trim_start().starts_with("fix:")).collect()
}

/// The line `name` printed, ✓ or ✗.
fn line<'a>(printed: &'a str, name: &str) -> Vec<&'a str> {
    printed.lines().filter(|l| l.get(4..).is_some_and(|rest| rest.starts_with(&format!("{name}:")))).collect()
}

/// Sets the owner, as `clankie self settings --owner` does.
async fn owned_by(cast: &Cast, owner: u64, guilds: Vec<u64>) {
    let settings = cast.store.owner_settings().await.unwrap();
    cast.store.set_owner_settings(&OwnerSettings { owner_id: Some(owner), guilds, ..settings }).await.unwrap();
}

/// Waits until the gateway has registered the slash command (it does so when it starts).
async fn registered(cast: &Cast) {
    clankie_testkit::until("the slash command registered", Duration::from_secs(30), || cast.discord.registered_commands().0 > 0).await;
}

#[tokio::test]
async fn operator_doctor_all_well_every_line_passes_and_it_exits_0() {
    let cast = Cast::start(LoopbackConfig::default()).await;
    cast.standin.script(Script::any(Reply::text("OK")));
    owned_by(&cast, GUILD_OWNER, vec![]).await;
    let _gateway = cast.service("gateway", "gateway", None, &[]);
    registered(&cast).await;
    let (passed, printed) = doctor(&cast, &[]).await;
    assert!(passed, "doctor failed with everything well:\n{printed}");
    let lines: Vec<&str> = printed.lines().filter(|l| !l.starts_with("all ")).collect();
    assert!(lines.len() >= 8 && lines.iter().all(|l| l.starts_with('✓')), "a line is not ✓:\n{printed}");
    assert_eq!(line(&printed, "speech").len(), 2, "the two engines' lines:\n{printed}");
    for name in
        ["nats", "postgres", "owner", "token", "message content", "guilds", "permissions", "slash command", "model", "speech", "console"]
    {
        assert!(lines.iter().any(|l| l.starts_with(&format!("✓ {name}:"))), "no {name} line:\n{printed}");
    }
    // The checks are real: the same run without the gateway's command, or the console token, fails.
    let bare = Cast::start(LoopbackConfig::default()).await;
    let (passed, printed) = doctor(&bare, &[("CLANKIE_CONSOLE_TOKEN", "")]).await;
    assert!(!passed, "doctor passed with no command registered and no console token:\n{printed}");
    assert!(printed.contains("✗ slash command") && printed.contains("✗ console"), "{printed}");
}

#[tokio::test]
async fn operator_a_wrong_token_doctor_names_the_token_and_its_fix() {
    let cast = Cast::start(LoopbackConfig::default()).await;
    let (passed, printed) = doctor(&cast, &[("CLANKIE_DISCORD_TOKEN", "not-this-bots-token")]).await;
    assert!(!passed);
    let bad = failed(&printed);
    assert!(bad.iter().any(|l| l.starts_with("✗ token:") && l.contains("401")), "{printed}");
    assert!(bad.iter().any(|l| l.contains("fix:") && l.contains("Reset Token") && l.contains("CLANKIE_DISCORD_TOKEN")), "{printed}");
    assert!(!printed.contains("not-this-bots-token"), "the token was printed:\n{printed}");
}

#[tokio::test]
async fn operator_message_content_off_doctor_says_so_with_the_portal_switch() {
    let cast = Cast::start(LoopbackConfig { message_content_intent: false, ..Default::default() }).await;
    let (passed, printed) = doctor(&cast, &[]).await;
    assert!(!passed);
    assert!(printed.contains("✗ message content:") && printed.contains("4014"), "{printed}");
    assert!(printed.contains("Privileged Gateway Intents"), "{printed}");
    // Flipped in the portal (the loopback's control), the same check passes.
    cast.discord.set_message_content_intent(true);
    let (_, printed) = doctor(&cast, &[]).await;
    assert!(printed.contains("✓ message content:"), "{printed}");
}

#[tokio::test]
async fn operator_the_bot_not_in_a_configured_guild_doctor_prints_the_invite_url() {
    let cast = Cast::start(LoopbackConfig { absent_guilds: vec![clankie_discord_loopback::OTHER_GUILD], ..Default::default() }).await;
    let (passed, printed) = doctor(&cast, &[("CLANKIE_DISCORD_GUILDS", "100,110")]).await;
    assert!(!passed);
    let url = clankie_gateway::invite::invite_url(cast.discord.config().bot_user_id);
    assert!(printed.lines().any(|l| l.starts_with("✗ guilds:") && l.contains("110")), "{printed}");
    assert!(printed.contains(&url), "the invite URL {url} is not printed:\n{printed}");
    // Admitting only the server he is in, the guild check passes.
    let (_, printed) = doctor(&cast, &[]).await;
    assert!(printed.contains("✓ guilds:"), "{printed}");
}

/// Send Messages denied to him in #general: doctor names the channel and the permission, a
/// reply there is refused by Discord and settled `failed` with the permission's code (in the
/// trail), and a reply in #lobbies still posts at once.
#[tokio::test]
async fn operator_send_messages_denied_in_one_channel_is_named_by_doctor_and_fails_only_that_channels_reply() {
    let mut config = LoopbackConfig::default();
    let bot = config.bot_user_id;
    let general = config.channels.iter_mut().find(|c| c.id == GENERAL).unwrap();
    general.overwrites.push(OverwriteSpec { id: bot, member: true, allow: 0, deny: SEND_MESSAGES });
    let cast = Cast::start(config).await;
    let (passed, printed) = doctor(&cast, &[]).await;
    assert!(!passed);
    let line = printed.lines().find(|l| l.starts_with("✗ permissions:")).unwrap_or_else(|| panic!("no permissions line:\n{printed}"));
    assert!(line.contains("#general (200)") && line.contains("Send Messages"), "{line}");
    assert!(!printed.lines().any(|l| l.starts_with('✗') && l.contains("#lobbies")), "{printed}");

    let _gateway = cast.service("gateway", "gateway", None, &[]);
    let _captain = cast.service("captain", "captain", None, &[]);
    let console_addr = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).unwrap().to_string();
    let _console =
        cast.service("console", "console", None, &[("CLANKIE_CONSOLE_ADDR", &console_addr), ("CLANKIE_CONSOLE_TOKEN", "op-token")]);
    assert!(cast.discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");
    cast.standin.script(Script::any(Reply::text("Noted.")));
    let denied = cast.mention("ada", "can you hear me here?");
    let key = |id: u64| id.to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        let receipts = cast.store.receipts_for_delivery(&key(denied)).await.unwrap();
        if let Some(r) = receipts.into_iter().map(|s| s.receipt).find(|r| r.kind == "gateway.post_refused") {
            break r;
        }
        assert!(Instant::now() < deadline, "the refused reply left no receipt within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(refused.codes.get(..2), Some(&["missing_permissions".to_owned(), "needs_send_messages".to_owned()][..]), "{refused:?}");
    assert!(cast.discord.posts(GENERAL).is_empty(), "a post reached #general");

    // The next channel's reply is not held behind it, and the refused one is not retried.
    let asked = Instant::now();
    let next = cast.discord.user_message(clankie_discord_loopback::NewMessage {
        channel_id: LOBBIES,
        author: "ada".into(),
        content: "and here?".into(),
        mention: true,
        ..Default::default()
    });
    clankie_testkit::until("the reply in #lobbies", Duration::from_secs(15), || {
        cast.discord.posts(LOBBIES).iter().any(|p| p.reply_to == Some(next))
    })
    .await;
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(3), "the reply in #lobbies took {took:?}");
    println!(
        "operator: the reply in #lobbies posted {:?} after its message; #general's was refused with {:?}",
        asked.elapsed(),
        refused.codes
    );
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"))
        .args(["trail", &key(denied)])
        .env("CLANKIE_NATS_URL", cast.nats.url())
        .env("CLANKIE_DATABASE_URL", cast.db.url())
        .env("CLANKIE_STATE_DIR", cast.dir.path())
        .output()
        .await
        .unwrap();
    let trail = String::from_utf8_lossy(&out.stdout);
    assert!(trail.contains("gateway.post_refused") && trail.contains("\"reply\":\"failed\""), "clankie trail:\n{trail}");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rows: Vec<serde_json::Value> = reqwest::Client::new()
        .get(format!("http://{console_addr}/api/trail/{denied}"))
        .bearer_auth("op-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let settled = rows.iter().find(|r| r.get("outcome").is_some()).cloned().unwrap_or_default();
    assert_eq!(settled["reply"], "failed", "the console's trail: {rows:?}");
    assert!(settled["reply_codes"].to_string().contains("needs_send_messages"), "the console's trail: {rows:?}");
    println!("operator: the refused reply's trail row: {settled}");
    // Past the body's retry delay (1 s) and then some: Discord was asked once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(cast.discord.create_requests(GENERAL).len(), 1, "the refused reply was tried again");
}

/// A database a newer release migrated is named as such, not as one to migrate.
#[tokio::test]
async fn operator_a_database_newer_than_the_binary_is_named_by_doctor() {
    let cast = Cast::start(LoopbackConfig::default()).await;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (99990101000000, 'from a newer release', true, '\\x00', 0)",
    )
    .execute(cast.store.pool())
    .await
    .unwrap();
    let (passed, printed) = doctor(&cast, &[]).await;
    assert!(!passed);
    let line = printed.lines().find(|l| l.starts_with("✗ postgres:")).unwrap_or_else(|| panic!("{printed}"));
    assert!(line.contains("newer than this binary") && line.contains("99990101000000"), "{line}");
}

/// On Claude the model check speaks Anthropic's wire: `POST /v1/messages` with `x-api-key` and
/// `anthropic-version`, one token. The stand-in answers only that wire here, as Anthropic does;
/// the same stand-in asked over OpenAI's wire fails the check with its 404.
#[tokio::test]
async fn operator_doctor_against_the_anthropic_standin_with_its_chat_completions_route_off_passes_the_model_check() {
    let cast = Cast::start(LoopbackConfig::default()).await;
    cast.standin.set_chat_completions(false);
    let claude =
        [("CLANKIE_MODEL_PROVIDER", "anthropic"), ("CLANKIE_MODEL_NAME", "claude-standin"), ("CLANKIE_MODEL_API_KEY", "sk-ant-doctor")];
    let (_, printed) = doctor(&cast, &claude).await;
    let model = line(&printed, "model");
    assert!(model.len() == 1 && model[0].starts_with("✓ model:") && model[0].contains("Anthropic's Messages API"), "{printed}");
    let asked = cast.standin.requests();
    assert_eq!(asked.len(), 1, "one request reached the stand-in: {asked:?}");
    assert_eq!((asked[0].body["max_tokens"].as_u64(), asked[0].body["model"].as_str()), (Some(1), Some("claude-standin")));
    assert!(asked[0].bearer_token, "no x-api-key was sent");
    assert!(!printed.contains("sk-ant-doctor"), "the key was printed:\n{printed}");

    let (_, printed) = doctor(&cast, &[("CLANKIE_MODEL_PROVIDER", "openai")]).await;
    let model = line(&printed, "model");
    assert!(model.len() == 1 && model[0].starts_with("✗ model:") && model[0].contains("404"), "{printed}");
}

/// A voice room kept live with no speech engine set: the voice floor would hear with the
/// offline rehearsal engine, so doctor fails each missing engine and names its variable.
#[tokio::test]
async fn operator_doctor_fails_speech_with_a_voice_room_and_no_engine() {
    let cast = Cast::start(LoopbackConfig::default()).await;
    let (passed, printed) = doctor(&cast, &[("CLANKIE_STT_BASE_URL", ""), ("CLANKIE_TTS_BASE_URL", "")]).await;
    assert!(!passed);
    let speech = line(&printed, "speech");
    assert_eq!(speech.len(), 2, "{printed}");
    for (said, var) in speech.iter().zip(["CLANKIE_STT_BASE_URL", "CLANKIE_TTS_BASE_URL"]) {
        assert!(said.starts_with("✗ speech:") && said.contains("CLANKIE_VOICE_ROOMS"), "{printed}");
        assert!(printed.contains(&format!("fix: set {var}")), "no fix names {var}:\n{printed}");
    }
    // Without a voice room, no engine is needed.
    let (_, printed) = doctor(&cast, &[("CLANKIE_STT_BASE_URL", ""), ("CLANKIE_TTS_BASE_URL", ""), ("CLANKIE_VOICE_ROOMS", "")]).await;
    let speech = line(&printed, "speech");
    assert!(speech.len() == 1 && speech[0].starts_with("✓ speech:"), "{printed}");
}

/// A speech engine set at a URL where its route is not served (the base without its `/v1`)
/// answers 404: doctor fails it, as the voice floor would fail every utterance there.
#[tokio::test]
async fn operator_doctor_fails_a_speech_engine_answering_404() {
    let cast = Cast::start(LoopbackConfig::default()).await;
    let without_v1 = format!("http://{}", cast.standin.addr());
    let (passed, printed) = doctor(&cast, &[("CLANKIE_TTS_BASE_URL", &without_v1)]).await;
    assert!(!passed);
    let speech = line(&printed, "speech");
    assert!(speech.iter().any(|l| l.starts_with("✓ speech:") && l.contains("speech-to-text")), "{printed}");
    let tts = speech.iter().find(|l| l.contains("text-to-speech")).unwrap_or_else(|| panic!("no text-to-speech line:\n{printed}"));
    assert!(tts.starts_with("✗ speech:") && tts.contains("404") && tts.contains("/audio/speech"), "{printed}");
    assert!(printed.contains("correct CLANKIE_TTS_BASE_URL"), "{printed}");
}

/// The examples' `replace-me` as the console token fails where the console runs; in another
/// service's container (no CLANKIE_CONSOLE_ADDR, no token) the console is not checked.
#[tokio::test]
async fn operator_doctor_fails_a_placeholder_console_token() {
    let cast = Cast::start(LoopbackConfig::default()).await;
    let (passed, printed) = doctor(&cast, &[("CLANKIE_CONSOLE_TOKEN", "replace-me")]).await;
    assert!(!passed);
    let console = line(&printed, "console");
    assert!(console.len() == 1 && console[0].starts_with("✗ console:") && console[0].contains("placeholder"), "{printed}");
    assert!(!printed.contains("replace-me"), "the token was printed:\n{printed}");
    let (_, printed) = doctor(&cast, &[("CLANKIE_CONSOLE_ADDR", ""), ("CLANKIE_CONSOLE_TOKEN", "")]).await;
    let console = line(&printed, "console");
    assert!(console.len() == 1 && console[0].starts_with("✓ console:") && console[0].contains("not checked here"), "{printed}");
}

/// No owner: ✗ with the command that sets one. The owner's guilds are the ones checked (the
/// deprecated CLANKIE_DISCORD_GUILDS only when the owner admitted every guild).
#[tokio::test]
async fn operator_doctor_fails_an_unset_owner_and_checks_the_owners_guilds() {
    let cast = Cast::start(LoopbackConfig { absent_guilds: vec![clankie_discord_loopback::OTHER_GUILD], ..Default::default() }).await;
    let (passed, printed) = doctor(&cast, &[]).await;
    assert!(!passed);
    let owner = line(&printed, "owner");
    assert!(owner.len() == 1 && owner[0].starts_with("✗ owner:"), "{printed}");
    assert!(printed.contains("fix: `clankie self settings --owner <your Discord user id>`"), "{printed}");
    assert!(line(&printed, "guilds").iter().all(|l| l.starts_with("✓ guilds:")), "the deprecated list (100) holds: {printed}");

    owned_by(&cast, GUILD_OWNER, vec![100, clankie_discord_loopback::OTHER_GUILD]).await;
    let (_, printed) = doctor(&cast, &[]).await;
    assert!(line(&printed, "owner").iter().all(|l| l.starts_with("✓ owner:")), "{printed}");
    let guilds = line(&printed, "guilds");
    assert!(guilds.len() == 1 && guilds[0].starts_with("✗ guilds:") && guilds[0].contains("110"), "{printed}");
    assert!(guilds[0].contains("the owner settings"), "{printed}");
}

/// A server whose @everyone lacks Send Messages in Threads, the bot invited before the invite
/// asked for it: doctor names the permission in every text channel and the forum, and a reply
/// to a message in a thread is refused by Discord (50013) and settled `failed` with
/// `needs_send_messages_in_threads`, not `needs_send_messages`.
#[tokio::test]
async fn operator_a_server_whose_everyone_lacks_send_messages_in_threads() {
    let mut config = LoopbackConfig::default();
    config.channels.push(ChannelSpec { id: FORUM, name: "ideas".into(), kind: ChannelKind::Forum, ..Default::default() });
    for role in &mut config.roles {
        match role.id {
            100 => role.permissions &= !SEND_MESSAGES_IN_THREADS,
            BOT_ROLE => role.permissions = BOT_INVITE_WITHOUT_THREADS,
            _ => {}
        }
    }
    let cast = Cast::start(config).await;
    let (passed, printed) = doctor(&cast, &[]).await;
    assert!(!passed);
    let lacking: Vec<&str> =
        line(&printed, "permissions").into_iter().filter(|l| l.starts_with('✗') && l.contains("lacks Send Messages in Threads")).collect();
    for room in ["#general (200)", "#lobbies (201)", "#ideas (203)"] {
        assert!(lacking.iter().any(|l| l.contains(room)), "{room} is not named:\n{printed}");
    }
    assert!(printed.contains("allow Send Messages in Threads for him"), "{printed}");

    let _gateway = cast.service("gateway", "gateway", None, &[]);
    let _captain = cast.service("captain", "captain", None, &[]);
    assert!(cast.discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");
    cast.standin.script(Script::any(Reply::text("Answered in the thread.")));
    let thread = cast.discord.start_thread(GENERAL, None, "planning", false);
    let asked = cast.discord.user_message(NewMessage {
        channel_id: thread,
        author: "ada".into(),
        content: "can you hear me in here?".into(),
        mention: true,
        ..Default::default()
    });
    let delivery = asked.to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        let receipts = cast.store.receipts_for_delivery(&delivery).await.unwrap();
        if let Some(r) = receipts.into_iter().map(|s| s.receipt).find(|r| r.kind == "gateway.post_refused") {
            break r;
        }
        assert!(Instant::now() < deadline, "the refused thread reply left no receipt within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        refused.codes.get(..2),
        Some(&["missing_permissions".to_owned(), "needs_send_messages_in_threads".to_owned()][..]),
        "{refused:?}"
    );
    assert!(!refused.codes.iter().any(|c| c == "needs_send_messages"), "{refused:?}");
    assert!(cast.discord.posts(thread).is_empty(), "a post reached the thread");
    // The operator's view: `clankie trail` once the turn is settled.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (trail, settled) = loop {
        let out = cast.trail(&delivery).await;
        let trail = String::from_utf8_lossy(&out.stdout).into_owned();
        if let Some(settled) = trail.lines().find(|l| l.contains("\"outcome\"")).map(str::to_owned) {
            break (trail, settled);
        }
        assert!(Instant::now() < deadline, "the turn was not settled within 30 s:\n{trail}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(settled.contains("\"reply\":\"failed\"") && settled.contains("needs_send_messages_in_threads"), "clankie trail:\n{trail}");
    println!("operator: the refused thread reply's trail row: {settled}");
}
