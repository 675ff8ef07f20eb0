"""Schedulers: where scan tasks run. No delete semantics live here, only scheduling."""
