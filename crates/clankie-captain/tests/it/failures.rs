use clankie_model_standin::{Reply, Script};
use clankie_proto::v1;

use super::{Rig, kind};

#[tokio::test]
async fn each_failure_code_reaches_the_outcome_and_a_receipt_that_carries_only_the_code() {
    let rig = Rig::new().await;
    // The stalled case is aborted by the watchdog: a short silence, which the other cases never reach.
    let (_captain, _task) = rig.captain_with("captain-a", &[("CLANKIE_STALL_SILENCE_MS", "600".into())]).await;
    let cases = [
        (Reply::InsufficientQuota, v1::FailureCode::CaptainUsageLimitReached),
        (Reply::Status { status: 400 }, v1::FailureCode::CaptainModelFailed),
        (Reply::Empty, v1::FailureCode::CaptainResponseMissing),
        (Reply::Stall { text_before: String::new() }, v1::FailureCode::CaptainTurnStalled),
    ];
    for (reply, code) in cases {
        rig.standin.script(Script::any(reply));
        let id = rig.say("ada", "@Clankie please look zanzibar up", true).await;
        rig.wait_outcomes(&[id]).await;
        let outcomes = rig.outcome_of(id);
        assert_eq!(outcomes.len(), 1);
        assert_eq!(kind(&outcomes[0]), v1::OutcomeKind::Failed);
        assert_eq!(outcomes[0].failure_code, code as i32, "{code:?}");
        let stored = rig.store.outcome(&id.to_string()).await.unwrap().unwrap();
        assert_eq!(stored.failure_code, Some(code));
        super::until("the outcome receipt", std::time::Duration::from_secs(5), || {
            rig.receipts.all().iter().any(|r| r.kind == "captain.outcome" && r.delivery_id == id.to_string())
        })
        .await;
        let receipt = rig.receipts.all().into_iter().find(|r| r.kind == "captain.outcome" && r.delivery_id == id.to_string()).unwrap();
        assert_eq!(receipt.codes, vec!["failed".to_owned(), code.code().to_owned()]);
    }
    assert!(rig.replies().is_empty(), "a failed turn posts nothing");
    // No provider words anywhere in the trail.
    let trail = format!("{:?}", rig.receipts.all());
    assert!(!trail.contains("billing"), "provider text reached a receipt");
    assert!(!trail.contains("zanzibar"), "message text reached a receipt");
    let turn_receipts = rig.receipts.all().into_iter().filter(|r| r.kind == "captain.turn").count();
    assert_eq!(turn_receipts, 4);
}

/// A delivery whose handling fails every time (here PostgreSQL refuses to record its
/// admission, and only its) is retried with growing backoff, then settled `failed` with
/// `captain_lane_unavailable` on its last delivery instead of looping; the lane's next message
/// is answered.
#[tokio::test]
async fn chaos_a_poison_delivery_fails_after_bounded_retries_and_the_lane_goes_on() {
    let rig = Rig::new().await;
    let (_captain, _task) = rig.captain_with("captain-a", &[("CLANKIE_INGRESS_MAX_DELIVER", "4".into())]).await;
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_poison() RETURNS trigger AS $$
         BEGIN IF NEW.delivery_id = '777' THEN RAISE EXCEPTION 'poison'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql;
         CREATE TRIGGER poison BEFORE INSERT ON admissions FOR EACH ROW EXECUTE FUNCTION refuse_poison();",
    )
    .execute(rig.store.pool())
    .await
    .unwrap();
    let started = std::time::Instant::now();
    rig.say_as(777, "ada", "@Clankie this one is poison", true, Some(super::GUILD)).await;
    rig.wait_outcomes(&[777]).await;
    let outcome = &rig.outcome_of(777)[0];
    assert_eq!(kind(outcome), v1::OutcomeKind::Failed);
    assert_eq!(outcome.failure_code, v1::FailureCode::CaptainLaneUnavailable as i32);
    let stored = rig.store.outcome("777").await.unwrap().unwrap();
    assert_eq!(stored.failure_code, Some(v1::FailureCode::CaptainLaneUnavailable));
    super::until("the outcome receipt", std::time::Duration::from_secs(5), || {
        rig.receipts.all().iter().any(|r| r.kind == "captain.outcome" && r.delivery_id == "777")
    })
    .await;
    let receipt = rig.receipts.all().into_iter().find(|r| r.kind == "captain.outcome" && r.delivery_id == "777").unwrap();
    assert_eq!(receipt.codes, ["failed", "captain_lane_unavailable"]);
    assert_eq!(receipt.counts["delivered"], 4, "given up on the fourth and last delivery");
    // Three failed tries waited 100, 200 and 400 ms (a tenth of the 1 s lease TTL, doubling).
    assert!(started.elapsed() >= std::time::Duration::from_millis(700), "no backoff: {:?}", started.elapsed());
    assert!(rig.replies().is_empty());

    rig.standin.script(Script::any(Reply::text("Still here.")));
    let next = rig.say("ada", "@Clankie still there?", true).await;
    rig.wait_outcomes(&[next]).await;
    assert_eq!(kind(&rig.outcome_of(next)[0]), v1::OutcomeKind::Replied);
    assert_eq!(rig.replies().len(), 1);
}

/// The server holds the captain's durable consumer with another deliver policy (an operator
/// made it by hand, or an older release did): the captain refuses to start, naming the
/// consumer, the field and the command that clears it, rather than consuming from the wrong place.
#[tokio::test]
async fn consumer_whose_deliver_policy_changed_is_refused_by_name_at_start() {
    let rig = Rig::new().await;
    let held = clankie_bus::ConsumerSpec::durable("captain", clankie_proto::Family::IngressText).deliver_new();
    drop(rig.bus.consumer::<v1::Ingress>(held).await.unwrap());
    let mut captain = super::spawn_captain(&rig, "captain-a");
    let status = tokio::time::timeout(std::time::Duration::from_secs(30), captain.wait()).await.expect("the captain gave up").unwrap();
    let log = std::fs::read_to_string(rig.dir.path().join("captain-a.log")).unwrap();
    println!("consumer refused: exit {:?}; {}", status.code(), log.lines().rev().find(|l| l.contains("consumer")).unwrap_or_default());
    assert!(!status.success(), "the captain started on a consumer it cannot change");
    assert!(
        log.contains("consumer captain of CLANKIE_INGRESS") && log.contains("deliver_policy") && log.contains("nats consumer rm"),
        "the refusal does not name the consumer, the field and the fix:\n{log}"
    );
}

/// A memory button whose custom id was altered to expire next year, on a message made longer
/// ago than a button lives: the press is refused as expired, and nothing is decided. The same
/// button on a message made now is the control.
#[tokio::test]
async fn button_a_custom_id_altered_to_live_longer_is_refused_by_its_messages_age() {
    let rig = Rig::new().await;
    const OWNER: u64 = 4343;
    let settings = clankie_store::OwnerSettings { owner_id: Some(OWNER), ..rig.store.owner_settings().await.unwrap() };
    rig.store.set_owner_settings(&settings).await.unwrap();
    let (_captain, _task) = rig.captain_with("captain-a", &[("CLANKIE_BUTTON_LIFETIME_MS", "60000".into())]).await;
    let memory = rig.store.add_memory("Raids are on Fridays.", clankie_store::MemoryStatus::Proposed, "cli").await.unwrap();
    let next_year = clankie_bus::now_ms() + 365 * 86_400_000;
    let snowflake = |at_ms: i64| ((at_ms as u64) - clankie_proto::time::DISCORD_EPOCH_MS) << 22;
    let press = |message_id: u64| v1::CommandRequest {
        interaction_id: format!("press-{message_id}"),
        command: "button".into(),
        custom_id: clankie_captain::commands::memory_button("approve", memory, next_year),
        user_id: OWNER,
        channel_id: 900,
        message_id,
        ..Default::default()
    };
    let ask = |req: v1::CommandRequest| {
        let bus = rig.bus.clone();
        async move {
            bus.request::<_, v1::CommandReply>(&clankie_proto::Subject::RpcCommand, &req, std::time::Duration::from_secs(20)).await.unwrap()
        }
    };
    // Made two minutes ago: its buttons lived one.
    let old = ask(press(snowflake(clankie_bus::now_ms() - 120_000))).await;
    assert_eq!(old.code, "expired", "{old:?}");
    let proposed = rig.store.memories(clankie_store::MemoryStatus::Proposed, 10).await.unwrap();
    assert!(proposed.iter().any(|m| m.id == memory), "an expired press decided the memory");
    let fresh = ask(press(snowflake(clankie_bus::now_ms() - 1_000))).await;
    assert_eq!(fresh.code, "", "{fresh:?}");
    let approved = rig.store.memories(clankie_store::MemoryStatus::Approved, 10).await.unwrap();
    assert!(approved.iter().any(|m| m.id == memory));
}
