"""Table operations: create, append, add-files, drop, merge-on-read DELETE (no UPDATE/MERGE yet).

DELETE finds its target rows with a planning-layer scan, writes files through ``io/`` and
commits through ``commit/``; the engines only schedule the per-file work.
"""
