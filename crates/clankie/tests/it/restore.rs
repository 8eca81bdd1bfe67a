//! `restore_`: the backup and restore `docs/operations.md` describes, done as an operator does it
//! against separate gateway and captain processes: `pg_dump` while he runs, the database lost,
//! a fresh one restored with `pg_restore`, the services started again.

use std::path::PathBuf;
use std::time::Duration;

use clankie_discord_loopback::LoopbackConfig;
use clankie_model_standin::{Reply, Script};
use clankie_testkit::until;
use tokio::process::Child;

use crate::chaos::{Cast, DumpLogsOnPanic, GENERAL};

/// `pg_dump` or `pg_restore` of the newest PostgreSQL Debian installed (the one the local
/// stack runs), not the version-picking wrapper on PATH.
fn pg_tool(name: &str) -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin").join(name))))
                .filter(|(_, p): &(u32, PathBuf)| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.pop().map(|(_, p)| p).unwrap_or_else(|| panic!("{name} is not installed: run deploy/local/test, which installs postgresql"))
}

fn run(program: PathBuf, args: &[&str]) {
    let out = std::process::Command::new(&program).args(args).output().unwrap();
    assert!(out.status.success(), "{} failed: {}", program.display(), String::from_utf8_lossy(&out.stderr));
}

/// SIGTERM, as `docker compose stop` sends it, and waits for the process to finish.
async fn stop(child: &mut Child) {
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    tokio::time::timeout(Duration::from_secs(60), child.wait()).await.expect("the service stopped").unwrap();
}

/// The database's URL with the database `postgres` in its place: where one drops and creates it.
fn admin_url(url: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let root = &base[..base.rfind('/').unwrap()];
    query.map_or_else(|| format!("{root}/postgres"), |q| format!("{root}/postgres?{q}"))
}

#[tokio::test]
async fn restore_a_dump_into_a_fresh_database_with_jetstream_kept_answers_the_next_message_with_its_history_and_nothing_doubled() {
    let cast = Cast::start(LoopbackConfig::default()).await;
    let _logs = DumpLogsOnPanic(cast.dir.path().to_owned(), &["captain", "gateway"]);
    let (discord, standin) = (&cast.discord, &cast.standin);
    standin.script(Script::any(Reply::text("Miso is a fine name for a cat.")));
    standin.script(Script::any(Reply::text("Three is a good age.")));
    let mut captain = cast.service("captain", "captain", None, &[]);
    let mut gateway = cast.service("gateway", "gateway", None, &[]);
    assert!(discord.wait_for_session(Duration::from_secs(20)).await, "the gateway never attached");
    let replied = |id: u64| move || discord.posts(GENERAL).iter().any(|p| p.reply_to == Some(id));
    let first = cast.mention("ada", "@Clankie my cat is called Miso");
    until("the first reply", Duration::from_secs(30), replied(first)).await;
    let second = cast.mention("ada", "@Clankie she turned three today");
    until("the second reply", Duration::from_secs(30), replied(second)).await;
    cast.gateway_settled(Duration::from_secs(30)).await;

    // The nightly backup, taken while he runs.
    let dump = cast.dir.path().join("clankie.dump");
    run(pg_tool("pg_dump"), &["--format=custom", "--file", dump.to_str().unwrap(), cast.db.url()]);

    // The database is lost. The services stop; a fresh, empty one takes its name.
    stop(&mut gateway).await;
    stop(&mut captain).await;
    let name = cast.db.url().split('?').next().unwrap().rsplit('/').next().unwrap().to_owned();
    let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(&admin_url(cast.db.url())).await.unwrap();
    for sql in [format!("DROP DATABASE {name} WITH (FORCE)"), format!("CREATE DATABASE {name}")] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut admin).await.unwrap();
    }
    let pool = sqlx::PgPool::connect(cast.db.url()).await.unwrap();
    let tables: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetch_one(&pool).await.unwrap();
    assert_eq!(tables, 0, "the database was dropped and made afresh");
    run(pg_tool("pg_restore"), &["--no-owner", "--exit-on-error", "--dbname", cast.db.url(), dump.to_str().unwrap()]);

    // He starts again on the restored database and the JetStream he had.
    let requests_before = standin.requests().len();
    standin.script(Script::any(Reply::text("Her name is Miso.")));
    let _captain = cast.service("captain", "captain-2", None, &[]);
    let _gateway = cast.service("gateway", "gateway", None, &[]);
    let third = cast.mention("ada", "@Clankie what is my cat called?");
    until("the reply after the restore", Duration::from_secs(60), replied(third)).await;

    let requests = standin.requests();
    assert_eq!(requests.len(), requests_before + 1, "one model call after the restore: nothing old was run again");
    let body = requests.last().unwrap().body.to_string();
    assert!(body.contains("what is my cat called?"), "the last request is the new message's");
    for (said, what) in [("my cat is called Miso", "her first message"), ("Miso is a fine name for a cat.", "his first answer")] {
        assert_eq!(body.matches(said).count(), 1, "{what} is in the restored lane's history once: {body}");
    }
    // His own earlier answer comes back as his turn in the lane's session, not as a line of the
    // channel history a cold lane is shown (which would hold it too, untrusted).
    let messages = requests.last().unwrap().body["messages"].as_array().cloned().unwrap_or_default();
    let his = messages.iter().any(|m| m["role"] == "assistant" && m["content"].to_string().contains("Miso is a fine name for a cat."));
    assert!(his, "his first answer is not his own turn in the restored session: {messages:#?}");
    for (id, what) in [(first, "the first"), (second, "the second"), (third, "the third")] {
        let replies = discord.posts(GENERAL).iter().filter(|p| p.reply_to == Some(id)).count();
        assert_eq!(replies, 1, "{what} message has {replies} replies");
    }
    assert_eq!(discord.posts(GENERAL).len(), 3, "no post was made twice");
    let turns: i64 = sqlx::query_scalar("SELECT count(*) FROM turns").fetch_one(&pool).await.unwrap();
    assert_eq!(turns, 3, "the restored turns and the new one, each once");
}
