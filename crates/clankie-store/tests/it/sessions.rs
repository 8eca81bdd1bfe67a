use std::time::Duration;

use clankie_proto::LaneKey;
use clankie_store::NewEntry;

#[tokio::test]
async fn a_session_tree_reads_back_in_append_order_with_its_parents() {
    let (store, _db) = super::store().await;
    let lane = LaneKey::Voice { guild: 3, channel: 4 };
    let lease = store.acquire_lease(&lane, "c", Duration::from_secs(60)).await.unwrap().unwrap();
    let tree = "rooms/voice:3:4";
    let mut parent = None;
    for (i, kind) in ["user", "assistant", "tool_result", "assistant"].iter().enumerate() {
        let e = NewEntry {
            id: format!("e{i}"),
            parent_id: parent.clone(),
            kind: (*kind).into(),
            body: serde_json::json!({ "i": i }),
            in_context: *kind != "tool_result" || i > 1,
        };
        store.append_entry(&lease, tree, &e).await.unwrap();
        parent = Some(e.id);
    }
    let entries = store.entries(tree).await.unwrap();
    assert_eq!(entries.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), ["e0", "e1", "e2", "e3"]);
    assert_eq!(entries[2].parent_id.as_deref(), Some("e1"));
    assert_eq!(entries[3].body["i"], 3);
    assert!(entries.windows(2).all(|w| w[0].seq < w[1].seq));
    // Ids are unique within a tree: appending e0 again is an error, not a second entry.
    let dup = NewEntry { id: "e0".into(), parent_id: None, kind: "user".into(), body: serde_json::json!({}), in_context: true };
    assert!(store.append_entry(&lease, tree, &dup).await.is_err());
    assert_eq!(store.entries(tree).await.unwrap().len(), 4);
}
