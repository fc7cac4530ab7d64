"""HTTP API and web console. Not built yet."""
