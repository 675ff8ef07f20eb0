"""Reading data files with deletes applied; loading and caching delete files."""
