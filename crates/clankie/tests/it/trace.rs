//! `trace_`: one Discord message is one OpenTelemetry trace across the separate gateway and
//! captain processes, exported over OTLP/HTTP to a real receiver process
//! (`deploy/otel/receiver.py` on the `opentelemetry-proto` wheel), and nothing a person or the
//! model said is in it.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use clankie_discord_loopback::LoopbackConfig;
use clankie_model_standin::{Reply, Script};
use clankie_stack::OtlpReceiver;
use clankie_testkit::until;
use serde_json::Value;

use crate::chaos::{Cast, DumpLogsOnPanic, GENERAL, sigkill};

async fn receiver() -> OtlpReceiver {
    tokio::task::spawn_blocking(|| OtlpReceiver::start(&mut |m| eprintln!("clankie: {m}")))
        .await
        .unwrap()
        .expect("the OTLP receiver starts")
}

/// The settings that make a service export to `receiver`, its batches sent every 100 ms.
fn exporting(receiver: &OtlpReceiver) -> Vec<(&'static str, String)> {
    vec![("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()), ("OTEL_BSP_SCHEDULE_DELAY", "100".into())]
}

fn spans(receiver: &OtlpReceiver) -> Vec<Value> {
    let body = receiver.spans_json().expect("the receiver answers");
    let parsed: Value = serde_json::from_str(&body).expect("the receiver serves JSON");
    parsed["spans"].as_array().cloned().unwrap_or_default()
}

/// The spans once `ready` holds of them: each service exports on its own schedule, so a later
/// span (the post) can arrive before an earlier one's (the turn, which ends after it).
async fn spans_when(receiver: &OtlpReceiver, what: &str, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let spans = spans(receiver);
        if ready(&spans) {
            return spans;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what} never arrived: {} spans", spans.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the span `name` of `delivery` and all its ancestors up to a root are in.
fn rooted(spans: &[Value], name: &str, delivery: u64) -> bool {
    named(spans, name, delivery).is_some_and(|leaf| ancestry(spans, leaf).is_ok())
}

fn named<'a>(spans: &'a [Value], name: &str, delivery: u64) -> Option<&'a Value> {
    spans.iter().find(|s| s["name"] == name && s["attributes"]["delivery_id"].to_string().trim_matches('"') == delivery.to_string())
}

/// The spans from `leaf` up to its root, through parent ids; fails at a missing parent.
fn ancestry<'a>(spans: &'a [Value], leaf: &'a Value) -> Result<Vec<&'a Value>, String> {
    let by_id: HashMap<&str, &Value> = spans.iter().filter_map(|s| s["span_id"].as_str().map(|id| (id, s))).collect();
    let mut chain = vec![leaf];
    let mut at = leaf;
    while let Some(parent) = at["parent_span_id"].as_str().filter(|p| !p.is_empty()) {
        at = by_id.get(parent).copied().ok_or_else(|| format!("{} has parent {parent}, which no service exported", at["name"]))?;
        chain.push(at);
    }
    Ok(chain)
}

fn chain_names(chain: &[&Value]) -> Vec<String> {
    chain.iter().rev().map(|s| format!("{}:{}", s["service"].as_str().unwrap_or(""), s["name"].as_str().unwrap_or(""))).collect()
}

/// Ada mentions him in the general channel with a picture (`filename`, its bytes `pixels`), so
/// media fetches it for the turn; the message's id.
fn with_picture(cast: &Cast, content: &str, filename: &str, pixels: &str) -> u64 {
    cast.discord.user_message(clankie_discord_loopback::NewMessage {
        channel_id: GENERAL,
        author: "ada".into(),
        content: content.into(),
        mention: true,
        attachments: vec![clankie_discord_loopback::NewAttachment {
            filename: filename.into(),
            content_type: "image/png".into(),
            text: Some(pixels.into()),
            ..Default::default()
        }],
        ..Default::default()
    })
}

fn ms(span: &Value) -> f64 {
    (span["end_ns"].as_u64().unwrap_or(0).saturating_sub(span["start_ns"].as_u64().unwrap_or(0))) as f64 / 1e6
}

#[tokio::test]
async fn trace_one_message_with_a_picture_through_the_gateway_captain_and_media_processes_is_one_trace_from_receive_to_post_with_the_turns_token_counts()
 {
    let otlp = receiver().await;
    let cast = Cast::start(LoopbackConfig::default()).await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain", "media", "gateway"]);
    cast.standin.script(Script::any(Reply::text("The lobby opens at nine.")));
    let env = exporting(&otlp);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let _captain = cast.service("captain", "captain", None, &env);
    let _media = cast.service("media", "media", None, &env);
    let _gateway = cast.service("gateway", "gateway", None, &env);
    assert!(cast.discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");

    // With a picture, so media fetches it for the turn.
    let id = with_picture(&cast, "@Clankie when does the lobby open?", "sign.png", "pixels");
    until("the reply", Duration::from_secs(30), || cast.discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(id))).await;
    let spans = spans_when(&otlp, "the post's and the reaction's spans with their ancestors and the model call", |s| {
        rooted(s, "gateway.post", id)
            && rooted(s, "gateway.outcome_reaction", id)
            && s.iter().any(|x| x["attributes"]["gen_ai.operation.name"] == "chat")
            && s.iter().any(|x| x["name"] == "media.attachment")
    })
    .await;

    let receive = named(&spans, "gateway.receive", id).expect("the gateway's receive span");
    let trace = receive["trace_id"].as_str().unwrap();
    let post = named(&spans, "gateway.post", id).unwrap();
    let chain = ancestry(&spans, post).unwrap_or_else(|e| panic!("the chain from the post broke: {e}"));
    let names = chain_names(&chain);
    println!("trace {trace}, the post's ancestry: {}", names.join(" → "));
    assert_eq!(chain.last().unwrap()["span_id"], receive["span_id"], "the post's root is the gateway's receive: {names:?}");
    for want in
        ["clankie-gateway:gateway.receive", "clankie-captain:captain.admit", "clankie-captain:captain.turn", "clankie-gateway:gateway.post"]
    {
        assert!(names.iter().any(|n| n == want), "{want} is not on the path from receive to post: {names:?}");
    }
    let reaction = named(&spans, "gateway.outcome_reaction", id).unwrap();
    let reaction_chain = ancestry(&spans, reaction).unwrap_or_else(|e| panic!("the chain from the reaction broke: {e}"));
    assert_eq!(reaction_chain.last().unwrap()["span_id"], receive["span_id"], "the reaction's root: {:?}", chain_names(&reaction_chain));
    let services: BTreeSet<&str> = spans.iter().filter(|s| s["trace_id"] == trace).filter_map(|s| s["service"].as_str()).collect();
    assert!(["clankie-gateway", "clankie-captain", "clankie-media"].iter().all(|s| services.contains(s)), "{services:?}");
    let fetch = spans.iter().find(|s| s["name"] == "media.attachment").unwrap();
    assert_eq!(fetch["trace_id"], trace, "media's fetch is in the message's trace");
    let fetch_chain = ancestry(&spans, fetch).unwrap_or_else(|e| panic!("the chain from media's fetch broke: {e}"));
    let fetch_names = chain_names(&fetch_chain);
    println!("media's fetch: {}", fetch_names.join(" → "));
    assert_eq!(fetch_chain.last().unwrap()["span_id"], receive["span_id"], "{fetch_names:?}");
    assert!(fetch_names.iter().any(|n| n == "clankie-captain:captain.prepare"), "fetched while the turn prepared: {fetch_names:?}");

    // The model call as a GenAI span, its counts the turn's own.
    let chats: Vec<&Value> =
        spans.iter().filter(|s| s["trace_id"] == trace && s["attributes"]["gen_ai.operation.name"] == "chat").collect();
    assert_eq!(chats.len(), 1, "one model call: {chats:?}");
    let chat = &chats[0]["attributes"];
    assert_eq!(chat["gen_ai.provider.name"], "openai");
    assert!(chat["gen_ai.request.model"].is_string(), "{chat}");
    assert_eq!(chat["gen_ai.response.finish_reasons"], "stop", "{chat}");
    let pool = sqlx::PgPool::connect(cast.db.url()).await.unwrap();
    let (input, output, cached): (i64, i64, i64) =
        sqlx::query_as("SELECT input_tokens, output_tokens, cached_input_tokens FROM turns").fetch_one(&pool).await.unwrap();
    assert!(input > 0, "the stand-in counted tokens");
    assert_eq!(chat["gen_ai.usage.input_tokens"].as_i64(), Some(input), "{chat}");
    assert_eq!(chat["gen_ai.usage.output_tokens"].as_i64(), Some(output), "{chat}");
    assert_eq!(chat["gen_ai.usage.cache_read.input_tokens"].as_i64(), Some(cached), "{chat}");

    // Where people look: the trail names the trace and links it through CLANKIE_TRACE_URL.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_clankie"))
        .args(["trail", &id.to_string()])
        .env("CLANKIE_DATABASE_URL", cast.db.url())
        .env("CLANKIE_NATS_URL", cast.nats.url())
        .env("CLANKIE_TRACE_URL", "http://traces.example/trace/{trace_id}")
        .output()
        .await
        .unwrap();
    let (printed, said) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}");
    let first: Value = serde_json::from_str(printed.lines().next().unwrap_or("")).unwrap();
    assert_eq!(first["trace_id"], trace, "the trail's first row names the trace: {printed}");
    assert_eq!(first["trace_url"], format!("http://traces.example/trace/{trace}"));
    assert!(said.contains(&format!("trace {trace}: http://traces.example/trace/{trace}")), "{said}");

    // The console's trail links the same trace through the same template.
    let console_addr = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).unwrap().to_string();
    let _console = cast.service(
        "console",
        "console",
        None,
        &[
            ("CLANKIE_CONSOLE_ADDR", &console_addr),
            ("CLANKIE_CONSOLE_TOKEN", "op-token"),
            ("CLANKIE_TRACE_URL", "http://traces.example/trace/{trace_id}"),
        ],
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let rows: Vec<Value> = loop {
        let answered = http.get(format!("http://{console_addr}/api/trail/{id}")).bearer_auth("op-token").send().await;
        if let Ok(r) = answered
            && r.status().is_success()
        {
            break r.json().await.unwrap();
        }
        assert!(tokio::time::Instant::now() < deadline, "the console never served the trail");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(rows[0]["trace_id"], trace, "the console's trail names the trace first: {rows:?}");
    assert_eq!(rows[0]["trace_url"], format!("http://traces.example/trace/{trace}"), "{rows:?}");

    let mut tree: Vec<&Value> = spans.iter().filter(|s| s["trace_id"] == trace).collect();
    tree.sort_by_key(|s| s["start_ns"].as_u64());
    for s in &tree {
        println!("  {:>8.1} ms  {}:{}", ms(s), s["service"].as_str().unwrap_or(""), s["name"].as_str().unwrap_or(""));
    }
}

/// A `CLANKIE_TRACE_URL` with no `{trace_id}` would link every trail to the same page: each
/// service refuses to start on it, naming the setting and what to write instead.
#[tokio::test]
async fn trace_url_without_a_trace_id_placeholder_is_refused_at_start_by_every_service() {
    let cast = Cast::start(LoopbackConfig::default()).await;
    for which in ["gateway", "captain", "console"] {
        let mut child = cast.service(which, which, None, &[("CLANKIE_TRACE_URL", "http://jaeger:16686/search")]);
        let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
        let status = status.unwrap_or_else(|_| panic!("{which} started on a trace URL with no {{trace_id}}")).unwrap();
        assert!(!status.success(), "{which} exited 0");
        let log = std::fs::read_to_string(cast.dir.path().join(format!("{which}.log"))).unwrap_or_default();
        assert!(
            log.contains("CLANKIE_TRACE_URL") && log.contains("has no {trace_id}") && log.contains("/trace/{trace_id}"),
            "{which} did not say what to write: {log}"
        );
    }
}

/// Every span that carries a delivery's id is in that delivery's one trace: the typing the
/// turn lit and put out included (the gateway's typing consumer once began a trace of its own
/// for each action).
#[tokio::test]
async fn trace_every_span_carrying_a_deliverys_id_is_in_its_one_trace_typing_included() {
    let otlp = receiver().await;
    let cast = Cast::start(LoopbackConfig::default()).await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain", "gateway"]);
    cast.standin.script(Script::any(Reply::Text {
        text: "The lobby opens at nine, and the hall at ten.".into(),
        chunk_chars: 8,
        chunk_delay_ms: 30,
        first_delay_ms: 200,
        tail_delay_ms: 0,
    }));
    let env = exporting(&otlp);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let _captain = cast.service("captain", "captain", None, &env);
    let _gateway = cast.service("gateway", "gateway", None, &env);
    assert!(cast.discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");
    let id = cast.discord.user_message(clankie_discord_loopback::NewMessage {
        channel_id: GENERAL,
        author: "ada".into(),
        content: "@Clankie when does the lobby open?".into(),
        mention: true,
        ..Default::default()
    });
    until("the reply", Duration::from_secs(30), || cast.discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(id))).await;
    let carries = |s: &Value| s["attributes"]["delivery_id"].to_string().trim_matches('"') == id.to_string();
    let spans = spans_when(&otlp, "the post and the typing the turn lit and put out", |s| {
        // Typing's spans by what they carry, whatever they are named, so a span begun apart still counts.
        let typing = |x: &&Value| x["service"] == "clankie-gateway" && (x["name"] == "gateway.typing" || x["name"] == "delivery");
        rooted(s, "gateway.post", id) && s.iter().filter(|x| carries(x)).filter(typing).count() >= 2
    })
    .await;
    let receive = named(&spans, "gateway.receive", id).expect("the gateway's receive span");
    let mut traces: HashMap<&str, Vec<String>> = HashMap::new();
    for s in spans.iter().filter(|s| carries(s)) {
        let name = format!("{}:{}", s["service"].as_str().unwrap_or(""), s["name"].as_str().unwrap_or(""));
        traces.entry(s["trace_id"].as_str().unwrap_or("")).or_default().push(name);
    }
    assert_eq!(traces.len(), 1, "the delivery's spans are in {} traces: {traces:#?}", traces.len());
    assert_eq!(traces.keys().next().copied(), receive["trace_id"].as_str(), "{traces:#?}");
    let typing: Vec<&Value> = spans.iter().filter(|s| s["name"] == "gateway.typing" && carries(s)).collect();
    for t in typing {
        let chain = ancestry(&spans, t).unwrap_or_else(|e| panic!("the chain from a typing span broke: {e}"));
        assert_eq!(chain.last().unwrap()["span_id"], receive["span_id"], "typing's root: {:?}", chain_names(&chain));
    }
}

#[tokio::test]
async fn trace_a_captain_sigkilled_mid_turn_leaves_the_takeovers_spans_in_the_messages_trace() {
    let otlp = receiver().await;
    let cast = Cast::start(LoopbackConfig::default()).await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain-a", "captain-b", "gateway"]);
    // The first run thinks for a minute; the takeover's is answered at once.
    cast.standin.script(Script::any(Reply::Text {
        text: "too late".into(),
        chunk_chars: 64,
        chunk_delay_ms: 0,
        first_delay_ms: 60_000,
        tail_delay_ms: 0,
    }));
    cast.standin.script(Script::any(Reply::text("Here after all.")));
    let env = exporting(&otlp);
    let mut short: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    short.extend([("CLANKIE_LANE_LEASE_TTL_MS", "3000"), ("CLANKIE_INGRESS_ACK_WAIT_MS", "3000")]);
    let mut a = cast.service("captain", "captain-a", None, &short);
    let _gateway = cast.service("gateway", "gateway", None, &short);
    assert!(cast.discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");
    let id = cast.mention("ada", "@Clankie are you there?");
    until("the first call", Duration::from_secs(20), || cast.standin.requests().len() == 1).await;
    sigkill(&mut a).await;
    let _b = cast.service("captain", "captain-b", None, &short);
    until("the takeover's reply", Duration::from_secs(40), || cast.discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(id))).await;

    let spans = spans_when(&otlp, "the post's span with its ancestors and the takeover's turn", |s| {
        rooted(s, "gateway.post", id) && s.iter().any(|x| x["name"] == "captain.turn")
    })
    .await;
    let receive = named(&spans, "gateway.receive", id).expect("the gateway's receive span");
    let trace = &receive["trace_id"];
    // Captain A was killed: its spans never ended, so what is exported of the turn is B's.
    let turns: Vec<&Value> = spans.iter().filter(|s| s["name"] == "captain.turn").collect();
    assert_eq!(turns.len(), 1, "one turn ended (the takeover's): {turns:?}");
    assert_eq!(&turns[0]["trace_id"], trace, "the takeover's turn is in the message's trace");
    let admit = spans.iter().find(|s| s["name"] == "captain.admit" && &s["trace_id"] == trace).expect("the takeover's admission span");
    assert!(admit["attributes"]["messaging.message.delivery_count"].as_i64().unwrap_or(0) >= 2, "a redelivery: {admit}");
    assert!(!admit["links"].as_array().unwrap().is_empty(), "a redelivery links to where it began: {admit}");
    let post = named(&spans, "gateway.post", id).unwrap();
    assert_eq!(&post["trace_id"], trace);
    let chain = ancestry(&spans, post).unwrap_or_else(|e| panic!("{e}"));
    println!("takeover trace: {}", chain_names(&chain).join(" → "));
    assert_eq!(chain.last().unwrap()["span_id"], receive["span_id"]);
}

#[tokio::test]
async fn trace_canary_words_in_the_message_the_answer_and_a_tool_url_appear_in_no_exported_attribute_or_event() {
    let otlp = receiver().await;
    let cast = Cast::start(LoopbackConfig::default()).await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain", "media", "gateway"]);
    cast.standin
        .script(Script::any(Reply::tool("read_page", serde_json::json!({ "url": "http://127.0.0.1:9/canaryurlpath?q=canaryquery" }))));
    cast.standin.script(Script::any(Reply::text("canaryanswer is what I found.")));
    let env = exporting(&otlp);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut services = vec![
        cast.service("captain", "captain", None, &env),
        cast.service("media", "media", None, &env),
        cast.service("gateway", "gateway", None, &env),
    ];
    assert!(cast.discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");
    // With a picture whose name and bytes are canaries too, so media's spans are among those read.
    let id = with_picture(&cast, "@Clankie canarymessage please read that page", "canaryfile.png", "canarypixels");
    until("the reply", Duration::from_secs(30), || cast.discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(id))).await;
    spans_when(&otlp, "the post's span with its ancestors, the tool's and media's", |s| {
        rooted(s, "gateway.post", id)
            && rooted(s, "gateway.outcome_reaction", id)
            && s.iter().any(|x| x["attributes"]["gen_ai.operation.name"] == "execute_tool")
            && s.iter().any(|x| x["name"] == "media.attachment")
    })
    .await;
    assert!(cast.discord.posts(GENERAL).iter().any(|p| p.content.contains("canaryanswer")), "the answer itself went out");
    // Every span each service will ever export: each is stopped as an operator stops it
    // (SIGTERM), flushing what it still held, before the spans are read.
    for service in &mut services {
        let pid = service.id().expect("the service runs").to_string();
        assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        tokio::time::timeout(Duration::from_secs(20), service.wait()).await.expect("the service stopped on SIGTERM").unwrap();
    }
    let spans = spans(&otlp);
    let tool = spans.iter().find(|s| s["attributes"]["gen_ai.operation.name"] == "execute_tool").expect("the tool's span");
    assert_eq!(tool["attributes"]["gen_ai.tool.name"], "read_page");
    let services: BTreeSet<&str> = spans.iter().filter_map(|s| s["service"].as_str()).collect();
    assert!(["clankie-gateway", "clankie-captain", "clankie-media"].iter().all(|s| services.contains(s)), "spans of {services:?}");
    let exported = serde_json::to_string(&spans).unwrap();
    for canary in ["canarymessage", "canaryanswer", "canaryurlpath", "canaryquery", "127.0.0.1:9/", "canaryfile", "canarypixels"] {
        assert!(!exported.contains(canary), "{canary} was exported: {exported}");
    }
    println!("canaries: {} spans of {services:?} exported once every service stopped, none with a canary", spans.len());
}

#[tokio::test]
async fn trace_with_the_receiver_stopped_replies_still_post_and_the_dropped_span_counter_rises() {
    let mut otlp = receiver().await;
    let cast = Cast::start(LoopbackConfig::default()).await;
    let _dump = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain", "gateway"]);
    cast.standin.script(Script::any(Reply::text("Still here.")));
    let port = clankie_stack::reserve_port().unwrap();
    let addr = format!("127.0.0.1:{}", port.port());
    drop(port);
    let env = exporting(&otlp);
    let mut captain_env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let gateway_env = captain_env.clone();
    captain_env.push(("CLANKIE_HTTP_ADDR", &addr));
    let _captain = cast.service("captain", "captain", None, &captain_env);
    let _gateway = cast.service("gateway", "gateway", None, &gateway_env);
    assert!(cast.discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");
    otlp.stop();

    let _ = rustls::crypto::ring::default_provider().install_default();
    let dropped = || async {
        let body = reqwest::get(format!("http://{addr}/metrics")).await.ok()?.text().await.ok()?;
        body.lines().find(|l| l.starts_with(clankie_trace::DROPPED_METRIC)).and_then(|l| l.split_whitespace().last()?.parse::<f64>().ok())
    };
    // One at a time: a burst would be answered once.
    let mut ids = Vec::new();
    for i in 0..3 {
        let id = cast.mention("ada", &format!("@Clankie message {i}"));
        until("a reply with the collector away", Duration::from_secs(30), || {
            cast.discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(id))
        })
        .await;
        ids.push(id);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let count = loop {
        if let Some(n) = dropped().await.filter(|n| *n > 0.0) {
            break n;
        }
        assert!(tokio::time::Instant::now() < deadline, "{} never rose", clankie_trace::DROPPED_METRIC);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!("collector away: {} replies posted, {count} spans counted as dropped", ids.len());
}
