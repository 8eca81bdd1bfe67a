//! 2026-08-17: the provider stream died under auto-retry and a turn hung for twenty-two
//! minutes, its single timer resuming late after a host suspend. Now silence alone
//! aborts it, within the silence plus one tick, suspend or not.

use std::sync::Arc;
use std::time::Duration;

use clankie_agent::SuspendableClock;
use clankie_model_standin::{Reply, Script};
use clankie_proto::{Family, v1};
use clankie_sandbox::rig::{GENERAL, Rig, until};

const SLACK_MS: i64 = 500;

#[tokio::test]
async fn a_dead_stream_under_auto_retry_is_aborted_as_stalled_within_silence_plus_a_tick() {
    let rig = Rig::with(&[("CLANKIE_STALL_SILENCE_MS", "1000"), ("CLANKIE_STALL_TICK_MS", "50")]).await;
    let outcomes = clankie_testkit::record::<v1::DeliveryOutcome>(&rig.bus().await, Family::LaneOutcome).await;
    // The connection resets mid-chunk (retried as transient), then the retry goes silent for good.
    rig.standin.script(Script::any(Reply::Reset { text_before: "Let me look".into() }));
    rig.standin.script(Script::any(Reply::Stall { text_before: "Looking it up".into() }));
    let id = rig.say(GENERAL, "ada", "@Clankie find the bracket");
    until("the stalled outcome", Duration::from_secs(30), || !outcomes.all().is_empty()).await;
    let outcome = &outcomes.all()[0];
    assert_eq!(outcome.delivery_id, id.to_string());
    assert_eq!(outcome.failure_code, v1::FailureCode::CaptainTurnStalled as i32);
    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 2, "one retry of the dropped stream, then silence");
    let silent_since = requests[1].at_ms;
    let waited = outcome.recorded_at_ms - silent_since;
    assert!(waited >= 1000, "aborted before the silence was up: {waited} ms");
    assert!(waited <= 1000 + 50 + SLACK_MS, "aborted {waited} ms after the last sign of life");
    assert!(rig.sandbox.discord.posts(GENERAL).is_empty(), "a stalled turn posts nothing");
}

#[tokio::test]
async fn a_host_suspend_longer_than_the_silence_is_caught_on_the_first_tick_after_it() {
    let clock = SuspendableClock::new();
    let rig =
        Rig::with_clock(&[("CLANKIE_STALL_SILENCE_MS", "20000"), ("CLANKIE_STALL_TICK_MS", "50")], Some(Arc::new(clock.clone()))).await;
    let outcomes = clankie_testkit::record::<v1::DeliveryOutcome>(&rig.bus().await, Family::LaneOutcome).await;
    rig.standin.script(Script::any(Reply::Stall { text_before: "Looking it up".into() }));
    rig.say(GENERAL, "ada", "@Clankie find the bracket");
    // The words before the silence light the room: once typing shows, the stream has gone quiet.
    until("the last sign of life", Duration::from_secs(20), || !rig.sandbox.discord.typing(GENERAL).is_empty()).await;
    let suspended_at = clankie_bus::now_ms();
    clock.suspend_for(Duration::from_secs(60));
    until("the stalled outcome", Duration::from_secs(10), || !outcomes.all().is_empty()).await;
    let outcome = &outcomes.all()[0];
    assert_eq!(outcome.failure_code, v1::FailureCode::CaptainTurnStalled as i32);
    let caught = outcome.recorded_at_ms - suspended_at;
    assert!(caught <= 50 + SLACK_MS, "caught {caught} ms after waking, not on the next tick");
}
