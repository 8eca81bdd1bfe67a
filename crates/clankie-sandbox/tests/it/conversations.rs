//! Conversations the way Discord has them, through the whole stack: replies and their chains,
//! threads and forum posts, his name, people and mentions as people see them, and the rich
//! parts of a message (links, polls, stickers, embeds, forwards, text files). The loopback
//! shapes each as Discord does; the model stand-in shows what the lane was told.

use std::time::Duration;

use clankie_discord_loopback::{ChannelKind, ChannelSpec, NewAttachment, NewEmbed, NewMessage, NewPoll};
use clankie_model_standin::{RecordedRequest, Reply, Script};
use clankie_proto::{Family, v1};
use clankie_store::{OwnerSettings, Store};

use crate::{GENERAL, Rig, until};

const LOBBIES: u64 = 201;
const FORUM: u64 = 260;

fn user(name: &str) -> u64 {
    clankie_discord_loopback::Loopback::user_id(name)
}

/// `author` writes `content` addressed to him by a mention that is not in the words.
fn to_him(channel: u64, author: &str, content: &str) -> NewMessage {
    NewMessage { channel_id: channel, author: author.into(), content: content.into(), mention: true, ..Default::default() }
}

async fn record_receipts(rig: &Rig) -> clankie_testkit::Recorder<v1::Receipt> {
    clankie_testkit::record::<v1::Receipt>(&rig.bus().await, Family::Receipt).await
}

/// The receipt of `kind` for a delivery, once it is published.
async fn receipt(receipts: &clankie_testkit::Recorder<v1::Receipt>, kind: &str, delivery: u64) -> v1::Receipt {
    let id = delivery.to_string();
    until(kind, Duration::from_secs(20), || receipts.all().iter().any(|r| r.kind == kind && r.delivery_id == id)).await;
    receipts.all().into_iter().find(|r| r.kind == kind && r.delivery_id == id).expect("the receipt")
}

/// The request whose last message is the one `needle` is in.
pub(crate) fn request_for(rig: &Rig, needle: &str) -> RecordedRequest {
    rig.standin
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.messages().last().is_some_and(|m| m.to_string().contains(needle)))
        .unwrap_or_else(|| panic!("no request answered {needle:?}"))
}

/// The `<line>`s of the untrusted blocks opened by `open` in a request, parsed back.
fn lines_in(request: &RecordedRequest, open: &str) -> Vec<clankie_self::blocks::Parsed> {
    let text = request.all_text();
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(open) {
        let block = &rest[at..];
        let end = block.find("</untrusted_").map_or(block.len(), |e| e + block[e..].find('>').map_or(0, |g| g + 1));
        out.extend(clankie_self::blocks::parse(&block[..end]).expect("a block that parses back"));
        rest = &block[end..];
    }
    out
}

#[tokio::test]
async fn reply_chain_bob_says_a_fact_ten_messages_pass_and_adas_reply_shows_it_as_what_she_replies_to() {
    let rig = Rig::new().await;
    let fact = rig.say(GENERAL, "bob", "the finals were moved to hall C on friday");
    let others: Vec<u64> = (0..10).map(|i| rig.say(GENERAL, "cy", &format!("unrelated chatter number {i}"))).collect();
    let asked = rig.sandbox.discord.user_message(NewMessage { reply_to: Some(fact), ..to_him(GENERAL, "ada", "is this true?") });
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let first = request_for(&rig, "is this true?");
    assert_eq!(first.count("the finals were moved to hall C on friday"), 1, "bob's fact, once");
    let context = lines_in(&first, clankie_captain::prompt::CONTEXT_OPEN);
    let replied: Vec<_> = context.iter().filter(|l| l.attr("what") == Some("replied_to")).collect();
    assert_eq!(replied.len(), 1, "{context:?}");
    assert_eq!(replied[0].attr("from"), Some("bob"));
    assert_eq!(replied[0].attr("author_id"), Some(user("bob").to_string().as_str()));
    assert_eq!(replied[0].content, "the finals were moved to hall C on friday");
    let history = lines_in(&first, clankie_captain::prompt::HISTORY_OPEN);
    assert_eq!(history.len(), 10, "the ten messages between are the room's history");
    assert!(history.iter().all(|l| l.content.starts_with("unrelated chatter")));

    // Replies to messages the lane holds (one of the history lines, and bob's fact it was
    // shown as a reply) point at them; neither is quoted again.
    let again = rig.sandbox.discord.user_message(NewMessage { reply_to: Some(others[4]), ..to_him(GENERAL, "dee", "and this?") });
    rig.wait_outcomes(GENERAL, &[again]).await;
    let and_bob = rig.sandbox.discord.user_message(NewMessage { reply_to: Some(fact), ..to_him(GENERAL, "ada", "so hall C then?") });
    rig.wait_outcomes(GENERAL, &[and_bob]).await;
    for (needle, quoted) in [("and this?", "unrelated chatter number 4"), ("so hall C then?", "the finals were moved to hall C on friday")]
    {
        let request = request_for(&rig, needle);
        assert_eq!(request.count(quoted), 1, "a message the lane holds was quoted again for {needle:?}");
        let context = lines_in(&request, clankie_captain::prompt::CONTEXT_OPEN);
        let pointer = context.last().expect("the reply's context line");
        assert_eq!((pointer.attr("what"), pointer.attr("earlier_in_this_conversation")), (Some("replied_to"), Some("true")));
        assert_eq!(pointer.content, "");
    }

    // Bob forgotten: his words leave the line that quoted them, by his id; ada's message stays.
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    assert!(crate::entries_holding(&store, "hall C on friday").await > 0);
    clankie_self::rewrite::forget_user(&store, user("bob"), Duration::from_secs(10), |_| {}).await.expect("bob forgotten");
    assert_eq!(crate::entries_holding(&store, "hall C on friday").await, 0, "a quoted line outlived its author's forget");
    assert!(crate::entries_holding(&store, "is this true?").await > 0, "ada's own message went with bob's words");
}

#[tokio::test]
async fn reply_chain_to_a_message_in_a_cold_lanes_history_points_at_it() {
    let rig = Rig::new().await;
    let said = rig.say(GENERAL, "cy", "the scrim is on thursday");
    rig.say(GENERAL, "dee", "nice");
    let asked = rig.sandbox.discord.user_message(NewMessage { reply_to: Some(said), ..to_him(GENERAL, "ada", "which thursday?") });
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let request = request_for(&rig, "which thursday?");
    assert_eq!(request.count("the scrim is on thursday"), 1, "in the history block, and only there");
    let context = lines_in(&request, clankie_captain::prompt::CONTEXT_OPEN);
    assert_eq!(context.len(), 1, "{context:?}");
    assert_eq!(context[0].attr("earlier_in_this_conversation"), Some("true"));
}

#[tokio::test]
async fn reply_chain_of_4_replies_shows_3() {
    // No history: every message of the chain reaches the lane only as the chain shows it.
    let rig = Rig::with(&[("CLANKIE_HISTORY_LIMIT", "0")]).await;
    let mut previous = rig.say(GENERAL, "cy", "chain link one");
    for (who, words) in [("dee", "chain link two"), ("cy", "chain link three"), ("dee", "chain link four")] {
        previous = rig.sandbox.discord.user_message(NewMessage {
            channel_id: GENERAL,
            author: who.into(),
            content: words.into(),
            reply_to: Some(previous),
            ..Default::default()
        });
    }
    let asked = rig.sandbox.discord.user_message(NewMessage { reply_to: Some(previous), ..to_him(GENERAL, "ada", "who is right?") });
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let request = request_for(&rig, "who is right?");
    let context = lines_in(&request, clankie_captain::prompt::CONTEXT_OPEN);
    let shown: Vec<(&str, &str)> = context.iter().map(|l| (l.attr("what").unwrap_or_default(), l.content.as_str())).collect();
    assert_eq!(shown, [("replied_to", "chain link four"), ("reply_chain", "chain link three"), ("reply_chain", "chain link two")]);
    assert_eq!(request.count("chain link one"), 0, "the chain is bounded at CLANKIE_REPLY_CHAIN_DEPTH (3)");
    // The figure for the notes: what the chain adds, in the stand-in's estimate (characters / 4).
    let text = request.all_text();
    let block = text.find(clankie_captain::prompt::CONTEXT_OPEN).map_or("", |at| &text[at..]);
    let block = block.find("</untrusted_message_context>").map_or(block, |end| &block[..end + "</untrusted_message_context>".len()]);
    println!("reply_chain_of_3_adds_tokens: {} (of {} in the request)", block.chars().count() / 4, request.token_estimate);
}

/// A reply steered into a live run is read as a turn reads one: the chain above the message it
/// replies to (which ingest leaves to fetch) is asked for before it is steered.
#[tokio::test]
async fn steer_a_reply_steered_into_a_live_run_carries_the_chain_above_it() {
    let rig = Rig::with(&[("CLANKIE_HISTORY_LIMIT", "0")]).await;
    let receipts = record_receipts(&rig).await;
    let fact = rig.say(GENERAL, "bob", "the bus leaves at seven sharp");
    let doubt = rig.sandbox.discord.user_message(NewMessage {
        channel_id: GENERAL,
        author: "cy".into(),
        content: "no, it leaves at eight".into(),
        reply_to: Some(fact),
        ..Default::default()
    });
    receipt(&receipts, "gateway.ingress", doubt).await;
    rig.standin.script(Script::any(Reply::Gated { gate: "steer".into(), then: Box::new(Reply::text("Let me look.")) }));
    rig.standin.script(Script::any(Reply::text("Bob said seven, cy said eight.")));
    let asked = rig.sandbox.discord.user_message(to_him(GENERAL, "ada", "when does the bus leave?"));
    until("the run's first call", Duration::from_secs(20), || {
        rig.standin.requests().iter().any(|r| r.count("when does the bus leave?") > 0)
    })
    .await;
    let steered =
        rig.sandbox.discord.user_message(NewMessage { reply_to: Some(doubt), ..to_him(GENERAL, "ada", "which of them is right?") });
    receipt(&receipts, "captain.admitted", steered).await;
    rig.standin.open_gate("steer");
    rig.wait_outcomes(GENERAL, &[asked, steered]).await;
    let request = request_for(&rig, "which of them is right?");
    let context = lines_in(&request, clankie_captain::prompt::CONTEXT_OPEN);
    let shown: Vec<(&str, &str)> = context.iter().map(|l| (l.attr("what").unwrap_or_default(), l.content.as_str())).collect();
    assert!(shown.contains(&("replied_to", "no, it leaves at eight")), "{shown:?}");
    assert!(shown.contains(&("reply_chain", "the bus leaves at seven sharp")), "the chain above the steered reply: {shown:?}");
}

#[tokio::test]
async fn reply_chain_without_referenced_message_is_fetched() {
    let rig = Rig::with(&[("CLANKIE_HISTORY_LIMIT", "0")]).await;
    let fact = rig.say(GENERAL, "bob", "the bus leaves at seven sharp");
    // Discord sometimes leaves `referenced_message` out: the gateway fetches the message.
    let asked = rig.sandbox.discord.user_message(NewMessage {
        reply_to: Some(fact),
        omit_referenced: true,
        ..to_him(GENERAL, "ada", "is that right?")
    });
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let context = lines_in(&request_for(&rig, "is that right?"), clankie_captain::prompt::CONTEXT_OPEN);
    assert_eq!(context.len(), 1, "{context:?}");
    assert_eq!((context[0].attr("what"), context[0].content.as_str()), (Some("replied_to"), "the bus leaves at seven sharp"));
}

#[tokio::test]
async fn thread_from_adas_message_first_request_holds_the_starter_and_the_parents_name_and_archive_and_delete_change_the_lane() {
    let rig = Rig::new().await;
    let receipts = record_receipts(&rig).await;
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    store.set_owner_settings(&OwnerSettings { channels: vec![GENERAL], ..store.owner_settings().await.unwrap() }).await.unwrap();
    let starter = rig.say(GENERAL, "ada", "who wants to plan the winter bracket with me?");
    let thread = rig.sandbox.discord.start_thread(GENERAL, Some(starter), "winter bracket", false);
    assert_eq!(thread, starter, "a thread started from a message has its id");
    let asked = rig.sandbox.discord.user_message(to_him(thread, "bob", "can you draft the rounds?"));
    rig.wait_outcomes(thread, &[asked]).await;
    assert_eq!(rig.outcome(thread, asked).as_deref(), Some("replied"));
    assert_eq!(rig.sandbox.discord.posts(thread).len(), 1, "answered in the thread");
    assert!(rig.sandbox.discord.posts(GENERAL).is_empty(), "not in the parent");
    let first = request_for(&rig, "can you draft the rounds?");
    let lines = lines_in(&first, clankie_captain::prompt::THREAD_OPEN);
    assert_eq!(lines[0].tag, "thread");
    assert_eq!(
        (lines[0].attr("name"), lines[0].attr("parent"), lines[0].attr("kind")),
        (Some("winter bracket"), Some("#general"), Some("thread"))
    );
    assert_eq!((lines[1].attr("what"), lines[1].attr("from")), (Some("thread_starter"), Some("ada")));
    assert_eq!(lines[1].content, "who wants to plan the winter bracket with me?");
    assert_eq!(first.count(clankie_captain::prompt::THREAD_OPEN), 1);

    // A thread under a channel the owner did not admit is refused, as its parent would be.
    let elsewhere = rig.sandbox.discord.start_thread(LOBBIES, None, "off-list", false);
    let refused = rig.sandbox.discord.user_message(to_him(elsewhere, "bob", "are you here too?"));
    assert_eq!(receipt(&receipts, "captain.not_admitted", refused).await.codes.first().map(String::as_str), Some("not_admitted_here"));

    // Archived: the lane goes cold; a new message there (which unarchives it, as on Discord)
    // walks in with the thread's context again.
    assert!(rig.sandbox.discord.set_archived(thread, true));
    until("the archive applied", Duration::from_secs(20), || {
        receipts.all().iter().any(|r| r.kind == "captain.changed" && r.codes.iter().any(|c| c == "thread_archived"))
    })
    .await;
    let later = rig.sandbox.discord.user_message(to_him(thread, "bob", "back to the bracket: who seeds?"));
    rig.wait_outcomes(thread, &[later]).await;
    let warmed = request_for(&rig, "back to the bracket: who seeds?");
    assert_eq!(warmed.count(clankie_captain::prompt::THREAD_OPEN), 1, "the thread's context, once: the conversation holds it");
    assert_eq!(warmed.count("who wants to plan the winter bracket with me?"), 1);
    let run = receipt(&receipts, "captain.run", later).await;
    assert_eq!(run.flags.get("from_store"), Some(&true), "the archived thread's lane walked in cold, from the store");

    // Deleted: what waits in the lane is withdrawn and never reaches the model.
    rig.standin.script(Script::any(Reply::Gated { gate: "deleted".into(), then: Box::new(Reply::text("Seeds by rating.")) }));
    let held = rig.sandbox.discord.user_message(to_him(thread, "cy", "one more question about seeds"));
    until("the run's first call", Duration::from_secs(20), || {
        rig.standin.requests().iter().any(|r| r.count("one more question about seeds") > 0)
    })
    .await;
    let waiting = rig.sandbox.discord.user_message(NewMessage {
        channel_id: thread,
        author: "cy".into(),
        content: "my seed code is walrus-7781".into(),
        ..Default::default()
    });
    receipt(&receipts, "captain.admitted", waiting).await;
    assert!(rig.sandbox.discord.delete_thread(thread));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while store.outcome(&waiting.to_string()).await.unwrap().map(|o| o.kind) != Some(v1::OutcomeKind::Withdrawn) {
        assert!(tokio::time::Instant::now() < deadline, "the deleted thread's waiting message was never withdrawn");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let posts_before = rig.sandbox.discord.posts(thread).len();
    rig.standin.open_gate("deleted");
    // The held run ends before its outcome is settled: a withdrawn message left in its queue
    // would have reached the model by then, in a call after the gated one.
    let held_outcome = {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(o) = store.outcome(&held.to_string()).await.unwrap() {
                break o;
            }
            assert!(tokio::time::Instant::now() < deadline, "the held run never settled its outcome");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert_eq!(held_outcome.kind, v1::OutcomeKind::Replied, "{held_outcome:?}");
    let gated_calls = rig.standin.requests().iter().filter(|r| r.count("one more question about seeds") > 0).count();
    assert_eq!(gated_calls, 1, "the held run called the model again after the gate: something was steered in after the deletion");
    assert!(rig.standin.requests().iter().all(|r| r.count("walrus-7781") == 0), "a message of the deleted thread reached the model");
    assert_eq!(store.outcome(&waiting.to_string()).await.unwrap().map(|o| o.kind), Some(v1::OutcomeKind::Withdrawn));
    // What the lane stored of the thread's messages goes with them; the starter, which lives in
    // the parent channel and was not deleted, stays where the lane quoted it.
    for gone in ["can you draft the rounds?", "back to the bracket: who seeds?"] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while crate::entries_holding(&store, gone).await > 0 {
            assert!(tokio::time::Instant::now() < deadline, "{gone:?} outlived its deleted thread");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert!(crate::entries_holding(&store, "who wants to plan the winter bracket with me?").await > 0);
    // Nothing was posted in the deleted thread: its routes answer 404, and nothing got past them.
    let posts = rig.sandbox.discord.posts(thread);
    assert_eq!(posts.len(), posts_before, "a post reached the deleted thread: {posts:?}");
    assert!(posts.iter().all(|p| p.content != "Seeds by rating."), "the held run's answer was posted in the deleted thread");
}

/// A private thread reaches him only once he is a member: mentioned there, he is added (as
/// Discord adds whoever is mentioned), answers in it, and hears what follows without a mention.
#[tokio::test]
async fn thread_private_he_is_mentioned_in_is_answered_and_he_hears_what_follows() {
    let rig = Rig::new().await;
    let receipts = record_receipts(&rig).await;
    let thread = rig.sandbox.discord.start_thread(GENERAL, None, "officers only", true);
    let before = rig.sandbox.discord.user_message(NewMessage {
        channel_id: thread,
        author: "ada".into(),
        content: "before he is here".into(),
        ..Default::default()
    });
    let asked = rig.sandbox.discord.user_message(to_him(thread, "ada", "can you keep the roster?"));
    rig.wait_outcomes(thread, &[asked]).await;
    assert_eq!(rig.outcome(thread, asked).as_deref(), Some("replied"));
    assert_eq!(rig.sandbox.discord.posts(thread).len(), 1, "answered in the private thread");
    assert_eq!(request_for(&rig, "can you keep the roster?").count("private_thread"), 1);
    let then = rig.sandbox.discord.user_message(NewMessage {
        channel_id: thread,
        author: "ada".into(),
        content: "and the schedule too".into(),
        ..Default::default()
    });
    assert_eq!(receipt(&receipts, "captain.admitted", then).await.codes, ["live_exchange"], "a member hears the thread's next message");
    assert!(
        receipts.all().iter().all(|r| r.delivery_id != before.to_string()),
        "a private thread's message reached him before he was in it"
    );
}

/// nia and pim talk with him in a private thread; omar then asks in #lobbies what he has been
/// up to. The thread is its own audience: omar's request holds nothing of it, not its talk, not
/// who was there, not that he is there, though the experience of it is recorded.
#[tokio::test]
async fn audience_a_private_threads_talk_and_participants_never_reach_a_public_channels_self_context() {
    let rig = Rig::new().await;
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    let guild = rig.sandbox.discord.config().guild_id;
    let thread = rig.sandbox.discord.start_thread(GENERAL, None, "party planning", true);
    rig.standin.script(Script::when("nia-lark", Reply::text("A surprise party it is.")));
    let nias = rig.sandbox.discord.user_message(to_him(thread, "nia", "help us plan the surprise party for omar, nia-lark"));
    rig.wait_outcomes(thread, &[nias]).await;
    rig.standin.script(Script::when("pim-finch", Reply::text("Cake noted.")));
    let pims = rig.sandbox.discord.user_message(to_him(thread, "pim", "I will bring the cake, pim-finch"));
    rig.wait_outcomes(thread, &[pims]).await;
    let lane = clankie_proto::LaneKey::Room { guild, channel: thread }.to_string();
    crate::experience_recorded(&store, "the private thread's experience", |e| e.thread == lane).await;

    rig.standin.script(Script::when("omar-owl", Reply::text("Oh, this and that.")));
    let omars = rig.sandbox.discord.user_message(to_him(LOBBIES, "omar", "what have you been up to lately? omar-owl"));
    rig.wait_outcomes(LOBBIES, &[omars]).await;
    let request = request_for(&rig, "omar-owl");
    let text = request.all_text();
    println!("audience: omar's request holds a self-context: {}", text.contains("<self_context>"));
    for absent in ["nia", "pim", "surprise", "party", "cake", &thread.to_string()] {
        assert_eq!(request.count(absent), 0, "{absent:?} from the private thread reached #lobbies' request");
    }
}

#[tokio::test]
async fn thread_follows_its_parents_quiet() {
    let rig = Rig::new().await;
    let receipts = record_receipts(&rig).await;
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    let guild = rig.sandbox.discord.config().guild_id;
    store.set_quiet(&clankie_proto::LaneKey::Room { guild, channel: GENERAL }, 60_000).await.unwrap();
    let thread = rig.sandbox.discord.start_thread(GENERAL, None, "side talk", false);
    let asked = rig.sandbox.discord.user_message(to_him(thread, "ada", "are you there?"));
    rig.wait_outcomes(thread, &[asked]).await;
    assert_eq!(rig.outcome(thread, asked).as_deref(), Some("silent"), "a thread is quiet where its parent is");
    let outcome = receipt(&receipts, "captain.outcome", asked).await;
    assert!(outcome.codes.iter().any(|c| c == "quiet"), "{outcome:?}");
    assert!(rig.standin.requests().is_empty());
}

#[tokio::test]
async fn forum_post_mentioning_him_is_answered_in_its_thread_and_the_request_holds_the_title_and_tags() {
    let forum = ChannelSpec {
        id: FORUM,
        name: "help-desk".into(),
        kind: ChannelKind::Forum,
        tags: vec!["bug".into(), "question".into(), "feature".into()],
        ..Default::default()
    };
    let rig = Rig::with_channels(&[], vec![forum]).await;
    let (thread, first) = rig.sandbox.discord.create_forum_post(
        FORUM,
        "ada",
        "Crash when the lobby opens",
        &["bug", "question"],
        to_him(FORUM, "ada", "it crashes every time I open the lobby, any idea?"),
    );
    assert_eq!(thread, first, "a forum post's first message has the thread's id");
    rig.wait_outcomes(thread, &[first]).await;
    assert_eq!(rig.outcome(thread, first).as_deref(), Some("replied"));
    assert_eq!(rig.sandbox.discord.posts(thread).len(), 1, "answered in the post's thread");
    let request = request_for(&rig, "it crashes every time I open the lobby");
    let lines = lines_in(&request, clankie_captain::prompt::THREAD_OPEN);
    assert_eq!(lines.len(), 1, "the first message is the post, no starter beside it: {lines:?}");
    assert_eq!(lines[0].attr("name"), Some("Crash when the lobby opens"));
    assert_eq!(lines[0].attr("kind"), Some("forum_post"));
    assert_eq!(lines[0].attr("parent"), Some("#help-desk"));
    assert_eq!(lines[0].attr("tags"), Some("bug, question"));
}

#[tokio::test]
async fn named_clankie_what_do_you_think_in_a_quiet_room_is_admitted_and_answered_and_clankies_is_not() {
    // Quiet as in nobody talking with him: no live exchange, no mention, no reply.
    let rig = Rig::new().await;
    let receipts = record_receipts(&rig).await;
    let asked = rig.say(GENERAL, "ada", "clankie, what do you think?");
    assert_eq!(receipt(&receipts, "captain.admitted", asked).await.codes, ["named"]);
    rig.wait_outcomes(GENERAL, &[asked]).await;
    assert_eq!(rig.outcome(GENERAL, asked).as_deref(), Some("replied"));
    let liked = rig.say(LOBBIES, "bob", "I like Clankies");
    assert_eq!(receipt(&receipts, "captain.not_admitted", liked).await.codes, ["not_addressed"]);

    let off = Rig::with(&[("CLANKIE_NAMED_ADMISSION", "false")]).await;
    let off_receipts = record_receipts(&off).await;
    let refused = off.say(GENERAL, "ada", "clankie, what do you think?");
    assert_eq!(receipt(&off_receipts, "captain.not_admitted", refused).await.codes, ["not_addressed"], "the setting off refuses it");
}

#[tokio::test]
async fn mentions_of_a_user_a_channel_a_role_and_a_custom_emoji_reach_the_model_as_names_and_the_nickname_is_the_name_shown() {
    let rig = Rig::new().await;
    rig.sandbox.discord.set_nick("bob", Some("Bobby Tables"));
    rig.sandbox.discord.set_nick("ada", Some("Countess"));
    let (bob, role) = (user("bob"), clankie_discord_loopback::BOT_ROLE);
    let content = format!("ask <@{bob}> in <#{LOBBIES}> or ping <@&{role}> <:blobwave:112233445566>");
    let asked = rig.sandbox.discord.user_message(to_him(GENERAL, "ada", &content));
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let request = request_for(&rig, "blobwave");
    let text = request.all_text();
    assert!(text.contains("ask @Bobby Tables in #lobbies or ping @Clankie :blobwave:"), "{text}");
    assert!(!text.contains(&format!("<@{bob}>")) && !text.contains("&lt;@"), "a raw mention reached the model");
    let own = clankie_self::blocks::parse(request.messages().last().map(|m| m["content"].as_str().unwrap_or_default()).unwrap_or_default())
        .expect("the message block");
    assert_eq!(own[0].attr("from"), Some("Countess"), "the guild nickname is the name shown");
}

#[tokio::test]
async fn rich_a_message_link_a_poll_a_sticker_an_embed_a_forward_and_a_py_file_reach_the_model_described_and_bounded() {
    let rig = Rig::new().await;
    let guild = rig.sandbox.discord.config().guild_id;
    let linked = rig.say(LOBBIES, "cy", "the server password rotates on monday");
    let long_file: String = (0..3_000).map(|i| format!("x{i} = {i}\n")).collect();
    let asked = rig.sandbox.discord.user_message(NewMessage {
        poll: Some(NewPoll { question: "Best map?".into(), answers: vec!["Dust".into(), "Inferno".into()] }),
        stickers: vec!["wave_hello".into()],
        embeds: vec![
            NewEmbed { title: Some("Patch notes 1.2".into()), description: Some("Faster lobbies".into()), url: None },
            NewEmbed { title: Some("The long one".into()), description: Some("z".repeat(5_000)), url: None },
        ],
        attachments: vec![
            NewAttachment {
                filename: "tool.py".into(),
                content_type: "text/x-python".into(),
                text: Some("def hello():\n    return 42\n".into()),
                base64: None,
            },
            NewAttachment { filename: "big.py".into(), content_type: "text/x-python".into(), text: Some(long_file.clone()), base64: None },
        ],
        ..to_him(GENERAL, "ada", &format!("look at https://discord.com/channels/{guild}/{LOBBIES}/{linked} first"))
    });
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let request = request_for(&rig, "look at https://discord.com/channels/");
    let context = lines_in(&request, clankie_captain::prompt::CONTEXT_OPEN);
    let find =
        |what: &str| context.iter().find(|l| l.attr("what") == Some(what)).unwrap_or_else(|| panic!("no {what} line in {context:?}"));
    assert_eq!((find("linked").attr("from"), find("linked").content.as_str()), (Some("cy"), "the server password rotates on monday"));
    assert_eq!(find("linked").attr("label"), Some("#lobbies"));
    assert_eq!((find("poll").attr("label"), find("poll").content.as_str()), (Some("Best map?"), "options: Dust | Inferno"));
    assert_eq!(find("sticker").attr("label"), Some("wave_hello"));
    assert_eq!((find("embed").attr("label"), find("embed").content.as_str()), (Some("Patch notes 1.2"), "Faster lobbies"));
    let long = context.iter().find(|l| l.attr("label") == Some("The long one")).expect("the long embed");
    assert_eq!(long.content.chars().count(), 1_000, "an embed's words are bounded");
    let files: Vec<_> = context.iter().filter(|l| l.attr("what") == Some("file")).collect();
    assert_eq!(files[0].attr("label"), Some("tool.py"));
    assert_eq!(files[0].content, "def hello():\n    return 42\n");
    assert_eq!(files[1].attr("label"), Some("big.py"));
    assert!(files[1].content.ends_with("…(cut)") && files[1].content.chars().count() <= clankie_captain::prompt::TEXT_FILE_CHARS + 7);
    assert!(long_file.len() > clankie_captain::prompt::TEXT_FILE_CHARS * 2);
    // Every described part is inside the untrusted block, none in the message's own words.
    let own = clankie_self::blocks::parse(request.messages().last().map(|m| m["content"].as_str().unwrap_or_default()).unwrap_or_default())
        .expect("the blocks");
    assert_eq!(own[0].tag, "message");
    assert!(!own[0].content.contains("Inferno") && !own[0].content.contains("def hello"));

    // A link that names this guild but points into another guild's channel is not followed.
    let elsewhere = rig.say(210, "eve", "the other server's secret plans");
    let spoofed =
        rig.sandbox.discord.user_message(to_him(GENERAL, "ada", &format!("and https://discord.com/channels/{guild}/210/{elsewhere} ?")));
    rig.wait_outcomes(GENERAL, &[spoofed]).await;
    assert!(rig.standin.requests().iter().all(|r| r.count("the other server's secret plans") == 0), "another guild's message was quoted");

    // A forward (in the live exchange) carries the message it forwards, described.
    let source = rig.say(LOBBIES, "bob", "meet at the north gate at noon");
    let forward = rig.sandbox.discord.user_message(NewMessage {
        channel_id: GENERAL,
        author: "ada".into(),
        forward: Some(source),
        ..Default::default()
    });
    rig.wait_outcomes(GENERAL, &[forward]).await;
    let request = rig
        .standin
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.count("meet at the north gate at noon") > 0)
        .expect("the forward reached the model");
    let context = lines_in(&request, clankie_captain::prompt::CONTEXT_OPEN);
    let forwarded = context.iter().find(|l| l.attr("what") == Some("forwarded")).expect("a forwarded line");
    assert_eq!((forwarded.attr("from"), forwarded.content.as_str()), (Some("ada"), "meet at the north gate at noon"));
}

/// A link is followed only into a channel the owner admits: a message of a same-guild channel
/// left off the owner's list reaches no request, though the link names this guild and Discord
/// would let him read it; once the owner admits that channel, the same link is quoted.
#[tokio::test]
async fn links_into_a_same_guild_channel_the_owner_does_not_admit_are_dropped_and_quoted_once_it_is_admitted() {
    let rig = Rig::new().await;
    let guild = rig.sandbox.discord.config().guild_id;
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    let owner = store.owner_settings().await.unwrap();
    store.set_owner_settings(&OwnerSettings { channels: vec![GENERAL], ..owner.clone() }).await.unwrap();
    let linked = rig.say(LOBBIES, "cy", "the server password rotates on monday");
    let link = format!("https://discord.com/channels/{guild}/{LOBBIES}/{linked}");

    let asked = rig.sandbox.discord.user_message(to_him(GENERAL, "ada", &format!("what does {link} say?")));
    rig.wait_outcomes(GENERAL, &[asked]).await;
    assert_eq!(rig.outcome(GENERAL, asked).as_deref(), Some("replied"));
    let request = request_for(&rig, "what does https://discord.com/channels/");
    assert!(
        lines_in(&request, clankie_captain::prompt::CONTEXT_OPEN).iter().all(|l| l.attr("what") != Some("linked")),
        "a link into a channel the owner does not admit was quoted"
    );
    assert!(rig.standin.requests().iter().all(|r| r.count("password rotates") == 0), "the unadmitted channel's words reached the model");

    // The owner admits the channel: the same link, asked again, is quoted.
    store.set_owner_settings(&OwnerSettings { channels: vec![GENERAL, LOBBIES], ..owner }).await.unwrap();
    let again = rig.sandbox.discord.user_message(to_him(GENERAL, "ada", &format!("and now, {link}?")));
    rig.wait_outcomes(GENERAL, &[again]).await;
    let request = request_for(&rig, "and now, https://discord.com/channels/");
    let context = lines_in(&request, clankie_captain::prompt::CONTEXT_OPEN);
    let quoted =
        context.iter().find(|l| l.attr("what") == Some("linked")).unwrap_or_else(|| panic!("no linked line once admitted: {context:?}"));
    assert_eq!((quoted.attr("from"), quoted.content.as_str()), (Some("cy"), "the server password rotates on monday"));
}
