"""Table maintenance for merge-on-read tables (equality->position conversion, compaction, expiry)."""
