"""Scan planning: v3-aware manifest reading, the delete-file index, task split and combine."""
