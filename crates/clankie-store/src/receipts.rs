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

impl Store {
    /// Stores a receipt. With a `dedup_key` (a stream sequence, say) a second
    /// insert of the same key is ignored; returns whether a row was written.
    pub async fn insert_receipt(&self, receipt: &v1::Receipt, dedup_key: Option<&str>) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "INSERT INTO receipts (dedup_key, kind, delivery_id, service, lane, at, ids, counts, flags, codes)
             VALUES ($1, $2, $3, $4, $5, to_timestamp($6::double precision / 1000), $7, $8, $9, $10)
             ON CONFLICT (dedup_key) DO NOTHING",
        )
        .bind(dedup_key)
        .bind(&receipt.kind)
        .bind(&receipt.delivery_id)
        .bind(&receipt.service)
        .bind(&receipt.lane)
        .bind(receipt.at_ms)
        .bind(Json(&receipt.ids))
        .bind(Json(&receipt.counts))
        .bind(Json(&receipt.flags))
        .bind(&receipt.codes)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
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
