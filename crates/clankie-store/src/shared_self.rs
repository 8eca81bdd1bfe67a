//! The shared self's tables: persona, owner settings, memory and experiences.
//! What they mean, and who may see what, is `clankie-self`'s business; this
//! module only reads and writes them.

use std::time::Duration;

use clankie_proto::v1;
use sqlx::Row;

use crate::{Store, StoreError};

/// Who he is. Empty fields mean "use the deployment's defaults".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Persona {
    pub name: String,
    pub aliases: Vec<String>,
    pub character_sheet: String,
    pub speaking_style: String,
    pub version: i64,
}

/// How far a thread's experiences travel. Only ever made stricter than `Guild`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Sharing {
    /// Within one guild (and to trusted DMs); never out of a DM, never between guilds.
    #[default]
    Guild,
    /// Every thread keeps its experiences to itself.
    None,
}

impl Sharing {
    /// The stored code.
    pub fn code(self) -> &'static str {
        match self {
            Sharing::Guild => "guild",
            Sharing::None => "none",
        }
    }

    /// Parses a stored or typed code.
    pub fn parse(code: &str) -> Option<Sharing> {
        match code {
            "guild" => Some(Sharing::Guild),
            "none" => Some(Sharing::None),
            _ => None,
        }
    }
}

/// As its stored code, which is what a self file's digest of the field is taken over.
impl serde::Serialize for Sharing {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.code())
    }
}

/// What the owner decided. Empty `guilds`/`channels` admit everywhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnerSettings {
    pub owner_id: Option<u64>,
    pub operators: Vec<u64>,
    pub grants: Vec<u64>,
    pub guilds: Vec<u64>,
    pub channels: Vec<u64>,
    pub trusted_dms: Vec<u64>,
    /// Guild text channels the owner trusts: a privileged request there keeps a durable system lane.
    pub trusted_rooms: Vec<u64>,
    pub sharing: Sharing,
    pub version: i64,
}

/// One stored version of the persona or the owner settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SelfVersion {
    pub version: i64,
    /// The edited row's fields as JSON.
    pub body: serde_json::Value,
    pub edited_at_ms: i64,
}

/// Where a memory stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryStatus {
    Proposed,
    Approved,
    Rejected,
}

impl MemoryStatus {
    /// The stored code.
    pub fn code(self) -> &'static str {
        match self {
            MemoryStatus::Proposed => "proposed",
            MemoryStatus::Approved => "approved",
            MemoryStatus::Rejected => "rejected",
        }
    }

    fn parse(code: &str) -> Result<MemoryStatus, StoreError> {
        match code {
            "proposed" => Ok(MemoryStatus::Proposed),
            "approved" => Ok(MemoryStatus::Approved),
            "rejected" => Ok(MemoryStatus::Rejected),
            other => Err(StoreError::Corrupt(format!("memory status {other:?}"))),
        }
    }
}

/// One memory, proposed or decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Memory {
    pub id: i64,
    pub fact: String,
    pub status: MemoryStatus,
    /// The thread that proposed it (a lane key), or `cli` when a person added it.
    pub proposed_in: String,
    pub proposed_at_ms: i64,
}

fn ids(v: Vec<i64>) -> Vec<u64> {
    v.into_iter().map(|i| i as u64).collect()
}

/// The persona from a row carrying `self_persona`'s columns under their own names.
pub(crate) fn persona_from(r: &sqlx::postgres::PgRow) -> Result<Persona, StoreError> {
    Ok(Persona {
        name: r.try_get("name")?,
        aliases: r.try_get("aliases")?,
        character_sheet: r.try_get("character_sheet")?,
        speaking_style: r.try_get("speaking_style")?,
        version: r.try_get("version")?,
    })
}

/// Owner settings from a row carrying `self_settings`' columns under their own names.
pub(crate) fn owner_settings_from(r: &sqlx::postgres::PgRow) -> Result<OwnerSettings, StoreError> {
    let sharing: String = r.try_get("sharing")?;
    Ok(OwnerSettings {
        owner_id: r.try_get::<Option<i64>, _>("owner_id")?.map(|i| i as u64),
        operators: ids(r.try_get("operators")?),
        grants: ids(r.try_get("grants")?),
        guilds: ids(r.try_get("guilds")?),
        channels: ids(r.try_get("channels")?),
        trusted_dms: ids(r.try_get("trusted_dms")?),
        trusted_rooms: ids(r.try_get("trusted_rooms")?),
        sharing: Sharing::parse(&sharing).ok_or_else(|| StoreError::Corrupt(format!("sharing {sharing:?}")))?,
        version: r.try_get("version")?,
    })
}

fn sql_ids(v: &[u64]) -> Vec<i64> {
    v.iter().map(|i| *i as i64).collect()
}

/// The one persona write, on the pool or inside a transaction (a self file's apply): the edit
/// and its version row in one statement.
pub(crate) async fn write_persona<'e>(e: impl sqlx::PgExecutor<'e>, p: &Persona) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(
        "WITH edited AS (
             UPDATE self_persona SET name = $1, aliases = $2, character_sheet = $3, speaking_style = $4,
                    version = version + 1, updated_at = now()
             WHERE id = 1 RETURNING version)
         INSERT INTO self_versions (what, version, body)
         SELECT 'persona', version, jsonb_build_object('name', $1::text, 'aliases', $2::text[],
                'character_sheet', $3::text, 'speaking_style', $4::text) FROM edited
         RETURNING version",
    )
    .bind(&p.name)
    .bind(&p.aliases)
    .bind(&p.character_sheet)
    .bind(&p.speaking_style)
    .fetch_one(e)
    .await?)
}

/// The one owner-settings write, on the pool or inside a transaction, with its version row.
pub(crate) async fn write_owner_settings<'e>(e: impl sqlx::PgExecutor<'e>, s: &OwnerSettings) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(
        "WITH edited AS (
             UPDATE self_settings SET owner_id = $1, operators = $2, grants = $3, guilds = $4, channels = $5,
                    trusted_dms = $6, sharing = $7, trusted_rooms = $8, version = version + 1, updated_at = now()
             WHERE id = 1 RETURNING version)
         INSERT INTO self_versions (what, version, body)
         SELECT 'settings', version, jsonb_build_object('owner_id', $1::bigint, 'operators', $2::bigint[],
                'grants', $3::bigint[], 'guilds', $4::bigint[], 'channels', $5::bigint[],
                'trusted_dms', $6::bigint[], 'sharing', $7::text, 'trusted_rooms', $8::bigint[]) FROM edited
         RETURNING version",
    )
    .bind(s.owner_id.map(|i| i as i64))
    .bind(sql_ids(&s.operators))
    .bind(sql_ids(&s.grants))
    .bind(sql_ids(&s.guilds))
    .bind(sql_ids(&s.channels))
    .bind(sql_ids(&s.trusted_dms))
    .bind(s.sharing.code())
    .bind(sql_ids(&s.trusted_rooms))
    .fetch_one(e)
    .await?)
}

/// The one memory insert, on the pool or inside a transaction.
pub(crate) async fn insert_memory<'e>(
    e: impl sqlx::PgExecutor<'e>,
    fact: &str,
    status: MemoryStatus,
    proposed_in: &str,
) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(
        "INSERT INTO self_memory (fact, status, proposed_in, decided_at)
         VALUES ($1, $2, $3, CASE WHEN $2 = 'proposed' THEN NULL ELSE now() END) RETURNING id",
    )
    .bind(fact)
    .bind(status.code())
    .bind(proposed_in)
    .fetch_one(e)
    .await?)
}

impl Store {
    /// The persona row.
    pub async fn persona(&self) -> Result<Persona, StoreError> {
        let r = sqlx::query("SELECT name, aliases, character_sheet, speaking_style, version FROM self_persona WHERE id = 1")
            .fetch_one(&self.pool)
            .await?;
        persona_from(&r)
    }

    /// Replaces the persona and bumps its version; returns the new version.
    pub async fn set_persona(&self, p: &Persona) -> Result<i64, StoreError> {
        write_persona(&self.pool, p).await
    }

    /// The owner settings row.
    pub async fn owner_settings(&self) -> Result<OwnerSettings, StoreError> {
        let r = sqlx::query(
            "SELECT owner_id, operators, grants, guilds, channels, trusted_dms, trusted_rooms, sharing, version
             FROM self_settings WHERE id = 1",
        )
        .fetch_one(&self.pool)
        .await?;
        owner_settings_from(&r)
    }

    /// Replaces the owner settings and bumps their version; returns the new version.
    pub async fn set_owner_settings(&self, s: &OwnerSettings) -> Result<i64, StoreError> {
        write_owner_settings(&self.pool, s).await
    }

    /// The newest `limit` stored versions of the persona (`what` = "persona") or the owner
    /// settings ("settings"), newest first, each as its version, body and edit time.
    pub async fn self_versions(&self, what: &str, limit: i64) -> Result<Vec<SelfVersion>, StoreError> {
        let rows = sqlx::query(
            "SELECT version, body, (extract(epoch from edited_at) * 1000)::bigint AS at_ms
             FROM self_versions WHERE what = $1 ORDER BY version DESC LIMIT $2",
        )
        .bind(what)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| Ok(SelfVersion { version: r.try_get("version")?, body: r.try_get("body")?, edited_at_ms: r.try_get("at_ms")? }))
            .collect()
    }

    /// Adds a memory; `Proposed` ones stay out of prompts until approved.
    pub async fn add_memory(&self, fact: &str, status: MemoryStatus, proposed_in: &str) -> Result<i64, StoreError> {
        insert_memory(&self.pool, fact, status, proposed_in).await
    }

    /// Moves a memory from `from` to `to` (approves or rejects a proposal, withdraws an
    /// approved fact); `false` when no memory with that id is `from`.
    pub async fn decide_memory(&self, id: i64, from: MemoryStatus, to: MemoryStatus) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE self_memory SET status = $3, decided_at = now() WHERE id = $1 AND status = $2")
            .bind(id)
            .bind(from.code())
            .bind(to.code())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Memories with one status, oldest first, at most `limit`.
    pub async fn memories(&self, status: MemoryStatus, limit: i64) -> Result<Vec<Memory>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, fact, status, proposed_in, (extract(epoch from proposed_at) * 1000)::bigint AS at_ms
             FROM self_memory WHERE status = $1 ORDER BY id LIMIT $2",
        )
        .bind(status.code())
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                let status: String = r.try_get("status")?;
                Ok(Memory {
                    id: r.try_get("id")?,
                    fact: r.try_get("fact")?,
                    status: MemoryStatus::parse(&status)?,
                    proposed_in: r.try_get("proposed_in")?,
                    proposed_at_ms: r.try_get("at_ms")?,
                })
            })
            .collect()
    }

    /// Stores an experience until `ttl` after it happened; a second copy of one id is ignored,
    /// and so is one that happened before one of its participants was forgotten (a recorder
    /// behind the stream would otherwise store again what the forget removed). False when not
    /// stored.
    pub async fn insert_experience(&self, e: &v1::Experience, ttl: Duration) -> Result<bool, StoreError> {
        let ids: Vec<i64> = e.participant_ids.iter().map(|&id| id as i64).collect();
        let done = sqlx::query(
            "INSERT INTO self_experiences
                 (experience_id, kind, thread, guild_id, summary, participants, delivery_id, at, expires_at, participant_ids)
             SELECT $1, $2, $3, $4, $5, $6, $7, to_timestamp($8::double precision / 1000),
                    to_timestamp($8::double precision / 1000) + make_interval(secs => $9), $10
             WHERE NOT EXISTS (SELECT 1 FROM forgotten_users
                               WHERE author_id = ANY($10) AND forgotten_at >= to_timestamp($8::double precision / 1000))
             ON CONFLICT (experience_id) DO NOTHING",
        )
        .bind(&e.experience_id)
        .bind(&e.kind)
        .bind(&e.thread)
        .bind(e.guild_id.map(|g| g as i64))
        .bind(&e.summary)
        .bind(&e.participants)
        .bind(&e.delivery_id)
        .bind(e.at_ms)
        .bind(ttl.as_secs_f64())
        .bind(&ids)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Experiences unexpired at `now_ms`, newest first, at most `limit`: those of one guild and
    /// of DMs, or all of them when `guild` is `None`. Who may see which is decided by the
    /// reader's privacy policy, not here. `now_ms` comes from the reader's clock, since an
    /// experience's life is counted from `at_ms`, which the writer's clock stamped.
    pub async fn recent_experiences(&self, guild: Option<u64>, limit: i64, now_ms: i64) -> Result<Vec<v1::Experience>, StoreError> {
        let rows = sqlx::query(
            "SELECT experience_id, kind, thread, guild_id, summary, participants, delivery_id, participant_ids,
                    (extract(epoch from at) * 1000)::bigint AS at_ms
             FROM self_experiences
             WHERE expires_at > to_timestamp($3::double precision / 1000)
               AND ($1::bigint IS NULL OR guild_id = $1 OR guild_id IS NULL)
             ORDER BY at DESC LIMIT $2",
        )
        .bind(guild.map(|g| g as i64))
        .bind(limit)
        .bind(now_ms)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                Ok(v1::Experience {
                    experience_id: r.try_get("experience_id")?,
                    kind: r.try_get("kind")?,
                    thread: r.try_get("thread")?,
                    guild_id: r.try_get::<Option<i64>, _>("guild_id")?.map(|g| g as u64),
                    summary: r.try_get("summary")?,
                    participants: r.try_get("participants")?,
                    delivery_id: r.try_get("delivery_id")?,
                    at_ms: r.try_get("at_ms")?,
                    participant_ids: r.try_get::<Vec<i64>, _>("participant_ids")?.into_iter().map(|id| id as u64).collect(),
                })
            })
            .collect()
    }

    /// Deletes the experiences expired at `now_ms`; returns how many went.
    pub async fn expire_experiences(&self, now_ms: i64) -> Result<u64, StoreError> {
        Ok(sqlx::query("DELETE FROM self_experiences WHERE expires_at <= to_timestamp($1::double precision / 1000)")
            .bind(now_ms)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    /// Marks `lane` as its own audience (a private thread): what happens there stays there.
    pub async fn mark_private(&self, lane: &clankie_proto::LaneKey) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO private_lanes (lane) VALUES ($1) ON CONFLICT (lane) DO NOTHING")
            .bind(lane.to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The lanes marked as their own audience ([`Store::mark_private`]).
    pub async fn private_lanes(&self) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar("SELECT lane FROM private_lanes ORDER BY lane").fetch_all(&self.pool).await?)
    }

    /// Lanes where he is now: a run is live, or the room's exchange settled within `window`.
    pub async fn present_lanes(&self, window: Duration) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT l.lane FROM lanes l LEFT JOIN exchanges e ON e.lane = l.lane
             WHERE (l.lease_owner IS NOT NULL AND l.lease_expires_at > now())
                OR e.last_settled_at > now() - make_interval(secs => $1)
             ORDER BY l.lane",
        )
        .bind(window.as_secs_f64())
        .fetch_all(&self.pool)
        .await?)
    }
}
