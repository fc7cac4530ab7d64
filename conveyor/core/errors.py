"""Errors the core raises, carrying Disque's exact reply text (without the leading '-')."""

from __future__ import annotations


class CommandError(Exception):
    """A command failed; `message` is the error line as sent to the client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


NOREPL_LEVEL = "NOREPL Not enough reachable nodes for the requested replication level"
_NOREPL_NO_COPY = ", since I'm unable to hold a copy of the message for the following reason: "
NOREPL_LEAVING = NOREPL_LEVEL + _NOREPL_NO_COPY + "I'm leaving the cluster"
NOREPL_OUT_OF_MEMORY = NOREPL_LEVEL + _NOREPL_NO_COPY + "I'm out of memory"
MAXLEN = "MAXLEN Queue is already longer than the specified MAXLEN count"
PAUSED = "PAUSED Queue paused in input, try later"
DELAY_TOO_LONG = (
    "ERR The specified DELAY is greater than TTL. Job refused since would never be delivered"
)
RETRY0_REPLICATE = (
    "ERR With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)"
)
NOJOB = "NOJOB Job not known in the context of this node."
TOOLATE = (
    "TOOLATE Half of job TTL already elapsed, you are no longer allowed to postpone "
    "the next delivery."
)
BADID = "BADID Invalid Job ID format."
LEAVING = "LEAVING This node is leaving the cluster, please connect to a different one"
OOM = "OOM command not allowed when used memory > 'maxmemory'."
