//! The `browse` tool through the whole stack, with real Chromium: the test serves its own
//! pages on loopback and puts only them on the allow list.

use std::time::Duration;

use clankie_model_standin::{Reply, Script};
use clankie_proto::{Family, v1};
use clankie_testkit::pages::{Answer, TestPages};

use super::{GENERAL, Rig, until};

const LOBBIES: u64 = 201;
const PHRASE: &str = "Kestrel bracket opens at nine";

async fn pages() -> TestPages {
    let page = Answer::html(format!("<!doctype html><html><head><title>Bracket</title></head><body><h1>{PHRASE}</h1></body></html>"));
    let slow = Answer::Html { body: format!("<h1>{PHRASE}</h1>"), delay: Duration::from_secs(1) };
    TestPages::start("127.0.0.1", vec![("/bracket", page), ("/slow", slow), ("/forever", Answer::Hang)]).await.unwrap()
}

async fn rig(pages: &TestPages, extra: &[(&str, &str)]) -> Rig {
    let allow = pages.addr().to_string();
    let mut vars: Vec<(&str, &str)> =
        vec![("CLANKIE_EGRESS_ALLOW", &allow), ("CLANKIE_BROWSER_VIEWPORT", "800x600"), ("CLANKIE_BROWSE", "on")];
    vars.extend_from_slice(extra);
    Rig::with(&vars).await
}

fn browse(url: &str, screenshot: bool) -> Reply {
    Reply::tool("browse", serde_json::json!({ "url": url, "screenshot": screenshot }))
}

#[tokio::test]
async fn browse_with_a_screenshot_posts_the_reply_with_the_picture() {
    let pages = pages().await;
    let rig = rig(&pages, &[]).await;
    let sent = clankie_testkit::record::<v1::OutboundMessage>(&rig.bus().await, Family::BodySend).await;
    // Each script bound to the request it answers: the turn's first call browses, the call that
    // read the page answers (another request of the stack must not take the browse).
    rig.standin.script(Script::when("show me the bracket page", browse(&pages.url("/bracket"), true)));
    rig.standin.script(Script::when("<untrusted_page url=", Reply::text("Here is the bracket page.")));
    let asked = rig.say(GENERAL, "ada", "@Clankie show me the bracket page");
    rig.wait_outcomes(GENERAL, &[asked]).await;
    assert_eq!(rig.outcome(GENERAL, asked).as_deref(), Some("replied"));

    // The outcome reaction can land before the reply, whose picture is uploaded with it.
    until("the reply", Duration::from_secs(20), || rig.sandbox.discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(asked))).await;
    let posts = rig.sandbox.discord.posts(GENERAL);
    let reply = posts.iter().find(|p| p.reply_to == Some(asked) && p.content == "Here is the bracket page.").expect("the reply");
    let asked_of_model: Vec<(usize, bool)> =
        rig.standin.requests().iter().map(|r| (r.count("show me the bracket page"), r.count("<untrusted_page url=") > 0)).collect();
    assert_eq!(reply.attachments, ["127.0.0.1.png"], "the picture rides the reply (model requests: {asked_of_model:?})");
    // The tool result the model read: the phrase, inside an untrusted block.
    let second = &rig.standin.requests()[1];
    let text = second.all_text();
    let block = text.split("<untrusted_page url=").nth(1).expect("an untrusted page block").split("</untrusted_page>").next().unwrap();
    assert!(block.contains(PHRASE), "{block}");
    // The picture is the configured viewport.
    let artifact = sent.all().into_iter().find(|m| m.kind == v1::OutboundKind::Reply as i32).unwrap().artifacts[0].id.clone();
    let (path, _) = clankie_media::Root::open(rig.attachment_root.clone()).unwrap().resolve(&artifact, u64::MAX).unwrap();
    assert_eq!(clankie_browser::png_size(&std::fs::read(path).unwrap()), Some((800, 600)));
    // While it worked, the tool card named what it was doing.
    let card = sent.all().into_iter().find(|m| m.kind == v1::OutboundKind::ToolCard as i32).expect("a tool card while it browsed");
    assert_eq!(card.tool_names, ["browsing 127.0.0.1"]);
}

#[tokio::test]
async fn browse_whose_screenshot_cannot_be_saved_posts_the_words_with_a_note() {
    let pages = pages().await;
    let rig = rig(&pages, &[]).await;
    // Where media keeps its blobs there is a plain file: the write itself fails.
    let blobs = rig.attachment_root.join("sha256");
    if blobs.is_dir() {
        std::fs::remove_dir_all(&blobs).unwrap();
    }
    std::fs::write(&blobs, b"not a directory").unwrap();
    rig.standin.script(Script::any(browse(&pages.url("/bracket"), true)));
    rig.standin.script(Script::any(Reply::text("The bracket opens at nine.")));
    let asked = rig.say(GENERAL, "ada", "@Clankie screenshot the bracket");
    rig.wait_outcomes(GENERAL, &[asked]).await;
    assert_eq!(rig.outcome(GENERAL, asked).as_deref(), Some("replied"));
    until("the reply", Duration::from_secs(20), || rig.sandbox.discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(asked))).await;
    let posts = rig.sandbox.discord.posts(GENERAL);
    let reply = posts.iter().find(|p| p.reply_to == Some(asked) && p.content.starts_with("The bracket opens at nine.")).expect("the words");
    assert_eq!(reply.content, "The bracket opens at nine.\n(I couldn't attach the screenshot of 127.0.0.1: it could not be saved.)");
    assert!(reply.attachments.is_empty());
    assert_eq!(rig.standin.requests()[1].count("The screenshot could not be saved (io)"), 1, "the model was told");
}

#[tokio::test]
async fn browse_of_a_refused_address_is_a_tool_error_and_the_turn_answers() {
    let pages = pages().await;
    let private = TestPages::start("127.0.0.2", vec![("/admin", Answer::html("internal"))]).await.unwrap();
    let rig = rig(&pages, &[]).await;
    rig.standin.script(Script::any(browse(&private.url("/admin"), true)));
    rig.standin.script(Script::any(Reply::text("I can't open that one.")));
    let asked = rig.say(GENERAL, "ada", "@Clankie open the admin page");
    rig.wait_outcomes(GENERAL, &[asked]).await;
    assert_eq!(rig.outcome(GENERAL, asked).as_deref(), Some("replied"));
    assert_eq!(private.all_hits(), 0, "no browser went there");
    assert_eq!(rig.standin.requests()[1].count("that page is not opened"), 1, "a tool error the model read");
    until("the reply", Duration::from_secs(20), || {
        rig.sandbox.discord.posts(GENERAL).iter().any(|p| p.content == "I can't open that one.")
    })
    .await;
}

#[tokio::test]
async fn browse_of_a_page_that_never_loads_is_a_tool_error_not_a_stall() {
    let pages = pages().await;
    // The browse deadline is longer than the stall silence: only the browse's signs of life keep
    // the run alive. The silence outlasts Chromium's start on a loaded 2-core machine (1.5 s did not).
    let rig = rig(&pages, &[("CLANKIE_BROWSE_DEADLINE_MS", "7000"), ("CLANKIE_STALL_SILENCE_MS", "3000")]).await;
    rig.standin.script(Script::any(browse(&pages.url("/forever"), false)));
    rig.standin.script(Script::any(Reply::text("That page never finished loading.")));
    let asked = rig.say(GENERAL, "ada", "@Clankie read the forever page");
    rig.wait_outcomes(GENERAL, &[asked]).await;
    assert_eq!(rig.outcome(GENERAL, asked).as_deref(), Some("replied"), "the run was not marked stalled");
    assert_eq!(rig.standin.requests()[1].count("did not finish loading within 7 s"), 1);
    assert_eq!(pages.hits("/forever"), 1);
}

#[tokio::test]
async fn browse_by_two_turns_with_one_browser_runs_them_one_after_the_other() {
    let pages = pages().await;
    let rig = rig(&pages, &[("CLANKIE_BROWSERS_MAX", "1")]).await;
    rig.standin.script(Script::when("first room", browse(&pages.url("/slow"), false)));
    rig.standin.script(Script::when("second room", browse(&pages.url("/slow"), false)));
    rig.standin.script(Script::any(Reply::text("Read it.")));
    rig.standin.script(Script::any(Reply::text("Read it.")));
    let a = rig.say(GENERAL, "ada", "@Clankie first room: read the slow page");
    let b = rig.say(LOBBIES, "bob", "@Clankie second room: read the slow page");
    rig.wait_outcomes(GENERAL, &[a]).await;
    rig.wait_outcomes(LOBBIES, &[b]).await;
    assert_eq!(rig.outcome(GENERAL, a).as_deref(), Some("replied"));
    assert_eq!(rig.outcome(LOBBIES, b).as_deref(), Some("replied"));
    assert_eq!(pages.hits("/slow"), 2, "both turns browsed");
    assert_eq!(pages.most_in_flight(), 1, "one browser: the second browse waited for the first");
    until("both replies", Duration::from_secs(10), || {
        !rig.sandbox.discord.posts(GENERAL).is_empty() && !rig.sandbox.discord.posts(LOBBIES).is_empty()
    })
    .await;
}

#[tokio::test]
async fn voice_actor_ask_clankie_browses_a_page_and_its_answer_is_spoken() {
    const VOICE: u64 = 300;
    const VOICE_PROMPT: &str = "spoken aloud";
    let pages = pages().await;
    let rig = rig(&pages, &[]).await;
    let bus = rig.bus().await;
    let speaks = clankie_testkit::record::<v1::Speak>(&bus, Family::VoiceSpeak).await;
    rig.voice_live(VOICE, "ada").await;
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::tool("ask_clankie", serde_json::json!({ "request": "check the bracket page" }))));
    rig.standin.script(Script::when("via=\"the voice room\"", browse(&pages.url("/bracket"), false)));
    rig.standin.script(Script::when("via=\"the voice room\"", Reply::text("The kestrel bracket opens at nine.")));
    rig.standin.script(Script::when(VOICE_PROMPT, Reply::text("The bracket opens at nine tonight.")));
    rig.say(VOICE, "ada", "clankie, when does the bracket open?");
    until("the spoken answer", Duration::from_secs(60), || !speaks.all().is_empty()).await;
    assert_eq!(speaks.all()[0].text, "The bracket opens at nine tonight.");
    let requests = rig.standin.requests();
    let read = requests.iter().find(|r| r.all_text().contains("<untrusted_page url=")).expect("the captain read the page it browsed");
    assert!(read.all_text().contains(PHRASE), "the page's words did not reach the handoff");
    assert_eq!(pages.hits("/bracket"), 1, "browsed once, through the guard's allow list");
    let last = requests.last().unwrap();
    assert_eq!(last.count("The kestrel bracket opens at nine."), 1, "the handoff's answer came back to the room");
}
