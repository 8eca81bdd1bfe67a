//! Receipts: the audit line every handled delivery leaves on the bus, published the same way by
//! every part (ingest, posting, reactions, commands), so `clankie audit` reads one shape.

use clankie_bus::now_ms;
use clankie_proto::{ReceiptKind, v1};

use crate::state::Gateway;

impl Gateway {
    /// Publishes a receipt of `kind` for `delivery_id`, built by `build`; a kind that does not
    /// parse or a bus away costs the receipt, never the work it records.
    pub(crate) async fn receipt(&self, kind: &'static str, delivery_id: &str, build: impl FnOnce(v1::Receipt) -> v1::Receipt) {
        let Ok(kind) = ReceiptKind::new(kind) else { return };
        let receipt = build(v1::Receipt::new(&kind, self.bus().service(), delivery_id, now_ms()));
        if let Err(e) = self.bus().publish_receipt(&receipt).await {
            tracing::warn!(error = %e, "receipt not published");
        }
    }
}
