"""Row-level operations: append, delete (and next update, merge, apply-changes).

Each finds its target rows with a planning-layer scan, writes files through ``io/`` and
commits through ``commit/``; the engines only schedule the per-file work.
"""
