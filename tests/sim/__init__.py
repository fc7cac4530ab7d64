"""A deterministic cluster simulator: seeded histories of clients and faults, nodes leaving
the cluster (CLUSTER LEAVING) among them (issue 11.6)."""
