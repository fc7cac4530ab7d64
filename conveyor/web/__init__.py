"""The web console: an HTTP API, live pages and Prometheus metrics for Conveyor.

Owns: the `conveyor web` command (cli) and its config.json (config); the REST API under
/api/v1 with its OpenAPI schema (api_queues, api_jobs, api_messages, schemas, ids) and seed
004's RQ message routes (rq_routes); the server-rendered pages and their server-sent events
(pages, views, events, ansi, templates/, static/); authentication, roles, CSRF and security
headers (security); `/metrics` (metrics); the cached picture of nodes, queues and rates that
pages, API and metrics share (sampler); the node gateway (gateway) and the read side of the
worker queue directories (workdirs).

Must not touch: node internals (conveyor.node, core, persistence, cluster): it talks to
nodes only through `conveyor.client`, and to worker state only through `conveyor.worker`'s
public functions (queuedir's QueueConfig, MessageStore, STATES, dir_name; envelope;
service.add_message). Every asset is served by the app itself: no CDN, no build step.
"""
