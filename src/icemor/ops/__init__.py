"""Table operations: create, append and overwrite, add-files, alter, upgrade, drop, and the
merge-on-read DELETE, UPDATE, MERGE and apply-changes (CDC).

The row-level operations find their target rows with a planning-layer scan, write files
through ``io/`` and commit through ``commit/``; the engines run the per-file work
(``units.py``: the per-data-file delete unit and the executor change task).
"""
