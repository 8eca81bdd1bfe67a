//! `erase_` over generated lanes: rooms of several people (history blocks, messages steered
//! into a turn, corrections, his tool calls and results, compaction summaries), their
//! messages on the bus and their pictures in the media root, then one of them forgotten
//! through `/clankie forget-me`. Each case is drawn from a seed it prints; the count is
//! `CLANKIE_ERASE_CASES` (3 in CI; the long mode runs more).

use std::collections::BTreeSet;
use std::time::Duration;

use clankie_agent::provider::{ChatMessage, ToolCall};
use clankie_agent::{EntryBody, Session};
use clankie_discord_loopback::Loopback;
use clankie_discord_loopback::interactions::RunCommand;
use clankie_proto::{LaneKey, Subject, v1};
use clankie_self::blocks;
use clankie_store::Store;

use crate::{GENERAL, Rig, until};

/// splitmix64: a generator whose seed reproduces the case.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone)]
struct Person {
    name: String,
    id: u64,
}

/// What forgetting the target must do to one stored entry.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    /// Not theirs and not an answer to them: byte for byte as it was.
    Same,
    /// His answer to a turn they shared with others: word for word as it was, marked.
    Marked,
    /// Their message or correction, or his entry of a turn only they asked: withdrawn.
    Withdrawn,
    /// A history block with lines of theirs: those lines go, the others stay.
    Lines { kept: Vec<u64>, kept_words: Vec<String> },
    /// A summary of what came before their turn, written from their words too: it says only
    /// that it is withdrawn, and still keeps the same entries on.
    Summary { first_kept_id: String },
}

/// One generated case: who is in it, and the canary words each used.
struct World {
    target: Person,
    /// Each entry written, in order per tree, with what must become of it.
    expected: Vec<(String, Expect)>,
    channels: Vec<u64>,
    target_words: String,
    others_words: Vec<String>,
    shared_picture: Vec<u8>,
    /// Who sent the picture both may send: (the target, anyone else).
    shared_sent_by: (bool, bool),
    /// The trees the target's words were written into so far: a summary of what came before
    /// a later turn is written from them too.
    target_in: BTreeSet<String>,
    /// Summaries written with their words in them.
    their_summaries: usize,
}

fn said<'a>(p: &'a Person, text: &'a str) -> blocks::Said<'a> {
    blocks::Said { author_name: &p.name, author_id: p.id, text }
}

fn his(text: String, calls: Vec<ToolCall>) -> EntryBody {
    let stop_reason = if calls.is_empty() { "stop" } else { "tool_calls" };
    EntryBody::Assistant {
        text,
        tool_calls: calls,
        stop_reason: stop_reason.into(),
        usage: Default::default(),
        provider_error: None,
        forgotten_asker: false,
    }
}

/// Writes one case: its lanes through the agent's own session writer, its messages onto the
/// bus and its pictures into the media root, as the services would have.
struct Writer<'a> {
    case: u64,
    draw: Draw,
    world: World,
    everyone: Vec<Person>,
    next: u64,
    root: clankie_media::Root,
    bus: &'a clankie_bus::Bus,
}

impl Writer<'_> {
    fn id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// The target in two of five picks, so turns of theirs alone and shared ones both come up.
    fn pick(&mut self) -> Person {
        if self.draw.chance(40) { self.everyone[0].clone() } else { self.everyone[1 + self.draw.below(3) as usize].clone() }
    }

    fn is_target(&self, p: &Person) -> bool {
        p.id == self.world.target.id
    }

    async fn write(&mut self, session: &mut Session, body: EntryBody, expect: Expect) -> usize {
        if serde_json::to_string(&body).is_ok_and(|b| b.contains(&self.world.target_words)) {
            self.world.target_in.insert(session.tree().to_owned());
        }
        session.append(body).await.expect("an entry written");
        self.world.expected.push((session.tree().to_owned(), expect));
        self.world.expected.len() - 1
    }

    async fn history(&mut self, session: &mut Session) {
        let mut lines = Vec::new();
        for _ in 0..1 + self.draw.below(3) {
            let (p, id) = (self.pick(), self.id());
            let words = format!("canary-{}-{id} said in passing", p.name);
            lines.push((p, id, words));
        }
        let shown: Vec<blocks::Line<'_>> =
            lines.iter().map(|(p, _, w)| blocks::Line { said: said(p, w), is_him: false, how: "" }).collect();
        let text = blocks::history(&shown, 0).expect("a history block");
        let kept: Vec<&(Person, u64, String)> = lines.iter().filter(|(p, _, _)| !self.is_target(p)).collect();
        let expect = if kept.len() == lines.len() {
            Expect::Same
        } else {
            Expect::Lines {
                kept: kept.iter().map(|(_, id, _)| *id).collect(),
                kept_words: kept.iter().map(|(_, _, w)| w.clone()).collect(),
            }
        };
        let ids = lines.iter().map(|(_, id, _)| *id).collect();
        let body = EntryBody::User { author: "channel history".into(), delivery_id: String::new(), text, images: vec![], lines: ids };
        self.write(session, body, expect).await;
    }

    /// A message of `p`'s in the lane, and as the gateway published it, now and then with a picture.
    async fn message(&mut self, session: &mut Session, channel: u64, p: &Person, turn: u64) -> u64 {
        let id = self.id();
        let words = format!("canary-{}-{id} asks about turn {turn}", p.name);
        let text = blocks::message(&said(p, &words), &[]);
        let expect = if self.is_target(p) { Expect::Withdrawn } else { Expect::Same };
        let body = EntryBody::User { author: p.name.clone(), delivery_id: id.to_string(), text, images: vec![], lines: vec![] };
        self.write(session, body, expect).await;
        let mut attachments = Vec::new();
        if self.draw.chance(30) {
            let (artifact, _) = self.root.store(format!("pixels of {words}").as_bytes(), "p.png", "image/png").unwrap();
            self.root.index_attachment(id, &artifact).unwrap();
            attachments.push(v1::Attachment { id, filename: "p.png".into(), content_type: "image/png".into(), ..Default::default() });
        }
        if turn == 0 && self.draw.chance(50) {
            // The same picture as someone else sent: its file stays while their attachment refers to it.
            let (artifact, _) = self.root.store(&self.world.shared_picture, "both.png", "image/png").unwrap();
            let shared = id + 50_000;
            if self.is_target(p) {
                self.world.shared_sent_by.0 = true;
            } else {
                self.world.shared_sent_by.1 = true;
            }
            self.root.index_attachment(shared, &artifact).unwrap();
            attachments.push(v1::Attachment {
                id: shared,
                filename: "both.png".into(),
                content_type: "image/png".into(),
                ..Default::default()
            });
        }
        let ingress = v1::Ingress {
            delivery_id: id.to_string(),
            guild_id: Some(100),
            channel_id: channel,
            author_id: p.id,
            author_name: p.name.clone(),
            content: words,
            attachments,
            ..Default::default()
        };
        self.bus.publish(&Subject::ingress_text(Some(100), channel), &ingress, None).await.expect("published");
        id
    }

    /// What he says: the target's words only in a turn of theirs alone.
    fn quote(&self, askers: &BTreeSet<u64>, messages: &[(Person, u64)]) -> String {
        if askers.len() == 1 && askers.contains(&self.world.target.id) {
            format!("You asked canary-{}-{}, alone.", messages[0].0.name, messages[0].1)
        } else {
            match messages.iter().find(|(p, _)| !self.is_target(p)) {
                Some((p, id)) => format!("For everyone: canary-{}-{id} noted.", p.name),
                None => "Noted.".into(),
            }
        }
    }

    async fn turn(&mut self, session: &mut Session, channel: u64, turn: u64) {
        if self.draw.chance(30) {
            self.history(session).await;
        }
        // What a summary keeping this turn on would stand for: all before its first message.
        let target_before = self.world.target_in.contains(session.tree());
        let (mut askers, mut messages) = (BTreeSet::new(), Vec::new());
        for _ in 0..1 + self.draw.below(2) {
            let p = self.pick();
            let id = self.message(session, channel, &p, turn).await;
            askers.insert(p.id);
            messages.push((p, id));
        }
        let first = messages[0].1.to_string();
        // His answer: tool rounds, a message steered in or a correction now and then.
        // Who will be steered in is drawn first: he quotes the target only in a turn that stays
        // theirs alone (his words in a turn shared with others stay, quotes and all, marked).
        let rounds = self.draw.below(3);
        let steered = (rounds > 0 && self.draw.chance(30)).then(|| self.pick());
        let mut answering = askers.clone();
        answering.extend(steered.iter().map(|p| p.id));
        let mut his_entries = Vec::new();
        for round in 0..rounds {
            let q = self.quote(&answering, &messages);
            let call = ToolCall {
                id: format!("call-{}", self.id()),
                name: "read_page".into(),
                arguments: serde_json::json!({ "url": format!("http://x/{q}") }).to_string(),
            };
            his_entries.push((self.write(session, his(String::new(), vec![call.clone()]), Expect::Same).await, true));
            let result = EntryBody::ToolResult { call_id: call.id, name: call.name, content: format!("page about {q}"), is_error: false };
            his_entries.push((self.write(session, result, Expect::Same).await, false));
            if let (0, Some(p)) = (round, steered.clone()) {
                let id = self.message(session, channel, &p, turn).await;
                askers.insert(p.id);
                messages.push((p, id));
            }
            if self.draw.chance(25) {
                let (p, id) = messages[self.draw.below(messages.len() as u64) as usize].clone();
                let words = format!("canary-{}-{id} corrected", p.name);
                let block = blocks::message(&said(&p, &words), &[("edited", "true")]);
                let text = format!("{block}\n(A correction: its author edited an earlier message, which now reads as above.)");
                let expect = if self.is_target(&p) { Expect::Withdrawn } else { Expect::Same };
                let delivery_id = format!("edit:{id}:{}", self.id());
                let body = EntryBody::User { author: p.name.clone(), delivery_id, text, images: vec![], lines: vec![] };
                self.write(session, body, expect).await;
            }
        }
        let q = self.quote(&askers, &messages);
        his_entries.push((self.write(session, his(q, vec![]), Expect::Same).await, true));
        if askers.contains(&self.world.target.id) {
            let alone = askers.len() == 1;
            for (at, answer) in his_entries {
                if alone {
                    self.world.expected[at].1 = Expect::Withdrawn;
                } else if answer {
                    self.world.expected[at].1 = Expect::Marked;
                }
            }
        }
        // Now and then the room is compacted, keeping this turn on.
        if turn > 0 && self.draw.chance(25) {
            let kept = session.entries().iter().find(|e| matches!(&e.body, EntryBody::User { delivery_id, .. } if *delivery_id == first));
            if let Some(kept) = kept.map(|e| e.id.clone()) {
                // As a model writes it: from what was said, theirs too once they spoke here.
                let (summary, expect) = if target_before {
                    self.world.their_summaries += 1;
                    let expect = Expect::Summary { first_kept_id: kept.clone() };
                    (format!("What came before: {}summary{turn} asked about the weather.", self.world.target_words), expect)
                } else {
                    ("What came before, in general terms.".to_owned(), Expect::Same)
                };
                let body = EntryBody::Compaction { summary, first_kept_id: kept };
                self.write(session, body, expect).await;
            }
        }
    }
}

async fn generate(case: u64, draw: Draw, rig: &Rig, store: &Store, bus: &clankie_bus::Bus) -> World {
    let person = |tag: &str| {
        let name = format!("erase{case}{tag}");
        Person { id: Loopback::user_id(&name), name }
    };
    let target = person("x");
    let others = vec![person("a"), person("b"), person("c")];
    let world = World {
        target_words: format!("canary-{}-", target.name),
        others_words: others.iter().map(|p| format!("canary-{}-", p.name)).collect(),
        target: target.clone(),
        expected: Vec::new(),
        channels: Vec::new(),
        shared_picture: format!("a picture both sent, case {case}").into_bytes(),
        shared_sent_by: (false, false),
        target_in: BTreeSet::new(),
        their_summaries: 0,
    };
    let everyone = std::iter::once(target).chain(others).collect();
    let root = clankie_media::Root::open(rig.attachment_root.clone()).expect("the media root");
    let mut w = Writer { case, draw, world, everyone, next: case * 100_000, root, bus };
    for l in 0..1 + w.draw.below(3) {
        let channel = 50_000 + w.case * 10 + l;
        w.world.channels.push(channel);
        let lane = LaneKey::Room { guild: 100, channel };
        let lease = store.acquire_lease(&lane, "erase-test", Duration::from_secs(60)).await.unwrap().expect("the lane's lease");
        let mut session = Session::open(store.clone(), lease.clone(), format!("rooms/{lane}")).await.expect("a new session");
        for turn in 0..2 + w.draw.below(5) {
            w.turn(&mut session, channel, turn).await;
        }
        store.release_lease(&lease).await.unwrap();
    }
    w.world
}

/// Rows of `session_entries` as they are stored: (seq, tree, kind, body, in context).
async fn rows(store: &Store) -> Vec<(i64, String, String, String, bool)> {
    sqlx::query_as("SELECT seq, tree, kind, body::text, in_context FROM session_entries ORDER BY seq")
        .fetch_all(store.pool())
        .await
        .unwrap()
}

/// Rows of any table of the store whose text holds `words`.
async fn in_postgres(store: &Store, words: &str) -> i64 {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    let mut n = 0;
    for t in tables {
        let sql = format!("SELECT count(*) FROM \"{t}\" AS r WHERE strpos(r::text, $1) > 0");
        let here = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql)).bind(words).fetch_one(store.pool()).await.unwrap();
        if here > 0 && std::env::var("ERASE_DEBUG").is_ok() {
            println!("  {t}: {here} row(s) hold {words}");
        }
        n += here;
    }
    n
}

#[tokio::test]
async fn erase_over_generated_lanes_forgets_one_person_and_leaves_every_other_row_as_it_was() {
    let cases: u64 = std::env::var("CLANKIE_ERASE_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let seed: u64 = std::env::var("CLANKIE_ERASE_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed);
    let rig = Rig::new().await;
    let store = Store::connect(&rig.settings.database_url).await.unwrap();
    let bus = rig.bus().await;
    // The generated rooms are not admitted: their messages on the bus are refused, as chatter in
    // a channel he does not answer is, and stay in the stream for the forget to find.
    let owner = clankie_store::OwnerSettings { channels: vec![GENERAL], ..store.owner_settings().await.unwrap() };
    store.set_owner_settings(&owner).await.unwrap();
    let (mut withdrawn, mut blocks_changed, mut unchanged, mut summaries, mut summaries_changed) = (0usize, 0usize, 0usize, 0usize, 0usize);
    let mut marked = 0usize;
    for case in 0..cases {
        let draw = Draw(seed ^ case.wrapping_mul(0x2545_f491_4f6c_dd1d));
        println!("erase: case {case} of {cases} (CLANKIE_ERASE_SEED={seed})");
        let world = generate(case, draw, &rig, &store, &bus).await;
        summaries += world.their_summaries;
        let before = rows(&store).await;
        let theirs_before = in_postgres(&store, &world.target_words).await;
        assert!(theirs_before > 0, "case {case}: the target's words were never stored, so this shows nothing");
        let others_in_pg: Vec<i64> = futures::future::join_all(world.others_words.iter().map(|w| in_postgres(&store, w))).await;
        let others_on_bus: Vec<usize> = futures::future::join_all(world.others_words.iter().map(|w| crate::on_the_bus(&bus, w))).await;
        let shared_files = crate::files_holding(&rig.attachment_root, &world.shared_picture);

        let started = rig
            .sandbox
            .discord
            .run_command(RunCommand {
                channel_id: GENERAL,
                author: world.target.name.clone(),
                subcommand: "forget-me".into(),
                options: Default::default(),
            })
            .expect("a command");
        until("the forget's counts", Duration::from_secs(60), || {
            rig.sandbox.discord.interaction(started.id).is_some_and(|r| r.content.starts_with("Done"))
        })
        .await;

        // Every row not theirs is byte for byte as it was; theirs withdrawn or without their lines.
        let after = rows(&store).await;
        for channel in &world.channels {
            let tree = format!("rooms/room:100:{channel}");
            let (stored, written) =
                (before.iter().filter(|r| r.1 == tree).count(), world.expected.iter().filter(|(t, _)| *t == tree).count());
            assert_eq!(stored, written, "case {case}: {tree} holds rows the case did not write");
        }
        let mut at_in_tree = std::collections::BTreeMap::<String, usize>::new();
        for row in &before {
            let (seq, tree, kind, body, in_context) = row;
            let now = after.iter().find(|r| r.0 == *seq).unwrap_or_else(|| panic!("case {case}: row {seq} of {tree} is gone"));
            let parsed: EntryBody =
                serde_json::from_str(&now.3).unwrap_or_else(|e| panic!("case {case}: row {seq} does not deserialize: {e}"));
            let expected: Vec<&Expect> = world.expected.iter().filter(|(t, _)| t == tree).map(|(_, e)| e).collect();
            let expect = if expected.is_empty() {
                &Expect::Same
            } else {
                let at = at_in_tree.entry(tree.clone()).or_default();
                *at += 1;
                expected.get(*at - 1).copied().unwrap_or(&Expect::Same)
            };
            match expect {
                Expect::Same => {
                    assert_eq!((&now.2, &now.3, now.4), (kind, body, *in_context), "case {case}: row {seq} of {tree} changed");
                    unchanged += 1;
                }
                Expect::Marked => {
                    let EntryBody::Assistant { text, tool_calls, stop_reason, usage, provider_error, forgotten_asker } = parsed else {
                        panic!("case {case}: row {seq} is no longer his answer: {}", now.3)
                    };
                    assert!(forgotten_asker, "case {case}: his answer {seq} to a turn the target shared is not marked");
                    let unmarked = EntryBody::Assistant { text, tool_calls, stop_reason, usage, provider_error, forgotten_asker: false };
                    let was: EntryBody = serde_json::from_str(body).unwrap();
                    assert_eq!(
                        (&unmarked, now.2.as_str(), now.4),
                        (&was, kind.as_str(), *in_context),
                        "case {case}: row {seq} changed beyond its mark"
                    );
                    marked += 1;
                }
                Expect::Withdrawn => {
                    assert!(
                        matches!(parsed, EntryBody::Withdrawn { .. }) && now.2 == "withdrawn" && !now.4,
                        "case {case}: row {seq} kept: {}",
                        now.3
                    );
                    withdrawn += 1;
                }
                Expect::Summary { first_kept_id } => {
                    let withdrawn = EntryBody::Compaction {
                        summary: clankie_self::rewrite::SUMMARY_FORGOTTEN.into(),
                        first_kept_id: first_kept_id.clone(),
                    };
                    assert!(parsed == withdrawn && now.2 == "compaction", "case {case}: summary {seq} kept their words: {}", now.3);
                    summaries_changed += 1;
                }
                Expect::Lines { kept, kept_words } => {
                    let EntryBody::User { text, lines, .. } = parsed else { panic!("case {case}: row {seq} is no longer a block") };
                    assert_eq!(&lines, kept, "case {case}: row {seq}'s line ids");
                    assert!(
                        kept_words.iter().all(|w| text.contains(&blocks::escape_attr(w))),
                        "case {case}: row {seq} lost others' lines: {text}"
                    );
                    blocks_changed += 1;
                }
            }
        }
        assert_eq!(in_postgres(&store, &world.target_words).await, 0, "case {case}: the target's words are still in PostgreSQL");
        assert_eq!(crate::on_the_bus(&bus, &world.target_words).await, 0, "case {case}: the target's words are still in a stream");
        assert_eq!(
            crate::files_holding(&rig.attachment_root, world.target_words.as_bytes()),
            0,
            "case {case}: the target's pictures are still in the media root"
        );
        for (i, w) in world.others_words.iter().enumerate() {
            assert_eq!(in_postgres(&store, w).await, others_in_pg[i], "case {case}: {w}… changed in PostgreSQL");
            assert_eq!(crate::on_the_bus(&bus, w).await, others_on_bus[i], "case {case}: {w}… changed on the bus");
        }
        let shared_after = crate::files_holding(&rig.attachment_root, &world.shared_picture);
        match world.shared_sent_by {
            (_, true) => assert_eq!(shared_after, shared_files, "case {case}: a picture someone else sent too went"),
            (true, false) => assert_eq!(shared_after, 0, "case {case}: a picture only the target sent stayed"),
            (false, false) => {}
        }
        // Every lane opens, and every tool call in its context still has its result.
        for channel in &world.channels {
            let lane = LaneKey::Room { guild: 100, channel: *channel };
            let lease = store.acquire_lease(&lane, "erase-test", Duration::from_secs(60)).await.unwrap().expect("the lane's lease");
            let session = Session::open(store.clone(), lease.clone(), format!("rooms/{lane}")).await.expect("the session opens");
            let context = session.context();
            let calls: BTreeSet<&str> = context
                .iter()
                .flat_map(|m| match m {
                    ChatMessage::Assistant { tool_calls, .. } => tool_calls.iter().map(|c| c.id.as_str()).collect(),
                    _ => Vec::new(),
                })
                .collect();
            let results: BTreeSet<&str> = context
                .iter()
                .filter_map(|m| if let ChatMessage::Tool { call_id, .. } = m { Some(call_id.as_str()) } else { None })
                .collect();
            assert_eq!(calls, results, "case {case}: lane {lane}'s tool calls and results no longer pair");
            store.release_lease(&lease).await.unwrap();
        }
    }
    println!(
        "erase: {cases} case(s): {withdrawn} row(s) withdrawn, {summaries} summaries written from the target's words rewritten ({summaries_changed} checks), {blocks_changed} block(s) lost the target's lines, {marked} answer(s) to shared turns marked, {unchanged} row checks byte for byte (rows of earlier cases checked again each case)"
    );
    // Each way a row can change was met, so each branch above was checked for this seed: a seed
    // whose worlds miss one proves nothing of it (pick another with CLANKIE_ERASE_SEED).
    assert!(marked > 0, "no case had a turn the target shared with others, so the mark was never checked");
    assert!(withdrawn > 0, "no row of the target's alone was withdrawn, so withdrawal was never checked");
    assert!(summaries_changed > 0, "no summary written from the target's words was rewritten ({summaries} written)");
    assert!(blocks_changed > 0, "no block lost the target's lines while keeping others', so line removal was never checked");
    assert!(unchanged > 0, "no row was left as it was, so sameness was never checked");
}
