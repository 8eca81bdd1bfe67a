use std::collections::HashMap;

use clankie_proto::v1;
use sqlx::Row;
use sqlx::types::Json;

use crate::{Store, StoreError};

/// A receipt as stored, with its row id.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredReceipt {
    pub id: i64,
    pub receipt: v1::Receipt,
}

// What a stored receipt keeps: the ids, counts and flags that say something. A count of zero,
// a flag that is false and an empty id are left out, as protobuf leaves out a zero field, so a
// reader takes an absent count as 0 and an absent flag as false. Zeros were a third of a
// receipt's bytes, and receipts are most of the store's growth per message.

/// The ids of `r` that are not empty.
fn said_ids(r: &v1::Receipt) -> HashMap<&str, &str> {
    r.ids.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The counts of `r` that are not zero.
fn said_counts(r: &v1::Receipt) -> HashMap<&str, i64> {
    r.counts.iter().filter(|(_, v)| **v != 0).map(|(k, v)| (k.as_str(), *v)).collect()
}

/// The flags of `r` that are set.
fn said_flags(r: &v1::Receipt) -> HashMap<&str, bool> {
    r.flags.iter().filter(|(_, v)| **v).map(|(k, _)| (k.as_str(), true)).collect()
}

impl Store {
    /// Stores a receipt, keeping only the ids, counts and flags that say something: no zero
    /// count, false flag or empty id. With a `key` (see [`Store::insert_receipts`]) a second
    /// insert of the same key is ignored; without one the row takes the next id. Returns whether a row was
    /// written.
    pub async fn insert_receipt(&self, receipt: &v1::Receipt, key: Option<i64>) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "INSERT INTO receipts (id, kind, delivery_id, service, lane, at, ids, counts, flags, codes)
             VALUES (COALESCE($1, nextval('receipts_id_seq')), $2, $3, $4, $5, to_timestamp($6::double precision / 1000), $7, $8, $9, $10)
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(key)
        .bind(&receipt.kind)
        .bind(&receipt.delivery_id)
        .bind(&receipt.service)
        .bind(&receipt.lane)
        .bind(receipt.at_ms)
        .bind(Json(said_ids(receipt)))
        .bind(Json(said_counts(receipt)))
        .bind(Json(said_flags(receipt)))
        .bind(&receipt.codes)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Stores many receipts in one statement, each under its key, which becomes its row id (a
    /// second copy of a key is ignored); returns how many rows were written. The receipts
    /// recorder writes what it pulled together this way, instead of one round-trip each. A key
    /// is the time in nanoseconds the receipts stream stored the receipt: a redelivery repeats
    /// it, and it is far above any id the row sequence gives a receipt stored without a key.
    pub async fn insert_receipts(&self, batch: &[(&v1::Receipt, i64)]) -> Result<u64, StoreError> {
        if batch.is_empty() {
            return Ok(0);
        }
        let col = |f: fn(&v1::Receipt) -> String| batch.iter().map(|(r, _)| f(r)).collect::<Vec<String>>();
        let json = |f: fn(&v1::Receipt) -> serde_json::Value| batch.iter().map(|(r, _)| f(r)).collect::<Vec<serde_json::Value>>();
        let done = sqlx::query(
            "INSERT INTO receipts (id, kind, delivery_id, service, lane, at, ids, counts, flags, codes)
             SELECT k, kind, d, svc, lane, to_timestamp(at_ms::double precision / 1000), ids, counts, flags,
                    ARRAY(SELECT jsonb_array_elements_text(codes))
             FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[],
                         $7::jsonb[], $8::jsonb[], $9::jsonb[], $10::jsonb[])
                  AS b(k, kind, d, svc, lane, at_ms, ids, counts, flags, codes)
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(batch.iter().map(|(_, k)| *k).collect::<Vec<i64>>())
        .bind(col(|r| r.kind.clone()))
        .bind(col(|r| r.delivery_id.clone()))
        .bind(col(|r| r.service.clone()))
        .bind(col(|r| r.lane.clone()))
        .bind(batch.iter().map(|(r, _)| r.at_ms).collect::<Vec<i64>>())
        .bind(json(|r| serde_json::json!(said_ids(r))))
        .bind(json(|r| serde_json::json!(said_counts(r))))
        .bind(json(|r| serde_json::json!(said_flags(r))))
        .bind(json(|r| serde_json::json!(r.codes)))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Every receipt of one delivery, oldest first.
    pub async fn receipts_for_delivery(&self, delivery_id: &str) -> Result<Vec<StoredReceipt>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, kind, delivery_id, service, lane, (extract(epoch from at) * 1000)::bigint AS at_ms, ids, counts, flags, codes
             FROM receipts WHERE delivery_id = $1 ORDER BY at, id",
        )
        .bind(delivery_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                Ok(StoredReceipt {
                    id: r.try_get("id")?,
                    receipt: v1::Receipt {
                        kind: r.try_get("kind")?,
                        delivery_id: r.try_get("delivery_id")?,
                        service: r.try_get("service")?,
                        lane: r.try_get("lane")?,
                        at_ms: r.try_get("at_ms")?,
                        ids: r.try_get::<Json<HashMap<String, String>>, _>("ids")?.0,
                        counts: r.try_get::<Json<HashMap<String, i64>>, _>("counts")?.0,
                        flags: r.try_get::<Json<HashMap<String, bool>>, _>("flags")?.0,
                        codes: r.try_get("codes")?,
                    },
                })
            })
            .collect()
    }
}
