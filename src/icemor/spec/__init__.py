"""The Iceberg spec as icemor applies it: file descriptors, delete-file rules, DV codec."""
