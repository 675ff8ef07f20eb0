"""Metadata changes: manifests with delete content, RowDelta and rewrite producers, validation, retries.

Every change to table metadata that icemor makes goes through this package (``make lint`` checks
it: ``tools/check_commit_path.py``).
"""
