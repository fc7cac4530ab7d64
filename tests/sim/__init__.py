"""A deterministic cluster simulator: seeded histories of clients and faults (issue 11.6)."""
