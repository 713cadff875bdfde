"""Physical replication: pages, buffer pool, primary, read-only nodes, lazy replay."""
