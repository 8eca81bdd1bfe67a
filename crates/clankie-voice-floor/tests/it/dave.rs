//! `dave_`: the voice floor on a DAVE call: what its receipts say of the call's encryption, and
//! what it does when a voice server requires more than it offers.

use std::time::{Duration, Instant};

use clankie_discord_loopback::DaveConfig;

use super::{Rig, VOICE, count, has_code, id, until};

/// Waits for `find` to find something.
async fn found<T>(what: &str, within: Duration, mut find: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = find() {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn dave_receipts(rig: &Rig) -> Vec<clankie_proto::v1::Receipt> {
    rig.receipts("voice.connection").into_iter().filter(|r| has_code(r, "dave")).collect()
}

#[tokio::test]
async fn dave_the_voice_connection_receipt_carries_the_epoch_and_the_privacy_code_of_the_group() {
    let rig = Rig::new().await;
    let _floor = rig.keeping_floor("floor-a").await;
    rig.discord.voice_join(VOICE, "ada").unwrap();
    rig.connected(Duration::from_secs(15)).await;
    let at = |epoch: i64| {
        let rig = &rig;
        move || dave_receipts(rig).into_iter().find(|r| count(r, "dave_epoch") == Some(epoch) && id(r, "dave_privacy_code").is_some())
    };
    let first = found("a voice.connection receipt at epoch 1 with a privacy code", Duration::from_secs(10), at(1)).await;
    assert_eq!(count(&first, "dave_protocol_version"), Some(1));
    // His members take a commit or welcome when its transition executes, just after he has.
    let members_show = |code: Option<String>| {
        let rig = &rig;
        move || rig.discord.voice().dave(VOICE).and_then(|g| g.privacy_code) == code
    };
    until("the code his call's members show is the receipt's", Duration::from_secs(5), members_show(id(&first, "dave_privacy_code"))).await;

    rig.discord.voice_join(VOICE, "bob").unwrap();
    let second = found("a receipt at epoch 2", Duration::from_secs(10), at(2)).await;
    assert_ne!(id(&second, "dave_privacy_code"), id(&first, "dave_privacy_code"), "the code changes with the group");
    until("his members at epoch 2 show the receipt's code", Duration::from_secs(5), members_show(id(&second, "dave_privacy_code"))).await;
    println!("dave receipts: {:?}", dave_receipts(&rig).iter().map(|r| (r.counts.clone(), r.ids.clone())).collect::<Vec<_>>());
}

#[tokio::test]
async fn dave_a_voice_server_requiring_more_than_he_offers_is_reported_with_a_code_and_not_retried() {
    let rig = Rig::with_dave(DaveConfig { on: true, required_version: 2 }).await;
    let _floor = rig.keeping_floor("floor-a").await;
    rig.discord.voice_join(VOICE, "ada").unwrap();
    let began = Instant::now();
    found("a voice.connection receipt with code dave_required", Duration::from_secs(40), || {
        rig.receipts("voice.connection").into_iter().find(|r| has_code(r, "dave_required"))
    })
    .await;
    let refused_after = began.elapsed();
    let closes = || rig.discord.voice().counters().get("dave_required_closed").copied().unwrap_or(0);
    let at_report = closes();
    // Past songbird's own retries and the keeper's longest pause between asks, nothing more.
    tokio::time::sleep(Duration::from_secs(8)).await;
    println!("dave 4017: reported after {refused_after:?} and {at_report} closes; {} closes 8 s later", closes());
    assert_eq!(closes(), at_report, "he did not try the room again");
    assert_eq!(rig.receipts("voice.connection").iter().filter(|r| has_code(r, "dave_required")).count(), 1);
    assert!(rig.log("floor-a").contains("requires DAVE"), "the log says why:\n{}", rig.log("floor-a"));
    assert!(!rig.discord.voice().bot_connected(VOICE));
}
