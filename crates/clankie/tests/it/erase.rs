//! `clankie self forget-user` against a running stack: a person's words leave PostgreSQL,
//! the lane's next request holds none of them, and other people's lines stay.

use clankie_model_standin::{Reply, Script};
use clankie_sandbox::rig::{GENERAL, Rig};
use clankie_store::{MemoryStatus, Store};
use serde_json::json;

/// The word she said that must be found nowhere once she is forgotten.
const CANARY: &str = "xylophonic";
const LOBBIES: u64 = 201;

/// How many rows of every table hold `needle` anywhere in them.
async fn rows_holding(store: &Store, needle: &str) -> Vec<(String, i64)> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    let mut holding = Vec::new();
    for t in tables {
        let sql = format!("SELECT count(*) FROM \"{t}\" x WHERE x::text ILIKE '%' || $1 || '%'");
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(needle).fetch_one(store.pool()).await.unwrap();
        if n > 0 {
            holding.push((t, n));
        }
    }
    holding
}

#[tokio::test]
async fn erase_forget_user_leaves_no_word_of_theirs_in_postgres_and_none_in_the_next_request() {
    let rig = Rig::new().await;
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    // Her words in history, in a message of hers, in a memory he proposed and one approved, in his tool call, in the voice ring.
    let aside = rig.say(GENERAL, "ada", "my cat is called xylophonic");
    // And in a room he has not spoken in yet: only Discord's history holds it.
    rig.say(LOBBIES, "ada", "xylophonic hates the vacuum");
    rig.say(LOBBIES, "bob", "bob-keeps-this lobby line");
    rig.say(GENERAL, "bob", "bob-keeps-this line, about snacks");
    let opener = rig.say(GENERAL, "bob", "@Clankie hello");
    rig.standin.script(Script::when("hello", Reply::text("Hi bob.")));
    rig.wait_outcomes(GENERAL, &[opener]).await;
    rig.standin.script(Script::when("remember", Reply::tool("propose_memory", json!({ "fact": "Ada's cat is called Xylophonic." }))));
    rig.standin.script(Script::when("remember", Reply::text("I'll ask to keep that.")));
    let asked = rig.say(GENERAL, "ada", "@Clankie remember that xylophonic is my cat");
    rig.wait_outcomes(GENERAL, &[asked]).await;
    let ada = rig.sandbox.discord.messages(GENERAL).into_iter().find(|m| m.id == aside).unwrap().author_id;
    let bob = rig.sandbox.discord.messages(GENERAL).into_iter().find(|m| m.id == opener).unwrap().author_id;
    let proposed = store.memories(MemoryStatus::Proposed, 10).await.unwrap();
    assert_eq!(proposed.len(), 1, "{proposed:?}");
    store.decide_memory(proposed[0].id, MemoryStatus::Proposed, MemoryStatus::Approved).await.unwrap();
    store.add_memory("Bob brings snacks on Fridays.", MemoryStatus::Approved, "cli").await.unwrap();
    for (who, id, name, text) in [("u1", ada, "ada", "xylophonic says hi"), ("u2", bob, "bob", "bob-keeps-this in voice")] {
        sqlx::query(
            "INSERT INTO voice_ring (room, delivery_id, source, author_id, author_name, is_him, text, at_ms)
             VALUES ('100:300', $1, 1, $2, $3, false, $4, 0)",
        )
        .bind(who)
        .bind(id.to_string())
        .bind(name)
        .bind(text)
        .execute(store.pool())
        .await
        .unwrap();
    }
    let before = rows_holding(&store, CANARY).await;
    for table in ["session_entries", "self_memory", "voice_ring"] {
        assert!(before.iter().any(|(t, _)| t == table), "the canary was never in {table}: {before:?}");
    }

    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"))
        .args(["self", "forget-user", &ada.to_string()])
        .env("CLANKIE_DATABASE_URL", &rig.settings.database_url)
        .env("CLANKIE_NATS_URL", &rig.nats_url)
        .env("CLANKIE_STATE_DIR", rig.settings.state_root.display().to_string())
        .output()
        .await
        .expect("clankie self forget-user");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    println!("{stdout}");
    // Her message and his whole answer to it (the tool call proposing the memory, its result,
    // his reply) go; her line leaves bob's opener's history block, and his answer to bob stays.
    assert!(stdout.contains("lanes 1, messages 1, blocks 1, answers 3 (kept 0 that answered others too)"), "{stdout}");
    assert!(stdout.contains("ring lines 1, memories 1"), "{stdout}");

    assert_eq!(rows_holding(&store, CANARY).await, [], "her word is still stored");
    for (table, left) in
        [("session_entries", "bob-keeps-this line"), ("voice_ring", "bob-keeps-this in voice"), ("self_memory", "Bob brings snacks")]
    {
        assert!(rows_holding(&store, left).await.iter().any(|(t, _)| t == table), "another person's words left {table}");
    }

    let from = rig.standin.requests().len();
    rig.standin.script(Script::when("what do you know", Reply::text("Not much.")));
    let next = rig.say(GENERAL, "bob", "@Clankie what do you know about cats?");
    rig.wait_outcomes(GENERAL, &[next]).await;
    let request = rig.standin.requests().into_iter().nth(from).expect("the next request");
    assert_eq!(request.count(CANARY) + request.count("Xylophonic"), 0, "her words reached the next request");
    assert_eq!(request.count("bob-keeps-this line"), 1, "bob's history line is gone from the lane");

    // A lane opening cold walks in with Discord's history, which still has her message: it is left out.
    let from = rig.standin.requests().len();
    let cold = rig.say(LOBBIES, "bob", "@Clankie what do you know about cats?");
    rig.wait_outcomes(LOBBIES, &[cold]).await;
    let request = rig.standin.requests().into_iter().nth(from).expect("the cold request");
    assert_eq!(request.count(CANARY), 0, "her old message came back as history");
    assert_eq!(request.count("bob-keeps-this lobby line"), 1, "the history block is there, without her line");
}
