//! 2026-08-17: a browsing turn wrote its answer and lost it to a failed media write; two
//! prods then became two concurrent turns that posted near-identical replies 429 ms apart.
//! Now the failed write costs only the picture, and the prods become one turn.

use std::time::Duration;

use clankie_discord_loopback::{NewAttachment, NewMessage};
use clankie_model_standin::{Reply, Script};
use clankie_sandbox::rig::{GENERAL, Rig};

#[tokio::test]
async fn a_failed_picture_write_costs_only_the_picture_and_two_prods_get_one_turn() {
    let rig = Rig::new().await;
    // The write itself fails: where media keeps its blobs there is a plain file, so creating
    // the blob's directory fails as a full or broken disk would (the tests run as root, whom
    // a read-only mode would not stop).
    let blobs = clankie_settings::attachment_root(&rig.settings).join("sha256");
    if blobs.is_dir() {
        std::fs::remove_dir_all(&blobs).unwrap();
    }
    std::fs::write(&blobs, b"not a directory").unwrap();
    let shot = rig.sandbox.discord.user_message(NewMessage {
        channel_id: 201,
        author: "site".into(),
        content: "the bracket page".into(),
        attachments: vec![NewAttachment {
            filename: "bracket.png".into(),
            content_type: "image/png".into(),
            text: Some("a screenshot".into()),
            ..Default::default()
        }],
        ..Default::default()
    });
    let shot = rig.sandbox.discord.messages(201).into_iter().find(|m| m.id == shot).expect("the page");
    let url = format!("{}/attachments/{}/bracket.png", rig.sandbox.url(), shot.attachments[0].id);

    rig.standin.script(Script::any(Reply::tool("share_picture", serde_json::json!({ "url": url }))));
    rig.standin.script(Script::any(Reply::text("Bracket: lobby 4 opens at 20:00.")));
    let asked = rig.say(GENERAL, "ada", "@Clankie screenshot the start.gg bracket");
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let posts = rig.sandbox.discord.posts(GENERAL);
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].content, "Bracket: lobby 4 opens at 20:00.", "the words survived the failed picture");
    assert!(posts[0].attachments.is_empty());
    assert_eq!(rig.outcome(GENERAL, asked).as_deref(), Some("replied"));
    assert_eq!(
        rig.standin.requests()[1].count("could not be saved (io)"),
        1,
        "the model was told the write failed: {}",
        rig.standin.requests()[1].all_text()
    );
    std::fs::remove_file(&blobs).unwrap();

    // Two prods, close together, while he is answering the first.
    rig.standin.script(Script::any(Reply::Text {
        text: "Still here, ".into(),
        chunk_chars: 2,
        chunk_delay_ms: 150,
        first_delay_ms: 100,
        tail_delay_ms: 0,
    }));
    rig.standin.script(Script::any(Reply::text("Still here, and the bracket is above.")));
    let first = rig.say(GENERAL, "ada", "@Clankie hello?");
    tokio::time::sleep(Duration::from_millis(430)).await;
    let second = rig.say(GENERAL, "ada", "@Clankie clankie??");
    rig.wait_outcomes(GENERAL, &[first, second]).await;
    let posts = rig.sandbox.discord.posts(GENERAL);
    assert_eq!(posts.len(), 2, "one reply for both prods: {posts:?}");
    let mut outcomes = vec![rig.outcome(GENERAL, first).unwrap_or_default(), rig.outcome(GENERAL, second).unwrap_or_default()];
    outcomes.sort();
    assert_eq!(outcomes, ["absorbed", "replied"], "one turn, not two concurrent ones");
}
