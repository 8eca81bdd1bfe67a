-- The reply outbox. What a turn posts (its reply, each text update) commits in
-- the same fenced transaction as the turn's outcomes; a relay publishes the
-- rows afterwards with the row id as Nats-Msg-Id and marks them sent, dropping
-- the payload. A run that loses its lane commits nothing, so it posts nothing.
CREATE TABLE outbox (
    id         TEXT PRIMARY KEY,
    lane       TEXT NOT NULL REFERENCES lanes (lane),
    turn_id    TEXT NOT NULL,
    subject    TEXT NOT NULL,
    payload    BYTEA,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at    TIMESTAMPTZ
);
CREATE INDEX outbox_unsent ON outbox (created_at) WHERE sent_at IS NULL;

-- Where each admitted delivery sits in the ingress stream, so a replica taking
-- a lane over can gather what a dead run admitted and never settled.
ALTER TABLE admissions ADD COLUMN stream_seq BIGINT;
CREATE INDEX admissions_lane_recent ON admissions (lane, admitted_at);
