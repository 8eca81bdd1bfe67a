use clankie_agent::{RunReply, Session, UserMessage};
use clankie_model_standin::{Reply, Script};

use super::{Rig, TREE, drain, fast, user};

/// A tool that reads a page of some 5,000 characters, past what a stub replaces.
struct LongPage;
impl clankie_agent::Tool for LongPage {
    fn spec(&self) -> clankie_agent::provider::ToolSpec {
        clankie_agent::provider::ToolSpec {
            name: "read_page".into(),
            description: "reads".into(),
            parameters: serde_json::json!({ "type": "object", "properties": {} }),
        }
    }
    fn execute<'a>(
        &'a self,
        _arguments: serde_json::Value,
        _ctx: clankie_agent::ToolContext,
    ) -> futures::future::BoxFuture<'a, Result<String, clankie_agent::ToolError>> {
        Box::pin(async { Ok(format!("BRACKET {}", "x".repeat(5_000))) })
    }
}

#[tokio::test]
async fn a_session_reloaded_from_the_store_gives_the_identical_model_context() {
    let rig = Rig::new().await;
    rig.standin.script(Script::any(Reply::tool("missing_tool", serde_json::json!({"x": 1}))));
    rig.standin.script(Script::any(Reply::text("first answer")));
    rig.standin.script(Script::any(Reply::text("second answer")));
    let agent = rig.agent(fast());
    let run = agent.start(rig.session().await, "sys".into(), vec![user("1", "first question")]);
    let (_, first) = drain(run).await;
    assert_eq!(first.outcome.unwrap(), RunReply::Words("first answer".into()));
    let run = agent.start(first.session, "sys".into(), vec![user("2", "second question")]);
    let (_, second) = drain(run).await;
    assert_eq!(second.outcome.unwrap(), RunReply::Words("second answer".into()));

    let live = second.session.context();
    let reloaded = Session::open(rig.store.clone(), second.session.lease().clone(), TREE).await.unwrap();
    assert_eq!(reloaded.context(), live);
    assert_eq!(reloaded.entries(), second.session.entries());
    // user, assistant(tool call), tool result (an error: no such tool), assistant, user, assistant
    assert_eq!(live.len(), 6, "{live:#?}");

    // And the next model request built from the reloaded session is what a warm one would send.
    rig.standin.script(Script::any(Reply::text("third")));
    let run = agent.start(reloaded, "sys".into(), vec![user("3", "third question")]);
    let (_, third) = drain(run).await;
    third.outcome.unwrap();
    let requests = rig.standin.requests();
    let last = requests.last().unwrap();
    assert_eq!(last.messages().len(), 1 + live.len() + 1, "system, the whole history, the new question");
    assert_eq!(last.count("first question"), 1);
}

/// A turn's note and its burst reach the model as one user message, and that message is sent
/// again unchanged once it has been answered: the merge never moves what a cache already holds.
#[tokio::test]
async fn prefix_stable_a_turns_user_entries_are_one_message_sent_again_unchanged() {
    let rig = Rig::new().await;
    rig.standin.script(Script::any(Reply::text("first answer")));
    rig.standin.script(Script::any(Reply::text("second answer")));
    let agent = rig.agent(fast());
    let first_turn = vec![UserMessage::new("self context", "", "<note>"), user("1", "burst one"), user("2", "burst two")];
    let (_, first) = drain(agent.start(rig.session().await, "sys".into(), first_turn)).await;
    first.outcome.unwrap();
    let (_, second) = drain(agent.start(first.session, "sys".into(), vec![user("3", "next")])).await;
    second.outcome.unwrap();

    let requests = rig.standin.requests();
    let (before, after) = (requests[0].messages(), requests[1].messages());
    assert_eq!(before.len(), 2, "the system prompt and one user message: {before:#?}");
    assert_eq!(before[1]["content"], "<note>\nburst one\nburst two");
    assert_eq!(&after[..2], before, "the second request starts with the first unchanged");
    assert_eq!(after.iter().map(|m| m["role"].as_str().unwrap()).collect::<Vec<_>>(), ["system", "user", "assistant", "user"]);
    assert_eq!(second.session.entries().len(), 6, "the store still holds each entry on its own");
}

#[tokio::test]
async fn a_stale_lease_cannot_extend_a_session() {
    let rig = Rig::new().await;
    let stale = rig.session().await;
    let lease = stale.lease().clone();
    rig.store.release_lease(&lease).await.unwrap();
    let _taken = rig.store.acquire_lease(&rig.lane, "other", std::time::Duration::from_secs(60)).await.unwrap().unwrap();
    let run = rig.agent(fast()).start(stale, "sys".into(), vec![user("1", "hi")]);
    let (_, result) = drain(run).await;
    assert!(matches!(result.outcome, Err(clankie_agent::AgentError::Store(clankie_store::StoreError::Fenced { .. }))));
    assert!(rig.standin.requests().is_empty(), "nothing was sent for a lane this replica no longer owns");
}

/// A page read for one answer stays whole in the conversation until the next compaction, so
/// every later request repeats the earlier ones byte for byte (a prompt cache serves them);
/// the compaction, which rewrites the conversation's start anyway, makes it a stub.
#[tokio::test]
async fn a_long_tool_result_stays_whole_until_a_compaction_makes_it_a_stub() {
    let rig = Rig::new().await;
    for reply in [
        Reply::text("Hello."),
        Reply::tool("read_page", serde_json::json!({})),
        Reply::text("Lobby 4 at eight."),
        Reply::text("You're welcome."),
        Reply::text("SUMMARY: ada said hello."),
        Reply::text("Noted."),
    ] {
        rig.standin.script(Script::any(reply));
    }
    // The page (about 1,260 tokens) fits the budget; the long fourth message tips it over, and
    // what is kept reaches back to the page's turn.
    let mut config = fast();
    config.compaction = clankie_agent::compaction::CompactionPolicy { budget_tokens: 1_500, keep_recent_tokens: 1_700 };
    let agent = rig.agent(config);
    let tools = vec![super::arc(LongPage)];
    let mut session = rig.session().await;
    let mut last = None;
    for (n, text) in ["hello", "when is lobby 4?", "thanks", &"a long note about the bracket ".repeat(70)].into_iter().enumerate() {
        let run = agent.start_with_tools(session, "sys".into(), vec![user(&n.to_string(), text)], tools.clone());
        let (_, result) = drain(run).await;
        result.outcome.unwrap();
        session = result.session;
        last = Some(result.stats);
    }

    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 6, "four turns, one tool round, one compaction");
    assert_eq!(requests[2].count("BRACKET"), 1, "the run that read the page sees it whole");
    assert_eq!(requests[3].count("BRACKET"), 1, "the next turn sees it as it was");
    println!(
        "sessions: the page's last request {} tokens; the next turn's {} of which {} repeated",
        requests[2].token_estimate, requests[3].token_estimate, requests[3].cached_estimate
    );
    assert!(requests[3].cached_estimate >= requests[2].token_estimate, "the next turn repeats the last request whole");
    assert!(requests[4].all_text().contains("Summarise"), "the fifth call is the compaction");
    assert_eq!(requests[5].count("SUMMARY: ada said hello."), 1, "the turn after it reads the summary");
    assert_eq!(requests[5].count("BRACKET"), 0, "a page the compaction kept is a stub from then on");
    assert_eq!(requests[5].count("the read_page result from an earlier turn, 5008 characters, is no longer shown"), 1);
    // usage: the compaction's call is the turn's, counted in what its receipt is made from.
    let stats = last.unwrap();
    assert_eq!(stats.model_calls, 2, "the compaction and the answer");
    assert_eq!(stats.input_tokens, requests[4].token_estimate + requests[5].token_estimate, "the compaction's input is billed to its turn");
    // The stored session keeps the page: a reload still has it.
    assert!(session.context().iter().any(|m| format!("{m:?}").contains("BRACKET")));
}

/// A run whose own page tipped the lane over its budget compacts and answers with the page whole;
/// the next turn shows it whole too, so it repeats that run's last request byte for byte and
/// writes only what it adds. Stubbing the page there would rewrite everything after it.
#[tokio::test]
async fn prefix_stable_the_turn_after_a_compaction_repeats_the_compacting_runs_last_request() {
    let rig = Rig::new().await;
    for reply in [
        Reply::text("Hello."),
        Reply::tool("read_page", serde_json::json!({})),
        Reply::text("SUMMARY: ada left a long note."),
        Reply::text("Lobby 4 at eight."),
        Reply::text("You're welcome."),
    ] {
        rig.standin.script(Script::any(reply));
    }
    // The note (about 530 tokens) and the page (about 1,260) together outgrow the budget once the
    // page is read; what the compaction keeps (the page's turn, some 1,300) fits it.
    let mut config = fast();
    config.compaction = clankie_agent::compaction::CompactionPolicy { budget_tokens: 1_500, keep_recent_tokens: 1_700 };
    let agent = rig.agent(config);
    let tools = vec![super::arc(LongPage)];
    let mut session = rig.session().await;
    for (n, text) in [&"a long note about the bracket ".repeat(70), "when is lobby 4?", "thanks"].into_iter().enumerate() {
        let run = agent.start_with_tools(session, "sys".into(), vec![user(&n.to_string(), text)], tools.clone());
        let (_, result) = drain(run).await;
        result.outcome.unwrap();
        session = result.session;
    }

    let requests = rig.standin.requests();
    assert_eq!(requests.len(), 5, "three turns, one tool round, one compaction");
    assert!(requests[2].all_text().contains("Summarise"), "the page's run compacts before its answer");
    assert_eq!(requests[3].count("BRACKET"), 1, "the run that read the page answers with it whole");
    assert_eq!(requests[4].count("BRACKET"), 1, "the next turn shows it as that run did");
    println!(
        "sessions: the compacting run's last request {} tokens; the next turn's {} of which {} repeated",
        requests[3].token_estimate, requests[4].token_estimate, requests[4].cached_estimate
    );
    assert!(requests[4].cached_estimate >= requests[3].token_estimate, "the next turn repeats the compacting run's last request whole");
}

/// A copy kept from an earlier epoch and refreshed under a later one holds what opening the
/// tree afresh would: what other replicas appended since, and nothing a run that never
/// finished wrote.
#[tokio::test]
async fn warm_across_replicas_a_refreshed_copy_equals_the_tree_opened_afresh() {
    use clankie_agent::EntryBody;
    use clankie_store::{TurnMode, TurnStart};
    let rig = Rig::new().await;
    let ttl = std::time::Duration::from_secs(60);
    let said = |text: &str, id: &str| EntryBody::User {
        author: "ada".into(),
        delivery_id: id.into(),
        text: text.into(),
        images: vec![],
        lines: vec![],
    };
    let mut kept = rig.session().await;
    kept.append(said("kept question", "1")).await.unwrap();
    rig.store.release_lease(kept.lease()).await.unwrap();

    // Another replica's run dies after writing: its epoch is abandoned once the lane moves on.
    let dead = rig.store.acquire_lease(&rig.lane, "dead", ttl).await.unwrap().unwrap();
    let start = TurnStart { turn_id: "dead-turn".into(), mode: TurnMode::Durable, owner_delivery_id: "2".into() };
    rig.store.start_turn(&dead, &start).await.unwrap();
    let mut other = Session::open(rig.store.clone(), dead.clone(), TREE).await.unwrap();
    other.append(said("words of a run that died", "2")).await.unwrap();
    rig.store.release_lease(&dead).await.unwrap();

    // A third replica answers on.
    let next = rig.store.acquire_lease(&rig.lane, "next", ttl).await.unwrap().unwrap();
    let mut other = Session::open(rig.store.clone(), next.clone(), TREE).await.unwrap();
    other.append(said("an answered question", "3")).await.unwrap();
    rig.store.release_lease(&next).await.unwrap();

    let lease = rig.store.acquire_lease(&rig.lane, "test", ttl).await.unwrap().unwrap();
    let read = kept.refresh(lease.clone()).await.unwrap();
    assert_eq!(read, 2, "it reads only what was appended after its copy");
    let fresh = Session::open(rig.store.clone(), lease, TREE).await.unwrap();
    assert_eq!(kept.entries(), fresh.entries());
    assert_eq!(kept.context(), fresh.context());
    let texts: Vec<String> = kept.context().iter().map(|m| format!("{m:?}")).collect();
    assert!(texts.iter().all(|t| !t.contains("a run that died")), "{texts:?}");
    assert_eq!(kept.newest_delivery(), Some(3));
    // Its next write lands after what it read.
    kept.append(said("and now", "4")).await.unwrap();
    let again = Session::open(rig.store.clone(), kept.lease().clone(), TREE).await.unwrap();
    assert_eq!(again.entries(), kept.entries());
}

/// The retention sweep takes an abandoned turn once it is older than the retention; the entries
/// its epoch hid go with it, so the next open still reads none of a dead run's words.
#[tokio::test]
async fn retention_an_abandoned_turn_aged_past_retention_still_keeps_its_epoch_out_of_the_next_session_open() {
    use clankie_agent::EntryBody;
    use clankie_store::{Retention, TurnMode, TurnStart};
    let rig = Rig::new().await;
    let ttl = std::time::Duration::from_secs(60);
    let said = |text: &str, id: &str| EntryBody::User {
        author: "ada".into(),
        delivery_id: id.into(),
        text: text.into(),
        images: vec![],
        lines: vec![],
    };
    let mut first = rig.session().await;
    first.append(said("an early question", "1")).await.unwrap();
    rig.store.release_lease(first.lease()).await.unwrap();
    let dead = rig.store.acquire_lease(&rig.lane, "dead", ttl).await.unwrap().unwrap();
    rig.store
        .start_turn(&dead, &TurnStart { turn_id: "dead-turn".into(), mode: TurnMode::Durable, owner_delivery_id: "2".into() })
        .await
        .unwrap();
    let mut dying = Session::open(rig.store.clone(), dead.clone(), TREE).await.unwrap();
    dying.append(said("words of a run that died", "2")).await.unwrap();
    rig.store.release_lease(&dead).await.unwrap();
    let next = rig.store.acquire_lease(&rig.lane, "next", ttl).await.unwrap().unwrap();
    let mut answered = Session::open(rig.store.clone(), next.clone(), TREE).await.unwrap();
    answered.append(said("a later question", "3")).await.unwrap();
    rig.store.release_lease(&next).await.unwrap();

    // Twenty days on, the dead run and what it wrote are older than a week's retention.
    let pool = rig.store.pool();
    sqlx::query("UPDATE turns SET started_at = now() - interval '20 days' WHERE turn_id = 'dead-turn'").execute(pool).await.unwrap();
    sqlx::query("UPDATE session_entries SET created_at = now() - interval '20 days' WHERE epoch = $1")
        .bind(dead.epoch)
        .execute(pool)
        .await
        .unwrap();
    let week = std::time::Duration::from_secs(7 * 86_400);
    let swept = rig.store.sweep(&Retention { receipts: week, records: week, replaced_entries: week, batch: 100 }).await.unwrap();
    println!("retention: swept {swept:?}");
    let open_turns: i64 = sqlx::query_scalar("SELECT count(*) FROM turns WHERE turn_id = 'dead-turn'").fetch_one(pool).await.unwrap();
    assert_eq!(open_turns, 0, "the abandoned turn was not swept, so this test shows nothing");

    let lease = rig.store.acquire_lease(&rig.lane, "test", ttl).await.unwrap().unwrap();
    let opened = Session::open(rig.store.clone(), lease, TREE).await.unwrap();
    let texts: Vec<String> = opened.context().iter().map(|m| format!("{m:?}")).collect();
    assert!(texts.iter().all(|t| !t.contains("a run that died")), "the dead run's words read as conversation: {texts:?}");
    assert!(texts.iter().any(|t| t.contains("an early question")) && texts.iter().any(|t| t.contains("a later question")), "{texts:?}");
    assert_eq!(swept.abandoned_entries, 1, "{swept:?}");
}

/// A forget leaves his answer to a turn he shared with the forgotten person, marked: the model
/// reads the answer as it was, then a note that someone it answered is gone, once per turn and
/// never between a tool call and its result.
#[tokio::test]
async fn erase_an_answer_marked_for_someone_forgotten_is_followed_by_a_note_to_the_model() {
    use clankie_agent::EntryBody;
    use clankie_agent::provider::{ChatMessage, ToolCall};
    let rig = Rig::new().await;
    let mut session = rig.session().await;
    let answer = |text: &str, tool_calls: Vec<ToolCall>, marked: bool| EntryBody::Assistant {
        text: text.into(),
        stop_reason: if tool_calls.is_empty() { "stop" } else { "tool_calls" }.into(),
        tool_calls,
        usage: Default::default(),
        provider_error: None,
        forgotten_asker: marked,
    };
    let call = ToolCall { id: "c1".into(), name: "read_page".into(), arguments: "{}".into() };
    let entries = [
        EntryBody::User { author: "ada".into(), delivery_id: "1".into(), text: "lunch?".into(), images: vec![], lines: vec![] },
        answer("", vec![call], true),
        EntryBody::ToolResult { call_id: "c1".into(), name: "read_page".into(), content: "menu".into(), is_error: false },
        answer("Lunch for you both.", vec![], true),
        EntryBody::User { author: "ada".into(), delivery_id: "2".into(), text: "and dinner?".into(), images: vec![], lines: vec![] },
        answer("Dinner at eight.", vec![], false),
    ];
    for e in entries {
        session.append(e).await.unwrap();
    }
    let roles: Vec<String> = session
        .context()
        .iter()
        .map(|m| match m {
            ChatMessage::User { text, .. } => format!("user: {text}"),
            ChatMessage::Assistant { text, tool_calls } => format!("assistant: {text} ({} calls)", tool_calls.len()),
            ChatMessage::Tool { content, .. } => format!("tool: {content}"),
        })
        .collect();
    assert_eq!(
        roles,
        [
            "user: lunch?".to_owned(),
            "assistant:  (1 calls)".into(),
            "tool: menu".into(),
            "assistant: Lunch for you both. (0 calls)".into(),
            format!("user: {}\nand dinner?", clankie_agent::FORGOTTEN_ASKER_NOTE),
            "assistant: Dinner at eight. (0 calls)".into(),
        ]
    );
}

#[tokio::test]
async fn a_stored_answer_leaves_out_its_empty_parts_and_reads_back_whole() {
    let rig = Rig::new().await;
    rig.standin.script(Script::any(Reply::text("plain answer")));
    let agent = rig.agent(fast());
    let (_, done) = drain(agent.start(rig.session().await, "sys".into(), vec![user("1", "a question")])).await;
    assert_eq!(done.outcome.unwrap(), RunReply::Words("plain answer".into()));
    let stored = rig.store.entries(TREE).await.unwrap();
    let answer = &stored.iter().find(|e| e.kind == "assistant").expect("the answer is stored").body;
    for empty in ["tool_calls", "provider_error", "reasoning_tokens", "cache_write_input_tokens"] {
        assert!(answer.get(empty).is_none() && answer["usage"].get(empty).is_none(), "{empty} stored: {answer}");
    }
    let reloaded = Session::open(rig.store.clone(), done.session.lease().clone(), TREE).await.unwrap();
    assert_eq!(reloaded.context(), done.session.context(), "the lean body reads back as the answer it was");
    // A body stored whole before still reads.
    let whole = serde_json::json!({"type": "assistant", "text": "t", "tool_calls": [], "stop_reason": "stop",
        "usage": {"input_tokens": 5, "output_tokens": 1, "cached_input_tokens": 0, "reasoning_tokens": 0, "cache_write_input_tokens": 0},
        "provider_error": null});
    let lean: clankie_agent::EntryBody = serde_json::from_value(whole).unwrap();
    assert_eq!(serde_json::to_value(&lean).unwrap(), serde_json::json!({"type": "assistant", "text": "t", "stop_reason": "stop",
        "usage": {"input_tokens": 5, "output_tokens": 1}}));
}
