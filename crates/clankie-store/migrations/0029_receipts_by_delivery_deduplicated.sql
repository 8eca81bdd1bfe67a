-- The trail's index by delivery was a hash index: 148 bytes a message in the day bench, as its
-- buckets split ahead of the rows. An ordered index on the id alone stores each delivery once
-- with the rows it has (B-tree deduplication; the time in the key used to defeat it), and a
-- message's three receipts then cost about one entry.
DROP INDEX receipts_delivery;
CREATE INDEX receipts_delivery ON receipts (delivery_id) WHERE delivery_id <> '';
