//! `clankie audit`: the stored invariants of a whole-stack run, counted, and each broken on
//! purpose to see it reported.

use std::time::Duration;

use clankie_proto::{ReceiptKind, v1};
use clankie_sandbox::rig::{GENERAL, Rig, until};

async fn audit(rig: &Rig) -> (bool, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"))
        .args(["audit", "--settle-ms", "0"])
        .env("CLANKIE_DATABASE_URL", &rig.settings.database_url)
        .env("CLANKIE_NATS_URL", &rig.nats_url)
        .output()
        .await
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn figure(out: &str, name: &str) -> i64 {
    out.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))).and_then(|v| v.trim().parse().ok()).unwrap_or(-1)
}

#[tokio::test]
async fn audit_counts_the_invariants_and_reports_each_broken_one() {
    let rig = Rig::new().await;
    let ids = [rig.say(GENERAL, "ada", "@Clankie hello"), rig.say(GENERAL, "bob", "@Clankie and me?")];
    for id in ids {
        rig.wait_outcomes(GENERAL, &[id]).await;
    }
    let store = clankie_store::Store::connect(&rig.settings.database_url).await.unwrap();
    // Receipts reach PostgreSQL through the captain's recorder: wait until the gateway's are in.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let clean = loop {
        let (ok, out) = audit(&rig).await;
        if figure(&out, "ingress_deliveries") == 2 && figure(&out, "replies_posted") >= 1 {
            break (ok, out);
        }
        assert!(tokio::time::Instant::now() < deadline, "the receipts never reached the store: {out}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!("{}", clean.1);
    assert!(clean.0, "a clean run fails the audit: {}", clean.1);
    assert_eq!(figure(&clean.1, "deliveries_with_outcome"), 2);
    assert_eq!(figure(&clean.1, "deliveries_without_outcome"), 0);
    assert_eq!(figure(&clean.1, "replies_posted_twice"), 0);
    assert_eq!(figure(&clean.1, "outbox_unsent_past_bound"), 0);

    // A committed post nobody published: reported. (Fresh, so no relay takes it before the audit.)
    let lane = clankie_proto::LaneKey::Room { guild: 100, channel: GENERAL }.to_string();
    sqlx::query("INSERT INTO outbox (id, lane, turn_id, subject, payload) VALUES ('reply:stuck', $1, 'stuck', 'clankie.test.nowhere', '')")
        .bind(&lane)
        .execute(store.pool())
        .await
        .unwrap();
    let (ok, out) = audit(&rig).await;
    assert!(!ok, "an unpublished outbox row passed the audit: {out}");
    assert_eq!(figure(&out, "outbox_unsent_past_bound"), 1);
    sqlx::query("DELETE FROM outbox WHERE id = 'reply:stuck'").execute(store.pool()).await.unwrap();

    // A delivery loses its outcome: reported, and the audit fails.
    sqlx::query("DELETE FROM deliveries WHERE delivery_id = $1").bind(ids[1].to_string()).execute(store.pool()).await.unwrap();
    let (ok, out) = audit(&rig).await;
    assert!(!ok, "a lost outcome passed the audit: {out}");
    assert_eq!(figure(&out, "deliveries_without_outcome"), 1);

    // A turn's reply posted as a second message: reported.
    let posted = store.receipts_for_delivery(&ids[0].to_string()).await.unwrap();
    let first = posted.iter().map(|s| &s.receipt).find(|r| r.kind == "gateway.posted").expect("the reply's receipt").clone();
    let mut second = v1::Receipt::new(&ReceiptKind::new("gateway.posted").unwrap(), "gateway", &first.delivery_id, clankie_bus::now_ms());
    second.ids = first.ids.clone();
    second.ids.insert("message".into(), "999999999".into());
    second.codes = first.codes.clone();
    let bus = rig.bus().await;
    bus.publish_receipt(&second).await.unwrap();
    until("the doubled reply in the audit", Duration::from_secs(20), || {
        std::thread::sleep(Duration::from_millis(100));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_clankie"))
            .args(["audit", "--settle-ms", "0"])
            .env("CLANKIE_DATABASE_URL", &rig.settings.database_url)
            .output()
            .unwrap();
        figure(&String::from_utf8_lossy(&out.stdout), "replies_posted_twice") == 1
    })
    .await;
}
