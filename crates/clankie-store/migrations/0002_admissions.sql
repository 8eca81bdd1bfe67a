-- The captain's admission decision, remembered from the first time it saw a
-- delivery, so a redelivery (after a replica died) is judged the same way
-- even though the room's state has moved on since.
CREATE TABLE admissions (
    delivery_id TEXT PRIMARY KEY,
    lane        TEXT NOT NULL,
    reason      TEXT NOT NULL,
    admitted_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
