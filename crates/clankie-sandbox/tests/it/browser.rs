//! A person's view: headless Chromium, driven over WebDriver, chats in the sandbox page.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use fantoccini::{ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;

use super::{GENERAL, Rig};

/// chromedriver, killed when dropped: the browse tool's own, which starts it on a port it
/// picks itself and starts it again when that port was taken on IPv6.
pub(crate) struct Driver(#[allow(dead_code)] clankie_browser::Driver, u16);

impl Driver {
    pub(crate) async fn start() -> Driver {
        let driver = clankie_browser::Driver::start(std::path::Path::new("chromedriver"))
            .await
            .expect("chromedriver is installed (deploy/local/lib.sh installs chromium-driver) and listens");
        let port = driver.port();
        Driver(driver, port)
    }
}

#[tokio::test]
async fn a_person_chats_in_the_sandbox_and_sees_clankie_reply() {
    let rig = Rig::new().await;
    rig.standin.script(Script::any(Reply::Text {
        text: "Hello from the other side of the loopback!".into(),
        chunk_chars: 3,
        chunk_delay_ms: 40,
        first_delay_ms: 300,
        tail_delay_ms: 0,
    }));
    let driver = Driver::start().await;
    let profile = clankie_testkit::TestDir::new();
    let browser = browser_on(&rig.sandbox.url(), &driver, &profile).await;
    let author = browser.wait().for_element(Locator::Id("author")).await.unwrap();
    author.clear().await.unwrap();
    author.send_keys("ada").await.unwrap();
    let text = browser.find(Locator::Id("text")).await.unwrap();
    text.send_keys("@Clankie hello from the browser").await.unwrap();
    browser.find(Locator::Id("send")).await.unwrap().click().await.unwrap();

    // Clankie's reply appears on the page, and the message shows its outcome.
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !seen.contains("Hello from the other side") {
        assert!(tokio::time::Instant::now() < deadline, "no reply on the page; it shows: {seen}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        seen = browser.find(Locator::Id("log")).await.unwrap().text().await.unwrap();
    }
    let badge_deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let badges = browser.find_all(Locator::Css(".msg.user .badge.outcome")).await.unwrap();
        let mut texts = Vec::new();
        for b in &badges {
            texts.push(b.text().await.unwrap());
        }
        if texts.iter().any(|t| t == "replied") {
            break;
        }
        assert!(tokio::time::Instant::now() < badge_deadline, "no outcome badge: {texts:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let posts = rig.sandbox.discord.posts(GENERAL);
    assert_eq!(posts.len(), 1);
    assert!(seen.contains("ada"), "the person's own message shows: {seen}");

    let png = browser.screenshot().await.unwrap();
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("sandbox-reply.png");
    std::fs::write(&path, &png).unwrap();
    eprintln!("screenshot saved to {}", path.display());
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    browser.close().await.unwrap();
}

/// A headless Chromium session on the sandbox page.
pub(crate) async fn browser_on(url: &str, driver: &Driver, profile: &clankie_testkit::TestDir) -> fantoccini::Client {
    browser_with(url, driver, profile, &[]).await
}

/// A headless Chromium session on the sandbox page, with extra command-line switches.
pub(crate) async fn browser_with(url: &str, driver: &Driver, profile: &clankie_testkit::TestDir, extra: &[String]) -> fantoccini::Client {
    let mut args: Vec<String> = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1100,700",
        "--autoplay-policy=no-user-gesture-required",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    args.push(format!("--user-data-dir={}", profile.path().display()));
    args.extend(extra.iter().cloned());
    let mut caps = serde_json::Map::new();
    caps.insert("goog:chromeOptions".into(), serde_json::json!({ "binary": "/usr/bin/chromium", "args": args }));
    let browser = ClientBuilder::new(HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.1))
        .await
        .expect("a WebDriver session");
    browser.goto(url).await.unwrap();
    browser
}

/// Waits (30 s at most) until the voice panel's player holds his answer.
async fn his_answer_in_the_player(browser: &fantoccini::Client) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let src = browser.find(Locator::Css("audio#voice-audio")).await.unwrap().attr("src").await.unwrap().unwrap_or_default();
        if src.starts_with("data:audio/wav;base64,") {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "the player never got his answer");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn text_of(browser: &fantoccini::Client, id: &str) -> String {
    browser.find(Locator::Id(id)).await.unwrap().text().await.unwrap()
}

#[test]
fn voice_join_from_the_sandbox_page_a_person_enters_says_a_line_aloud_and_leaves() {
    // The embedded audio body trusts the loopback's voice CA as `clankie run` arranges it: the
    // variable names `<state>/voice/voice-ca.pem` before any thread exists, and the loopback
    // writes the file when it starts.
    let state = clankie_testkit::TestDir::new();
    // SAFETY: no other thread exists yet in this test process.
    unsafe { std::env::set_var("SSL_CERT_FILE", state.path().join("voice").join("voice-ca.pem")) };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let state_dir = state.path().display().to_string();
        let rig = Rig::with(&[("CLANKIE_STATE_DIR", state_dir.as_str())]).await;
        let bus = rig.bus().await;
        let receipts = clankie_testkit::record::<clankie_proto::v1::Receipt>(&bus, clankie_proto::Family::Receipt).await;
        let driver = Driver::start().await;
        let profile = clankie_testkit::TestDir::new();
        let browser = browser_on(&rig.sandbox.url(), &driver, &profile).await;
        let author = browser.wait().for_element(Locator::Id("author")).await.unwrap();
        author.clear().await.unwrap();
        author.send_keys("ada").await.unwrap();
        browser.wait().for_element(Locator::Css("button.room[data-channel=\"300\"]")).await.unwrap().click().await.unwrap();
        browser.find(Locator::Id("voice-join")).await.unwrap().click().await.unwrap();

        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let members = text_of(&browser, "voice-members").await;
            if members.contains("ada") && members.contains("audio connected") {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "the panel shows: {members}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(rig.sandbox.gateway.live_voice_channel(100), Some(300), "joining on the page made the room live");

        browser.find(Locator::Id("voice-line")).await.unwrap().send_keys("hello clankie, can you hear me").await.unwrap();
        browser.find(Locator::Id("voice-say")).await.unwrap().click().await.unwrap();
        let ada = clankie_discord_loopback::Loopback::user_id("ada").to_string();
        super::until("his body hearing ada", Duration::from_secs(20), || {
            receipts.all().iter().any(|r| r.kind == "voice.heard" && r.ids.get("speaker") == Some(&ada))
        })
        .await;
        // The line said on the page joined the offline grammar, so he understood it, answered, and
        // the panel's player has his answer.
        his_answer_in_the_player(&browser).await;
        let png = browser.screenshot().await.unwrap();
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("sandbox-voice.png");
        std::fs::write(&path, &png).unwrap();
        eprintln!("screenshot saved to {}", path.display());

        browser.find(Locator::Id("voice-leave")).await.unwrap().click().await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !text_of(&browser, "voice-members").await.contains("nobody") {
            assert!(tokio::time::Instant::now() < deadline, "ada is still shown in the channel");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        browser.close().await.unwrap();
    });
}

/// The sandbox page's microphone in Chromium, its capture a file (Chromium's fake audio device):
/// the words reach him through Whisper, and he answers aloud.
#[test]
fn open_speech_the_sandbox_microphone_in_chromium_reaches_him_and_he_answers_aloud() {
    let state = clankie_testkit::TestDir::new();
    // SAFETY: no other thread exists yet in this test process.
    unsafe { std::env::set_var("SSL_CERT_FILE", state.path().join("voice").join("voice-ca.pem")) };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let speech = tokio::task::spawn_blocking(|| clankie_stack::SpeechServer::start(&Default::default(), &mut |m| eprintln!("{m}")))
            .await
            .unwrap()
            .expect("the local speech service starts");
        let base = speech.base_url();
        let state_dir = state.path().display().to_string();
        let rig = Rig::with(&[
            ("CLANKIE_STATE_DIR", state_dir.as_str()),
            ("CLANKIE_STT_BASE_URL", base.as_str()),
            ("CLANKIE_TTS_BASE_URL", base.as_str()),
            ("CLANKIE_TURN_BASE_URL", base.as_str()),
        ])
        .await;
        rig.standin.script(clankie_model_standin::Script::when("spoken aloud", clankie_model_standin::Reply::text("Paris, of course.")));
        let bus = rig.bus().await;
        let transcripts = clankie_testkit::record::<clankie_proto::v1::Transcript>(&bus, clankie_proto::Family::VoiceTranscript).await;
        // What the fake microphone hears: the question, then silence.
        let question = "Clankie, what is the capital of France?";
        let piper = clankie_speech::openai::OpenAiSpeaker::new(&base, "piper", "joe", None, Duration::from_secs(30)).unwrap();
        let said = clankie_speech::TextToSpeech::synthesize(&piper, question).await.unwrap();
        let mut pcm = vec![0i16; said.rate as usize / 4];
        pcm.extend_from_slice(&said.pcm);
        pcm.extend(std::iter::repeat_n(0i16, said.rate as usize * 4));
        let capture = state.path().join("microphone.wav");
        std::fs::write(&capture, clankie_pcm::wav(&pcm, said.rate)).unwrap();
        let speech_ms = (said.pcm.len() as u64 * 1000) / u64::from(said.rate);

        let driver = Driver::start().await;
        let profile = clankie_testkit::TestDir::new();
        let fake = [
            "--use-fake-ui-for-media-stream".to_owned(),
            "--use-fake-device-for-media-stream".to_owned(),
            format!("--use-file-for-fake-audio-capture={}", capture.display()),
        ];
        let browser = browser_with(&rig.sandbox.url(), &driver, &profile, &fake).await;
        let author = browser.wait().for_element(Locator::Id("author")).await.unwrap();
        author.clear().await.unwrap();
        author.send_keys("ada").await.unwrap();
        browser.wait().for_element(Locator::Css("button.room[data-channel=\"300\"]")).await.unwrap().click().await.unwrap();
        browser.find(Locator::Id("voice-join")).await.unwrap().click().await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !text_of(&browser, "voice-members").await.contains("audio connected") {
            assert!(tokio::time::Instant::now() < deadline, "his audio never connected");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        browser.find(Locator::Id("voice-mic")).await.unwrap().click().await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !text_of(&browser, "voice-status").await.contains("microphone") {
            let status = text_of(&browser, "voice-status").await;
            assert!(tokio::time::Instant::now() < deadline, "the microphone never opened: {status}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Talk for as long as the question lasts, and a little more: the capture is a recording
        // the length of this wait, not a wait for a result.
        tokio::time::sleep(Duration::from_millis(speech_ms + 800)).await;
        browser.find(Locator::Id("voice-mic")).await.unwrap().click().await.unwrap();

        // The pause after his name may end a turn of its own ("Clankie." then the question): the
        // floor hears both, and the words are what matter here.
        let heard = || transcripts.all().iter().map(|t| t.text.to_lowercase()).collect::<Vec<_>>().join(" ");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !(heard().contains("capital") && heard().contains("france")) {
            assert!(tokio::time::Instant::now() < deadline, "the microphone's words were heard as {:?}", heard());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!(
            "open_speech: the microphone's question was heard as {} words in {} turn(s)",
            heard().split_whitespace().count(),
            transcripts.all().len()
        );
        his_answer_in_the_player(&browser).await;
        browser.close().await.unwrap();
        drop(speech);
    });
}

/// Clicks the `index`th of the `count` elements `xpath` finds (a message's actions: 0 reply, 1
/// start thread; a room). The page draws its log every 400 ms and its room list when a room
/// comes, so an element found just before a redraw is gone: it is found again.
async fn click_again(browser: &fantoccini::Client, xpath: &str, index: usize, count: usize) {
    for _ in 0..10 {
        let found = browser.find_all(Locator::XPath(xpath)).await.unwrap();
        assert_eq!(found.len(), count, "{xpath}");
        if found[index].click().await.is_ok() {
            return;
        }
    }
    panic!("{xpath} could not be clicked");
}

/// Waits (20 s at most) until `check` holds, reading the loopback between tries.
async fn until_page(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "the page never made {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The sandbox page does what a Discord client does with conversations: reply to a message,
/// start a thread from one, and post in a forum with tags; each reaches the loopback as
/// Discord would have it and he answers where it was written.
#[tokio::test]
async fn sandbox_page_a_person_replies_starts_a_thread_and_posts_in_a_forum() {
    let forum = clankie_discord_loopback::ChannelSpec {
        id: 260,
        name: "help-desk".into(),
        kind: clankie_discord_loopback::ChannelKind::Forum,
        tags: vec!["bug".into(), "question".into()],
        ..Default::default()
    };
    let rig = Rig::with_channels(&[], vec![forum]).await;
    let said = rig.say(GENERAL, "bob", "the raid is at nine");
    let driver = Driver::start().await;
    let profile = clankie_testkit::TestDir::new();
    let browser = browser_on(&rig.sandbox.url(), &driver, &profile).await;
    // The page knows ids as JavaScript numbers, which round a snowflake: the row is found by its words.
    let acts = "//div[contains(@class, 'msg')][div[@class = 'body' and text() = 'the raid is at nine']]//button[@class = 'act']";
    browser.wait().for_element(Locator::XPath(acts)).await.unwrap();
    click_again(&browser, acts, 0, 2).await;
    browser.find(Locator::Id("text")).await.unwrap().send_keys("@Clankie is that right?").await.unwrap();
    browser.find(Locator::Id("send")).await.unwrap().click().await.unwrap();
    until_page("a reply", || rig.sandbox.discord.messages(GENERAL).iter().any(|m| m.reply_to == Some(said) && m.author_name == "ada"))
        .await;
    // He answers her reply where she wrote it: in the channel, threaded onto her message.
    let hers = rig.sandbox.discord.messages(GENERAL).into_iter().find(|m| m.reply_to == Some(said) && m.author_name == "ada").unwrap();
    rig.wait_outcomes(GENERAL, &[hers.id]).await;
    assert_eq!(rig.outcome(GENERAL, hers.id).as_deref(), Some("replied"));
    let answers: Vec<_> = rig.sandbox.discord.posts(GENERAL).into_iter().filter(|p| p.reply_to == Some(hers.id)).collect();
    assert_eq!(answers.len(), 1, "one answer to her reply in the channel: {answers:?}");

    click_again(&browser, acts, 1, 2).await;
    browser.send_alert_text("raid plans").await.unwrap();
    browser.accept_alert().await.unwrap();
    until_page("a thread", || rig.sandbox.discord.thread(said).is_some_and(|t| t.name == "raid plans")).await;

    // The room list is drawn again when a room comes (the thread just started): found again too.
    let forum_room = "//button[contains(@class, 'room') and @data-channel = '260']";
    browser.wait().for_element(Locator::XPath(forum_room)).await.unwrap();
    click_again(&browser, forum_room, 0, 1).await;
    browser.wait().for_element(Locator::Css("#forum.shown #post-title")).await.unwrap().send_keys("Crash at login").await.unwrap();
    browser.find(Locator::Id("post-tags")).await.unwrap().send_keys("bug").await.unwrap();
    browser.find(Locator::Id("post-text")).await.unwrap().send_keys("@Clankie it crashes when I log in").await.unwrap();
    browser.find(Locator::Css("#forum button")).await.unwrap().click().await.unwrap();
    until_page("a forum post", || rig.sandbox.discord.threads().iter().any(|t| t.parent == 260 && t.name == "Crash at login")).await;
    let post = rig.sandbox.discord.threads().into_iter().find(|t| t.parent == 260).expect("the post");
    rig.wait_outcomes(post.id, &[post.id]).await;
    assert_eq!(rig.outcome(post.id, post.id).as_deref(), Some("replied"), "answered in the post's thread");
    assert_eq!(rig.sandbox.discord.posts(post.id).len(), 1, "his answer is in the post's thread");
    assert!(rig.sandbox.discord.posts(260).is_empty() && rig.sandbox.discord.posts(said).is_empty(), "an answer went elsewhere");
    browser.close().await.unwrap();
}

/// The sandbox page's Reminders panel: `/clankie reminders` run as the page's person, its answer
/// and Cancel buttons shown, and a press cancelling the reminder it names.
#[tokio::test]
async fn sandbox_page_shows_pending_reminders() {
    let rig = Rig::new().await;
    let when = serde_json::json!("in 2 hours");
    let what = serde_json::json!("water the lobby fern");
    let set = super::interactions::run(&rig, GENERAL, "ada", "remind", &[("when", when), ("what", what)]).await;
    let store = clankie_store::Store::connect(&rig.settings.database_url).await.unwrap();
    let pending = store.pending_reminders(None).await.unwrap();
    assert_eq!(pending.len(), 1, "the reminder was not set: {}", set.content);
    let id = pending[0].reminder_id;

    let driver = Driver::start().await;
    let profile = clankie_testkit::TestDir::new();
    let browser = browser_on(&rig.sandbox.url(), &driver, &profile).await;
    browser.wait().for_element(Locator::Css("button.room.active")).await.expect("a room chosen");
    browser.find(Locator::Id("reminders-open")).await.unwrap().click().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut shown = String::new();
    while !shown.contains("water the lobby fern") {
        assert!(tokio::time::Instant::now() < deadline, "the panel shows: {shown:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        shown = text_of(&browser, "reminders-text").await;
    }
    assert!(shown.contains(&id.to_string()), "the panel does not name reminder {id}: {shown}");
    let cancel = browser.find(Locator::Css(&format!("#reminders-buttons button[data-custom-id=\"reminder:cancel:{id}\"]"))).await;
    cancel.expect("its Cancel button").click().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !text_of(&browser, "reminders-text").await.contains("cancelled") {
        assert!(tokio::time::Instant::now() < deadline, "the press was not answered: {}", text_of(&browser, "reminders-text").await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(store.pending_reminders(None).await.unwrap().is_empty(), "the press on the page did not cancel it");
    assert!(browser.find_all(Locator::Css("#reminders-buttons button")).await.unwrap().is_empty(), "its Cancel button stayed");
    browser.close().await.unwrap();
}
