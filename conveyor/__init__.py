"""Conveyor: a distributed job queue speaking Disque's client protocol."""

__version__ = "0.1.0"
