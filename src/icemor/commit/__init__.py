"""Metadata changes: manifests with delete content, RowDelta and rewrite producers, validation, retries.

Every change to table metadata that icemor makes goes through this package, and through one
function of it, :func:`icemor.commit.door.commit` (``create`` for a new table): the only
``commit_table`` call (``make lint`` checks both: ``tools/check_commit_path.py``).
"""
