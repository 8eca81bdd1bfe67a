//! `clankie self`: read and edit the shared self. Every change is in
//! PostgreSQL, which each lane reads at the start of its next turn, so
//! nothing needs a restart.

use anyhow::{Context, Result, bail};
use clankie_settings::{Settings, redact_url};
use clankie_store::{MAX_FACT_CHARS, MAX_NAME_CHARS, MAX_PERSONA_CHARS, MemoryStatus, SelfFile, Sharing, Store};
use clap::Subcommand;

#[derive(Subcommand)]
pub enum SelfAction {
    /// Print the persona, owner settings, approved memory, pending proposals and presence.
    Show,
    /// Edit the persona; only the fields given change.
    Persona {
        /// His name (empty: CLANKIE_BOT_NAME).
        #[arg(long)]
        name: Option<String>,
        /// Other names he answers to, comma-separated.
        #[arg(long)]
        aliases: Option<String>,
        /// The character sheet.
        #[arg(long, conflicts_with = "sheet_file")]
        sheet: Option<String>,
        /// Read the character sheet from a file.
        #[arg(long)]
        sheet_file: Option<std::path::PathBuf>,
        /// How he speaks.
        #[arg(long)]
        style: Option<String>,
    },
    /// Edit the owner settings; only the fields given change. Id lists are comma-separated; an empty string clears one.
    Settings {
        /// The owner's Discord user id, or `none`.
        #[arg(long)]
        owner: Option<String>,
        #[arg(long)]
        operators: Option<String>,
        /// User ids granted the elevated tools (added to CLANKIE_OPERATOR_GRANTS).
        #[arg(long)]
        grants: Option<String>,
        /// Guild ids he is admitted to; empty admits every guild.
        #[arg(long)]
        guilds: Option<String>,
        /// Channel ids he is admitted to; empty admits every channel.
        #[arg(long)]
        channels: Option<String>,
        /// DM channel ids the owner trusts: they may hear of guild life.
        #[arg(long)]
        trusted_dms: Option<String>,
        /// Guild text channels you trust (comma-separated ids): an operator's privileged requests there keep a durable system lane.
        #[arg(long)]
        trusted_rooms: Option<String>,
        /// How far experiences travel: `guild` (the default) or `none`.
        #[arg(long)]
        sharing: Option<String>,
    },
    /// Apply a self file (see deploy/self.example.toml): only the fields it changed since it was
    /// last applied are written, so an edit made since in the console stands until the file
    /// changes that field. Prints the fields written.
    Apply {
        /// The TOML self file.
        file: std::path::PathBuf,
    },
    /// List memory proposals waiting for a decision.
    Proposals,
    /// Approve proposals: each reaches every lane's next turn.
    Approve { ids: Vec<i64> },
    /// Reject proposals.
    Reject { ids: Vec<i64> },
    /// Add an approved memory directly.
    Remember { fact: String },
    /// Withdraw an approved memory.
    Forget { ids: Vec<i64> },
    /// List unexpired experiences, newest first.
    Experiences,
    /// Forget a person by provenance, never by their words: their messages leave every lane's
    /// stored session, history blocks, the voice ring and the streams, with memory proposed from
    /// them and experiences they took part in. Receipts stay (they hold no words). Prints what
    /// it removed, as counts.
    ForgetUser {
        /// Their Discord user id.
        user_id: u64,
        /// How long to wait for a lane a live run holds, in seconds.
        #[arg(long, default_value_t = 60)]
        wait_secs: u64,
    },
}

fn at(ms: i64) -> String {
    clankie_proto::time::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64))
}

fn id_list(var: &str, text: &str) -> Result<Vec<u64>> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<u64>().with_context(|| format!("--{var}: {t:?} is not a Discord id")))
        .collect()
}

fn bounded(what: &str, text: String, max: usize) -> Result<String> {
    if text.chars().count() > max {
        bail!("{what} is {} characters; at most {max} are accepted", text.chars().count());
    }
    Ok(text)
}

pub async fn run(settings: &Settings, action: SelfAction) -> Result<()> {
    let store =
        Store::connect(&settings.database_url).await.with_context(|| format!("connecting to {}", redact_url(&settings.database_url)))?;
    if !store.is_current().await? {
        bail!("the database is not migrated; run `clankie migrate` first");
    }
    match action {
        SelfAction::Show => show(&store, settings).await,
        SelfAction::Persona { name, aliases, sheet, sheet_file, style } => persona(&store, name, aliases, sheet, sheet_file, style).await,
        SelfAction::Settings { owner, operators, grants, guilds, channels, trusted_dms, trusted_rooms, sharing } => {
            owner_settings(&store, owner, [operators, grants, guilds, channels, trusted_dms, trusted_rooms], sharing).await
        }
        SelfAction::Apply { file } => apply(&store, &file).await,
        SelfAction::Proposals => {
            let pending = store.memories(MemoryStatus::Proposed, 1000).await?;
            if pending.is_empty() {
                println!("no proposals waiting");
            }
            for m in pending {
                println!("#{} (from {}, {}): {}", m.id, m.proposed_in, at(m.proposed_at_ms), m.fact);
            }
            Ok(())
        }
        SelfAction::Approve { ids } => decide(&store, &ids, MemoryStatus::Approved, MemoryStatus::Proposed).await,
        SelfAction::Reject { ids } => decide(&store, &ids, MemoryStatus::Rejected, MemoryStatus::Proposed).await,
        SelfAction::Forget { ids } => decide(&store, &ids, MemoryStatus::Rejected, MemoryStatus::Approved).await,
        SelfAction::Remember { fact } => {
            let fact = bounded("the fact", fact.trim().to_owned(), MAX_FACT_CHARS)?;
            if fact.is_empty() {
                bail!("the fact is empty");
            }
            let id = store.add_memory(&fact, MemoryStatus::Approved, "cli").await?;
            println!("memory #{id} approved");
            Ok(())
        }
        SelfAction::ForgetUser { user_id, wait_secs } => forget_user(settings, &store, user_id, wait_secs).await,
        SelfAction::Experiences => {
            for e in store.recent_experiences(None, 200, clankie_bus::now_ms()).await? {
                let place = e.guild_id.map_or("dm".to_owned(), |g| format!("guild {g}"));
                println!("{} {} [{}; {place}] {}", at(e.at_ms), e.kind, e.thread, e.summary);
            }
            Ok(())
        }
    }
}

/// Moves memories from `from` to `to`; an id not in `from` is an error and changes nothing after it.
async fn decide(store: &Store, ids: &[i64], to: MemoryStatus, from: MemoryStatus) -> Result<()> {
    if ids.is_empty() {
        bail!("name at least one memory id (see `clankie self proposals` or `clankie self show`)");
    }
    for id in ids {
        if !store.decide_memory(*id, from, to).await? {
            bail!("memory #{id} is not {}", from.code());
        }
        println!("memory #{id} {}", to.code());
    }
    Ok(())
}

async fn show(store: &Store, settings: &Settings) -> Result<()> {
    let p = store.persona().await?;
    let name = if p.name.is_empty() { format!("{} (CLANKIE_BOT_NAME)", settings.bot_name) } else { p.name.clone() };
    println!("persona (version {})", p.version);
    println!("  name: {name}");
    println!("  aliases: {}", if p.aliases.is_empty() { settings.bot_aliases.join(", ") } else { p.aliases.join(", ") });
    println!("  character sheet: {}", if p.character_sheet.is_empty() { "(none)" } else { p.character_sheet.as_str() });
    println!("  speaking style: {}", if p.speaking_style.is_empty() { "(none)" } else { p.speaking_style.as_str() });
    let s = store.owner_settings().await?;
    let list = |v: &[u64]| if v.is_empty() { "(none)".to_owned() } else { v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ") };
    println!("owner settings (version {})", s.version);
    println!("  owner: {}", s.owner_id.map_or("(none)".to_owned(), |o| o.to_string()));
    println!("  operators: {}", list(&s.operators));
    println!("  grants: {}", list(&s.grants));
    println!("  guilds: {}", if s.guilds.is_empty() { "(every guild)".to_owned() } else { list(&s.guilds) });
    println!("  channels: {}", if s.channels.is_empty() { "(every channel)".to_owned() } else { list(&s.channels) });
    println!("  trusted DMs: {}", list(&s.trusted_dms));
    println!("  trusted rooms: {}", list(&s.trusted_rooms));
    println!("  experience sharing: {}", s.sharing.code());
    let memory = store.memories(MemoryStatus::Approved, 1000).await?;
    println!("approved memory ({})", memory.len());
    for m in memory {
        println!("  #{}: {}", m.id, m.fact);
    }
    println!("proposals waiting: {}", store.memories(MemoryStatus::Proposed, 1000).await?.len());
    let present = store.present_lanes(settings.exchange_window).await?;
    println!("present in: {}", if present.is_empty() { "(no lane right now)".to_owned() } else { present.join(", ") });
    Ok(())
}

/// `clankie self persona`: the fields given change, each bounded; the rest stay.
async fn persona(
    store: &Store,
    name: Option<String>,
    aliases: Option<String>,
    sheet: Option<String>,
    sheet_file: Option<std::path::PathBuf>,
    style: Option<String>,
) -> Result<()> {
    let mut p = store.persona().await?;
    if let Some(n) = name {
        p.name = bounded("the name", n.trim().to_owned(), MAX_NAME_CHARS)?;
    }
    if let Some(a) = aliases {
        p.aliases = a.split(',').map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()).collect();
    }
    if let Some(path) = sheet_file {
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        p.character_sheet = bounded("the character sheet", text, MAX_PERSONA_CHARS)?;
    }
    if let Some(s) = sheet {
        p.character_sheet = bounded("the character sheet", s, MAX_PERSONA_CHARS)?;
    }
    if let Some(s) = style {
        p.speaking_style = bounded("the speaking style", s, MAX_PERSONA_CHARS)?;
    }
    let version = store.set_persona(&p).await?;
    println!("persona saved (version {version}); every lane's next turn uses it");
    Ok(())
}

/// `clankie self settings`: the owner, the id lists (operators, grants, guilds, channels,
/// trusted DMs, trusted rooms) and the sharing given change; the rest stay.
async fn owner_settings(store: &Store, owner: Option<String>, lists: [Option<String>; 6], sharing: Option<String>) -> Result<()> {
    let [operators, grants, guilds, channels, trusted_dms, trusted_rooms] = lists;
    let mut s = store.owner_settings().await?;
    if let Some(o) = owner {
        s.owner_id = match id_list("owner", if o.trim() == "none" { "" } else { &o })?.as_slice() {
            [] => None,
            [one] => Some(*one),
            _ => bail!("--owner takes one Discord id"),
        };
    }
    for (var, value, field) in [
        ("operators", operators, &mut s.operators),
        ("grants", grants, &mut s.grants),
        ("guilds", guilds, &mut s.guilds),
        ("channels", channels, &mut s.channels),
        ("trusted-dms", trusted_dms, &mut s.trusted_dms),
        ("trusted-rooms", trusted_rooms, &mut s.trusted_rooms),
    ] {
        if let Some(v) = value {
            *field = id_list(var, &v)?;
        }
    }
    if let Some(code) = sharing {
        s.sharing = Sharing::parse(code.trim()).with_context(|| format!("--sharing: {code:?} is neither `guild` nor `none`"))?;
    }
    let version = store.set_owner_settings(&s).await?;
    println!("owner settings saved (version {version}); every lane's next turn uses them");
    Ok(())
}

/// `clankie self apply`: the self file checked, applied in one transaction, and what it wrote said.
async fn apply(store: &Store, file: &std::path::Path) -> Result<()> {
    let self_file = SelfFile::read(file).with_context(|| format!("checking the self file {}", file.display()))?;
    let report = store.apply_self_file(&self_file).await.with_context(|| format!("applying the self file {}", file.display()))?;
    if report.is_empty() {
        println!("nothing changed: every field the file gives is as it last applied it");
    }
    for field in &report.written {
        println!("wrote {field}");
    }
    if report.memories_added > 0 {
        println!("added {} approved memory fact(s)", report.memories_added);
    }
    for (what, version) in [("persona", report.persona_version), ("owner settings", report.settings_version)] {
        if let Some(version) = version {
            println!("{what} saved (version {version}); every lane's next turn uses it");
        }
    }
    Ok(())
}

/// `clankie self forget-user`: the store forgets them lane by lane, then the streams, and the counts are said.
async fn forget_user(settings: &Settings, store: &Store, user_id: u64, wait_secs: u64) -> Result<()> {
    let wait = std::time::Duration::from_secs(wait_secs);
    let forgotten = clankie_self::rewrite::forget_user(store, user_id, wait, |lane| println!("rewrote {lane}"))
        .await
        .with_context(|| format!("forgetting user {user_id}"))?;
    let bus = clankie_bus::Bus::connect(settings, "cli").await.context("connecting to NATS to erase their messages from the streams")?;
    let erased = clankie_self::rewrite::erase_from_streams(store, &bus, user_id, &forgotten)
        .await
        .with_context(|| format!("erasing user {user_id}'s messages from the streams"))?;
    for (stream, n) in &erased.by_stream {
        println!("erased {n} of their event(s) from {stream}");
    }
    println!(
        "forgot user {user_id}: lanes {}, messages {}, blocks {}, answers {} (kept {} that answered others too), summaries {}, ring lines {}, memories {}, experiences {}",
        forgotten.lanes,
        forgotten.messages,
        forgotten.blocks,
        forgotten.answers,
        forgotten.answers_kept,
        forgotten.summaries,
        forgotten.ring_lines,
        forgotten.memories,
        forgotten.experiences
    );
    if forgotten.lanes_busy > 0 {
        bail!("{} lane(s) stayed busy with a live run for {wait_secs} s; run the command again", forgotten.lanes_busy);
    }
    Ok(())
}
