//! The operator console against the whole stack, through headless Chromium: the lanes view
//! live, the tap, memory approval reaching a warm lane, console chat as a thread of the one
//! self, and the token in front of every route. Each view's screenshot is saved (into
//! `docs/console/` when `CLANKIE_UPDATE_SCREENSHOTS=1`).

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_proto::LaneKey;
use clankie_store::{MemoryStatus, Store};
use fantoccini::{Client, Locator};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::browser::{Driver, browser_on};
use super::{GENERAL, Rig};

/// The loopback's DM channel.
const DM: u64 = 900;

/// Waits until the page shows what `check` looks for.
async fn until(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn js(browser: &Client, script: &str) -> Value {
    browser.execute(script, vec![]).await.expect("script runs")
}

async fn js_text(browser: &Client, script: &str) -> String {
    js(browser, script).await.as_str().unwrap_or_default().to_owned()
}

async fn tab(browser: &Client, view: &str) {
    browser.find(Locator::Css(&format!(".tab[data-view={view}]"))).await.expect("the tab").click().await.expect("tab click");
}

/// Saves a screenshot of the page as `<view>.png`.
async fn shoot(browser: &Client, view: &str) {
    let png = browser.screenshot().await.expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let mut dirs = vec![std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console")];
    if std::env::var("CLANKIE_UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
        dirs.push(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/console"));
    }
    for dir in dirs {
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        std::fs::write(dir.join(format!("{view}.png")), &png).expect("screenshot written");
    }
}

async fn store(rig: &Rig) -> Store {
    Store::connect(&rig.settings.database_url).await.expect("store")
}

fn general() -> LaneKey {
    LaneKey::Room { guild: clankie_discord_loopback::LoopbackConfig::default().guild_id, channel: GENERAL }
}

/// The page, loaded once; `window.__once` tells a reload apart.
async fn console_page(rig: &Rig, driver: &Driver, profile: &clankie_testkit::TestDir) -> Client {
    let browser = browser_on(&rig.sandbox.console_url(), driver, profile).await;
    browser.wait().for_element(Locator::Id("lanes")).await.expect("the lanes view");
    js(&browser, "window.__once = 'first load'; return 1").await;
    browser
}

#[tokio::test]
async fn console_a_burst_shows_in_the_lanes_view_running_then_idle_replied_and_in_the_tap_within_2_s() {
    let rig = Rig::new().await;
    rig.standin.script(Script::any(Reply::Text {
        text: "One answer for the whole burst.".into(),
        chunk_chars: 4,
        chunk_delay_ms: 30,
        first_delay_ms: 1500,
        tail_delay_ms: 0,
    }));
    let driver = Driver::start().await;
    let profile = clankie_testkit::TestDir::new();
    let browser = console_page(&rig, &driver, &profile).await;

    tab(&browser, "tap").await;
    let subject = browser.find(Locator::Id("tap-subject")).await.unwrap();
    subject.clear().await.unwrap();
    subject.send_keys("clankie.ingress.>").await.unwrap();
    browser.find(Locator::Id("tap-start")).await.unwrap().click().await.unwrap();
    until("the tap is open", Duration::from_secs(10), async || {
        js_text(&browser, "return document.getElementById('tap-status').textContent").await.starts_with("tapping")
    })
    .await;
    tab(&browser, "lanes").await;

    let sent = tokio::time::Instant::now();
    let ids = [
        rig.say(GENERAL, "ada", "@Clankie are you there?"),
        rig.say(GENERAL, "bob", "@Clankie the lobby is full"),
        rig.say(GENERAL, "ada", "@Clankie anyone?"),
    ];
    let lane = general().to_string();
    let state = format!(
        "const r = document.querySelector('tr[data-lane=\"{lane}\"]'); \
         return r ? r.querySelector('.state').textContent + '|' + r.querySelector('.outcome').textContent : ''"
    );
    let (mut saw_running, mut tapped_in) = (false, None);
    let deadline = sent + Duration::from_secs(40);
    loop {
        let now = js_text(&browser, &state).await;
        saw_running |= now.starts_with("running");
        if tapped_in.is_none() {
            let tap = js_text(&browser, "return document.getElementById('tap-log').textContent").await;
            if ids.iter().all(|id| tap.contains(&format!("\"{id}\""))) {
                tapped_in = Some(sent.elapsed());
            }
        }
        if saw_running && now == "idle|replied" && tapped_in.is_some() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "lane row {now:?}, seen running {saw_running}, tapped {tapped_in:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let tapped_in = tapped_in.unwrap();
    assert!(tapped_in <= Duration::from_secs(2), "the tap showed the burst's ingress after {tapped_in:?}");
    assert_eq!(js_text(&browser, "return window.__once || ''").await, "first load", "the page was reloaded");
    assert_eq!(rig.sandbox.discord.posts(GENERAL).len(), 1, "one answer for the burst");
    eprintln!("console tap showed the burst's ingress after {} ms", tapped_in.as_millis());
    shoot(&browser, "lanes").await;
    tab(&browser, "tap").await;
    shoot(&browser, "tap").await;

    // The trail of the burst's first message, as a timeline.
    tab(&browser, "trail").await;
    browser.find(Locator::Id("trail-id")).await.unwrap().send_keys(&ids[0].to_string()).await.unwrap();
    browser.find(Locator::Id("trail-go")).await.unwrap().click().await.unwrap();
    until("the trail", Duration::from_secs(10), async || {
        js_text(&browser, "return document.getElementById('trail-out').textContent").await.contains("outcome: replied")
    })
    .await;
    let trail = js_text(&browser, "return document.getElementById('trail-out').textContent").await;
    for kind in ["gateway.ingress", "captain.admitted", "captain.run", "captain.turn"] {
        assert!(trail.contains(kind), "the trail lacks {kind}: {trail}");
    }
    assert!(!trail.contains("are you there"), "the trail shows words");
    shoot(&browser, "trail").await;

    // The remaining views render with what the stack holds.
    tab(&browser, "figures").await;
    until("the figures", Duration::from_secs(10), async || {
        js(&browser, "return document.querySelectorAll('#figures svg').length").await.as_u64() == Some(6)
    })
    .await;
    let turns = js_text(&browser, "return document.querySelector('#figures .chart div').textContent").await;
    assert!(turns.starts_with("turns: 1 in 24 h"), "figures: {turns}");
    let cached = js_text(&browser, "return document.querySelector('#figures .cached-share').textContent").await;
    assert!(cached.starts_with("cached input: ") && cached.contains(" tokens in 24 h ("), "figures: {cached}");
    shoot(&browser, "figures").await;

    let voice = rig.sandbox.discord.config().channels.iter().find(|c| c.voice).unwrap().id;
    rig.voice_live(voice, "ada").await;
    rig.standin.script(Script::when("spoken aloud", Reply::text("Hello, voice room.")));
    rig.say(voice, "ada", "clankie say hello");
    tab(&browser, "voice").await;
    until("the voice room with its floor decision", Duration::from_secs(15), async || {
        browser.find(Locator::Id("voice-refresh")).await.unwrap().click().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let text = js_text(&browser, "return document.getElementById('voice').textContent").await;
        text.contains("ada") && text.contains("he is in the channel") && text.contains("wake (")
    })
    .await;
    // The call's end-to-end encryption, as the voice floor's receipt says it (the sandbox's body has
    // no audio connection here; the voice floor's own dave_ test checks what it writes).
    let code = "123456789012345678901234567890";
    let kind = clankie_proto::ReceiptKind::new("voice.connection").unwrap();
    let receipt = clankie_proto::v1::Receipt::new(&kind, "voice-floor", "", clankie_bus::now_ms())
        .with_id("guild", rig.sandbox.discord.config().guild_id)
        .with_id("channel", voice)
        .with_code("dave")
        .with_count("dave_protocol_version", 1)
        .with_count("dave_epoch", 1)
        .with_id("dave_privacy_code", code);
    rig.bus().await.publish_receipt(&receipt).await.unwrap();
    until("the voice room's DAVE epoch and privacy code", Duration::from_secs(10), async || {
        browser.find(Locator::Id("voice-refresh")).await.unwrap().click().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let text = js_text(&browser, "return document.getElementById('voice').textContent").await;
        text.contains(&format!("end-to-end encrypted (DAVE v1), epoch 1, privacy code {code}"))
    })
    .await;
    shoot(&browser, "voice").await;

    let store = store(&rig).await;
    store
        .set_persona(&clankie_store::Persona { name: "Clankie".into(), speaking_style: "dry".into(), ..Default::default() })
        .await
        .unwrap();
    tab(&browser, "self").await;
    until("the persona view", Duration::from_secs(10), async || {
        js_text(&browser, "return document.getElementById('persona-version').textContent").await.starts_with("version 1")
    })
    .await;
    let style = browser.find(Locator::Id("persona-style")).await.unwrap();
    style.clear().await.unwrap();
    style.send_keys("dry, and brief").await.unwrap();
    browser.find(Locator::Id("persona-save")).await.unwrap().click().await.unwrap();
    until("the edit saved with its diff", Duration::from_secs(10), async || {
        js_text(&browser, "return document.getElementById('persona-diff').textContent")
            .await
            .contains("+   \"speaking_style\": \"dry, and brief\"")
    })
    .await;
    assert_eq!(store.persona().await.unwrap().speaking_style, "dry, and brief");
    assert_eq!(store.persona().await.unwrap().version, 2);
    shoot(&browser, "self").await;
    browser.close().await.unwrap();
}

#[tokio::test]
async fn console_approving_a_proposal_in_the_page_reaches_the_next_request_of_a_warm_lane() {
    let rig = Rig::new().await;
    let store = store(&rig).await;
    rig.standin.script(Script::any(Reply::text("hello ada")));
    let first = rig.say(GENERAL, "ada", "@Clankie hello");
    rig.wait_outcomes(GENERAL, &[first]).await;
    let fact = "The lobby opens at octarine.";
    let id = store.add_memory(fact, MemoryStatus::Proposed, &general().to_string()).await.unwrap();
    store.add_memory("Bob prefers tea.", MemoryStatus::Proposed, &general().to_string()).await.unwrap();

    let driver = Driver::start().await;
    let profile = clankie_testkit::TestDir::new();
    let browser = console_page(&rig, &driver, &profile).await;
    tab(&browser, "memory").await;
    let approve = browser.wait().for_element(Locator::Css(&format!("button.approve[data-id=\"{id}\"]"))).await.expect("the proposal");
    shoot(&browser, "memory").await;
    approve.click().await.unwrap();
    until("the approved fact listed", Duration::from_secs(10), async || {
        js_text(&browser, "return document.getElementById('approved').textContent").await.contains("octarine")
    })
    .await;
    assert!(store.memories(MemoryStatus::Approved, 10).await.unwrap().iter().any(|m| m.id == id));

    rig.standin.script(Script::any(Reply::text("at octarine")));
    let second = rig.say(GENERAL, "ada", "@Clankie when does the lobby open?");
    rig.wait_outcomes(GENERAL, &[second]).await;
    let last = rig.standin.requests().pop().unwrap();
    assert_eq!(last.messages()[0]["content"].as_str().unwrap().matches(fact).count(), 1, "the system prompt holds the approved memory");
    assert!(last.count("hello ada") >= 1, "the lane went on from its session");
    let cold: Vec<Option<String>> = sqlx::query_scalar("SELECT coalesce(flags->>'cold', 'false') FROM receipts WHERE kind = 'captain.run' ORDER BY id")
        .fetch_all(store.pool())
        .await
        .unwrap();
    assert_eq!(cold.last().cloned().flatten().as_deref(), Some("false"), "the second turn was warm: {cold:?}");
    browser.close().await.unwrap();
}

#[tokio::test]
async fn console_chat_is_answered_from_the_shared_assembly_and_holds_no_dm_content() {
    let rig = Rig::new().await;
    let store = store(&rig).await;
    store
        .set_owner_settings(&clankie_store::OwnerSettings {
            owner_id: Some(clankie_discord_loopback::Loopback::user_id("ada")),
            ..Default::default()
        })
        .await
        .unwrap();
    rig.standin.script(Script::any(Reply::text("kept between us")));
    let dm = rig.say(DM, "ada", "my locker code is quillfeather");
    rig.wait_outcomes(DM, &[dm]).await;
    let room = rig.say(GENERAL, "bob", "@Clankie morning");
    rig.wait_outcomes(GENERAL, &[room]).await;

    rig.standin.script(Script::any(Reply::text("All quiet in the rooms, boss.")));
    let driver = Driver::start().await;
    let profile = clankie_testkit::TestDir::new();
    let browser = console_page(&rig, &driver, &profile).await;
    tab(&browser, "chat").await;
    browser.find(Locator::Id("chat-text")).await.unwrap().send_keys("How are the rooms?").await.unwrap();
    browser.find(Locator::Id("chat-send")).await.unwrap().click().await.unwrap();
    until("his answer in the console", Duration::from_secs(30), async || {
        js_text(&browser, "return document.getElementById('chat-log').textContent").await.contains("All quiet in the rooms, boss.")
    })
    .await;
    shoot(&browser, "chat").await;
    // A reloaded page shows the thread it continues.
    browser.refresh().await.unwrap();
    tab(&browser, "chat").await;
    until("the thread after a reload", Duration::from_secs(10), async || {
        let log = js_text(&browser, "return document.getElementById('chat-log').textContent").await;
        log.contains("you: How are the rooms?") && log.contains("him: All quiet in the rooms, boss.")
    })
    .await;

    let request = rig.standin.requests().pop().unwrap();
    assert!(request.count("How are the rooms?") == 1, "the console line reached the model");
    let owner = clankie_discord_loopback::Loopback::user_id("ada");
    let lane = LaneKey::Console { owner };
    let selfhood =
        clankie_self::SelfSource::new(store.clone(), None, &rig.settings.bot_name, &rig.settings.bot_aliases, rig.settings.exchange_window);
    let expected = clankie_self::assemble(&selfhood.snapshot(&lane).await.unwrap(), &lane, clankie_self::Surface::Console);
    assert_eq!(request.messages()[0]["content"].as_str(), Some(expected.as_str()), "the console's system prompt is the one assembly");
    assert!(expected.contains("operator console"));
    assert_eq!(request.count("quillfeather"), 0, "the console thread was told a DM's words");
    assert!(!store.entries(&format!("rooms/{lane}")).await.unwrap().is_empty(), "the console thread keeps a session");
    // The console's line is in the bill, its own lane, counted from its receipt.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let usage = store.usage(clankie_store::Since::Days(1)).await.unwrap();
        if let Some(spent) = usage.lanes.iter().find(|l| l.what == lane.to_string()) {
            assert_eq!(spent.tokens.input, request.token_estimate as i64, "{usage:?}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the console's line never reached the bill: {usage:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    browser.close().await.unwrap();
}

/// The status code of one request to the console, with `auth` as its Authorization header.
async fn status(addr: std::net::SocketAddr, method: &str, path: &str, auth: Option<&str>) -> (u16, String) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("the console listens");
    let auth = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    let body = if method == "GET" { "" } else { "{}" };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: console\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    // Enough to read the status line (however busy the machine) and, for a refusal, the whole
    // short answer; an event stream never ends, so past the first bytes a pause ends the read.
    loop {
        let wait = if head.is_empty() { Duration::from_secs(30) } else { Duration::from_millis(500) };
        let Ok(Ok(n)) = tokio::time::timeout(wait, conn.read(&mut buf)).await else { break };
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let code = text.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("an HTTP status line");
    (code, text)
}

#[tokio::test]
async fn console_without_the_token_every_route_answers_401_and_no_data() {
    let rig = Rig::new().await;
    let (addr, token) = rig.sandbox.console.clone();
    let store = store(&rig).await;
    let proposal = store.add_memory("a fact", MemoryStatus::Proposed, "cli").await.unwrap();
    for (method, route) in clankie_console::ROUTES {
        let path = route.replace("{id}", &proposal.to_string());
        for auth in [None, Some("Bearer wrong-token".to_owned()), Some(format!("Basic {token}"))] {
            let (code, text) = status(addr, method, &path, auth.as_deref()).await;
            assert_eq!(code, 401, "{method} {path} with {auth:?} answered {code}");
            let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
            assert_eq!(body, "a console token is required\n", "{method} {path} gave data without the token");
        }
        let (code, _) = status(addr, method, &format!("{path}?token=wrong"), None).await;
        assert_eq!(code, 401, "{method} {path}?token=wrong answered {code}");
        // The same route with the token is served: the refusal is the token's doing.
        let (code, _) = status(addr, method, &path, Some(&format!("Bearer {token}"))).await;
        assert_ne!(code, 401, "{method} {path} refused the right token");
        let (code, _) = status(addr, method, &format!("{path}?token={token}"), None).await;
        assert_ne!(code, 401, "{method} {path}?token= refused the right token");
    }
    let (code, _) = status(addr, "GET", "/no/such/route", None).await;
    assert_eq!(code, 401, "an unknown route tells a stranger nothing either");
    // Even with the token, the tap reads only clankie's subjects, never NATS' own.
    for filter in ["%24JS.API.%3E", "%3E", "clankie..x"] {
        let (code, _) = status(addr, "GET", &format!("/api/tap?subject={filter}"), Some(&format!("Bearer {token}"))).await;
        assert_eq!(code, 400, "the tap took {filter}");
    }
}

#[tokio::test]
async fn erase_from_the_console_forgets_a_person_and_answers_what_it_removed() {
    let rig = Rig::new().await;
    let (addr, token) = rig.sandbox.console.clone();
    let store = store(&rig).await;
    rig.standin.script(Script::any(Reply::text("Noted.")));
    let said = rig.say(GENERAL, "ada", "@Clankie my nickname is quokkaface");
    rig.wait_outcomes(GENERAL, &[said]).await;
    // A fact proposed from her message (its provenance), approved.
    let fact = store.add_memory("Ada's nickname is quokkaface.", MemoryStatus::Approved, "cli").await.unwrap();
    sqlx::query("UPDATE self_memory SET proposed_for = $2 WHERE id = $1")
        .bind(fact)
        .bind(said.to_string())
        .execute(store.pool())
        .await
        .unwrap();
    let ada = rig.sandbox.discord.messages(GENERAL).into_iter().find(|m| m.id == said).unwrap().author_id;
    let held = || crate::entries_holding(&store, "quokkaface");
    assert!(held().await > 0, "ada's words were never stored, so erasing them proves nothing");
    assert!(store.memories(MemoryStatus::Approved, 10).await.unwrap().iter().any(|m| m.fact.contains("quokkaface")));

    let (code, _) = status(addr, "POST", &format!("/api/people/{ada}/forget"), None).await;
    assert_eq!(code, 401, "forgetting needs the token");
    let (code, text) = status(addr, "POST", &format!("/api/people/{ada}/forget"), Some(&format!("Bearer {token}"))).await;
    assert_eq!(code, 200, "{text}");
    let counts: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap_or_default()).expect("JSON counts");
    assert_eq!(
        (counts["lanes"].as_u64(), counts["messages"].as_u64(), counts["memories"].as_u64()),
        (Some(1), Some(1), Some(1)),
        "{counts}"
    );
    assert_eq!(held().await, 0, "ada's words are still stored");
    assert!(store.memories(MemoryStatus::Approved, 10).await.unwrap().iter().all(|m| !m.fact.contains("quokkaface")));
    let (code, _) = status(addr, "POST", "/api/people/not-a-number/forget", Some(&format!("Bearer {token}"))).await;
    assert_eq!(code, 400, "a bad id is refused");
}

#[tokio::test]
async fn settings_the_console_shows_the_values_it_runs_with_and_where_each_came_from_the_token_masked() {
    let rig = Rig::new().await;
    let (addr, token) = rig.sandbox.console.clone();
    let (code, text) = status(addr, "GET", "/api/config", Some(&format!("Bearer {token}"))).await;
    assert_eq!(code, 200, "{text}");
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    let rows: Vec<Value> = serde_json::from_str(body).expect("JSON rows");
    let row = |name: &str| rows.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("{name} missing: {body}")).clone();
    assert_eq!(row("CLANKIE_DATABASE_URL")["origin"], "environment", "{body}");
    assert_eq!(row("CLANKIE_SHUTDOWN_GRACE_MS")["origin"], "default", "{body}");
    assert!(rows.iter().all(|r| r["name"] != "CLANKIE_DISCORD_TOKEN"), "the console shows a setting it never reads");
    assert!(!body.contains(&token), "the console's token is shown");
}

#[tokio::test]
async fn console_lists_pending_reminders_without_private_words() {
    let rig = Rig::new().await;
    let (addr, token) = rig.sandbox.console.clone();
    let store = store(&rig).await;
    let guild = clankie_discord_loopback::LoopbackConfig::default().guild_id;
    let ada = clankie_discord_loopback::Loopback::user_id("ada");
    let soon = clankie_bus::now_ms() + 3_600_000;
    let room = clankie_store::StoredReminder {
        reminder_id: 1_234_567_890_123_456_789,
        lane: general().to_string(),
        guild_id: Some(guild),
        channel_id: GENERAL,
        asker_id: ada,
        text: "water the lobby fern".into(),
        due_at_ms: soon,
        time_zone: "Europe/Berlin".into(),
        created_at_ms: clankie_bus::now_ms(),
        ..Default::default()
    };
    let direct = clankie_store::StoredReminder {
        reminder_id: 1_234_567_890_123_456_790,
        text: "ring the dentist".into(),
        due_at_ms: soon + 60_000,
        direct: true,
        ..room.clone()
    };
    let dm = clankie_store::StoredReminder {
        reminder_id: 1_234_567_890_123_456_791,
        lane: LaneKey::Dm { channel: DM }.to_string(),
        guild_id: None,
        channel_id: DM,
        text: "take the quillfeather pills".into(),
        due_at_ms: 0,
        cron: "0 9 * * *".into(),
        ..room.clone()
    };
    for r in [&room, &direct, &dm] {
        assert_eq!(store.add_reminder(r, 0, 0).await.unwrap(), clankie_store::Added::New);
    }

    let (code, text) = status(addr, "GET", "/api/reminders", None).await;
    assert_eq!(code, 401, "the reminders were listed without the token: {text}");
    assert!(!text.contains("fern"), "a refusal held a reminder's words");
    let (code, text) = status(addr, "GET", "/api/reminders", Some(&format!("Bearer {token}"))).await;
    assert_eq!(code, 200, "{text}");
    let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap_or_default()).expect("JSON reminders");
    assert!(body["at_ms"].as_i64().is_some_and(|t| t > 0), "{body}");
    let listed = body["reminders"].as_array().expect("a list");
    let ids: Vec<&str> = listed.iter().filter_map(|r| r["reminder_id"].as_str()).collect();
    assert_eq!(ids, ["1234567890123456789", "1234567890123456790", "1234567890123456791"], "soonest first, the check-in last: {body}");
    assert_eq!(listed[0]["text"], "water the lobby fern", "a room's reminder shows its words");
    assert!(listed[1]["text"].is_null() && listed[2]["text"].is_null(), "a direct or DM reminder's words were shown: {body}");
    for words in ["dentist", "quillfeather"] {
        assert!(!body.to_string().contains(words), "the console listed private words {words:?}");
    }
    assert_eq!(listed[0]["asker_id"], ada.to_string());
    assert_eq!((listed[0]["lane"].as_str(), listed[0]["due_at_ms"].as_i64()), (Some(room.lane.as_str()), Some(soon)));
    assert_eq!((listed[1]["direct"].as_bool(), listed[0]["fired"].as_i64()), (Some(true), Some(0)));
    assert_eq!((listed[2]["cron"].as_str(), listed[2]["time_zone"].as_str()), (Some("0 9 * * *"), Some("Europe/Berlin")));
    assert_eq!(listed[2]["lane"], format!("dm:{DM}"));
    assert!(listed[2]["created_at_ms"].as_i64().is_some_and(|t| t > 0));

    // The page's Reminders view lists the same, with the private words left out.
    let driver = Driver::start().await;
    let profile = clankie_testkit::TestDir::new();
    let browser = console_page(&rig, &driver, &profile).await;
    tab(&browser, "reminders").await;
    until("the reminders listed", Duration::from_secs(10), async || {
        js(&browser, "return document.querySelectorAll('#reminders tr.reminder').length").await.as_u64() == Some(3)
    })
    .await;
    let shown = js_text(&browser, "return document.getElementById('reminders').textContent").await;
    assert!(shown.contains("water the lobby fern") && shown.contains("0 9 * * *") && shown.contains(&ada.to_string()), "{shown}");
    assert_eq!(shown.matches("(private)").count(), 2, "{shown}");
    assert!(!shown.contains("dentist") && !shown.contains("quillfeather"), "the page shows private words: {shown}");
    browser.close().await.unwrap();
}
