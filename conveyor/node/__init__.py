"""The asyncio server for one node.

Owns: client connections (`connection`, their TCP keepalive in `keepalive`), the command
table (`commands`) and handlers (`cmd_*`, written against the `context` Protocols), runs
of pipelined ADDJOBs through that table (`addjob_runs`) and the ADDJOBs of many clients
gathered over one turn of the loop (`turn_adds`), argument parsing into typed
values (`parsing`), reply encoding (`replies`), carrying out the core's effects and the
one event-loop timer for its deadlines (`server`), the cluster's bus and membership
carried out in asyncio (`cluster`, with when its messages leave in `send_policy`),
config, INFO, the node ID file and the job-event log; who may connect (`access`) and
authenticate or run protected commands (`auth`).
Must not touch: job state directly; every change goes through conveyor.core's facade.
"""
