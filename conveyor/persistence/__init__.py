"""AOF write, rewrite, load, check and repair. Not built yet."""
