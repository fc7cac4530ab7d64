"""The API's request and response bodies: they make the OpenAPI schema, and every response
is validated against them, so the schema says what the API really sends."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from conveyor.web.attachments import ID_RE as ATTACHMENT_ID_RE
from conveyor.web.attachments import MAX_NAME_BYTES, fits
from conveyor.web.ids import JOB_ID_RE, MAX_QUEUE_CHARS, MSG_ID_RE, QUEUE_RE

MAX_INT = 2**31 - 1  # delays, TTLs and counts the console passes on to the node
MAX_BODY_CHARS = 12 * 1024 * 1024
STATE = Literal["que", "run", "done", "err", "relayed"]


def _json_int(value: Any) -> Any:
    # JSON Schema calls 5.0 an integer; strict pydantic would not. Booleans stay refused.
    if isinstance(value, float) and not isinstance(value, bool) and value.is_integer():
        return int(value)
    return value


# Bounds inside the type, so that `X | None` carries them into the schema's anyOf.
Seconds = Annotated[int, Field(ge=0, le=MAX_INT), BeforeValidator(_json_int)]
Positive = Annotated[int, Field(ge=1, le=MAX_INT), BeforeValidator(_json_int)]
JobIdText = Annotated[str, Field(pattern=f"^{JOB_ID_RE}$")]
QueueText = Annotated[str, Field(min_length=1, max_length=MAX_QUEUE_CHARS, pattern=f"^{QUEUE_RE}$")]


class _Strict(BaseModel):
    # Strict: `false` is not a delay of 0, nor 1 a body "1"; what the schema says goes.
    model_config = ConfigDict(extra="forbid", strict=True)


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class KnownNode(BaseModel):
    id: str
    address: str
    priority: int = Field(description="HELLO's: 1 ok, 5 no link, 10 PFAIL, 100 FAIL")
    flags: list[str]


class Node(BaseModel):
    address: str
    up: bool
    id: str | None = None
    priority: int | None = None
    flags: list[str] = []
    error: str | None = None
    info: dict[str, int | float | str] = {}
    known: list[KnownNode] = Field([], description="the other nodes it knows (HELLO)")


class ClusterLink(BaseModel):
    source: str = Field(description="the ID of the node that reports the link")
    target: str
    target_address: str
    flags: list[str]


class Cluster(BaseModel):
    nodes: list[Node]
    links: list[ClusterLink]
    size: int = Field(description="distinct node IDs seen")


class RunningMessage(BaseModel):
    id: str
    since: float | None = None
    pid: int | None = None


class WorkerQueueSlots(BaseModel):
    name: str
    slots: int
    busy: int
    running: list[RunningMessage]
    outcomes: dict[str, int] = {}


class Worker(BaseModel):
    id: str
    host: str
    pid: int
    state: Literal["running", "quiet", "stopping", "lost"]
    started: float | None
    updated: float | None
    queues: list[WorkerQueueSlots]


class WorkerList(BaseModel):
    workers: list[Worker]


class WorkerControl(BaseModel):
    id: str
    requested: Literal["quiet", "stop"]


class Schedule(BaseModel):
    index: int
    cron: str
    params: dict[str, str]
    next_run: float | None = Field(description="epoch seconds (UTC) of the next tick")


class ScheduleList(BaseModel):
    queue: str
    schedules: list[Schedule]


class ErrorMessage(BaseModel):
    queue: str
    id: str
    dir: str
    status: str
    updated: float | None
    params: dict[str, str]


class ErrorList(BaseModel):
    total: int
    items: list[ErrorMessage]


class ErrorAction(_Strict):
    queue: QueueText | None = Field(None, description="one queue; null: every queue directory")
    ids: list[Annotated[str, Field(pattern=f"^{MSG_ID_RE}$")]] | None = Field(
        None, max_length=1000, description="null: all of them (at most 1000)"
    )


class NodeList(BaseModel):
    nodes: list[Node]


class Queue(BaseModel):
    name: str
    exists: bool = Field(description="the node has the queue (QSTAT is not null)")
    len: int
    age: int
    idle: int
    blocked: int
    jobs_in: int
    jobs_out: int
    pause: str
    rate_in: float = Field(description="jobs in per second over the last sample")
    rate_out: float
    script_queue: bool = Field(description="a queue directory on this host runs it")
    messages: dict[str, int] | None = Field(None, description="messages by state on disk")
    workers: int | None = Field(None, description="num_workers of its queue directory")


class QueueList(BaseModel):
    queues: list[Queue]
    total: int
    rate_in: float
    rate_out: float


class Job(BaseModel):
    id: str
    queue: str
    body: str
    body_encoding: Literal["utf-8", "base64"]


class JobList(BaseModel):
    jobs: list[Job]


class JobDetail(BaseModel):
    """SHOW, with '-' in field names turned into '_'."""

    model_config = ConfigDict(extra="allow")
    id: str
    queue: str
    state: str
    body: str
    body_encoding: Literal["utf-8", "base64"]


class PauseRequest(_Strict):
    state: Literal["in", "out", "all", "none"]


class PauseResult(BaseModel):
    queue: str
    pause: str


class PurgeRequest(_Strict):
    state: Literal["queued", "active", "all"] = "queued"


class Count(BaseModel):
    count: int


class AddJob(_Strict):
    body: str = Field(max_length=MAX_BODY_CHARS)
    body_encoding: Literal["utf-8", "base64"] = "utf-8"
    delay: Seconds | None = None
    retry: Seconds | None = None
    ttl: Positive | None = None
    maxlen: Positive | None = None


class JobAdded(BaseModel):
    id: str
    queue: str


class Nack(_Strict):
    delay: Seconds | None = None


class DeadLetters(BaseModel):
    queue: str | None = Field(description="the node's deadletter-queue; null when unset")
    max_deliveries: int | None
    length: int
    jobs: list[Job]


class DeadLetterAction(_Strict):
    ids: list[JobIdText] | None = Field(None, max_length=10_000, description="null: all of them")
    queue: QueueText | None = Field(None, description="requeue: the queue to put them in")


class MessageSummary(BaseModel):
    id: str
    dir: str
    state: str
    status: str
    updated: float | None
    exit: int | None
    params: dict[str, str]
    count: int
    log_size: int


class MessagePage(BaseModel):
    state: str
    total: int
    offset: int
    limit: int
    truncated: bool
    items: list[MessageSummary]


class Attachment(BaseModel):
    name: str
    md5: str
    size: int | None = None
    url: str | None = Field(None, description="where workers fetch it (stored attachments)")


class MessageDetail(MessageSummary):
    queue: str
    url: str
    attachments: list[Attachment]
    envelope: dict[str, Any]
    status_json: dict[str, Any]
    webhook: dict[str, Any] | None = Field(
        None, description="webhook.json: url, attempts, delivered, gave_up, errors"
    )
    job: JobDetail | None = Field(None, description="SHOW on the node; null once acked")


_BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


AttachmentName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_NAME_BYTES,
        pattern=r"^[^/\x00-\x1f.][^/\x00-\x1f]*$",
        description=f"a file name of at most {MAX_NAME_BYTES} bytes in UTF-8",
    ),
    AfterValidator(fits),
]


class InlineAttachment(_Strict):
    """A small file as base64; the console stores it on its disk like an upload."""

    name: AttachmentName
    data: str = Field(description="base64", max_length=MAX_BODY_CHARS, pattern=_BASE64)


class StoredRef(_Strict):
    """A file uploaded before (POST /api/v1/attachments), of any size, by its `id`."""

    name: AttachmentName
    ref: str = Field(pattern=f"^{ATTACHMENT_ID_RE}$", description="the upload's id")


def _no_nul(value: str) -> str:
    # Params reach the script as environment variables, which cannot hold a NUL: the
    # message could never run.
    if "\x00" in value:
        raise ValueError("a param cannot hold a NUL byte (scripts get params as env vars)")
    return value


ParamText = Annotated[
    str, AfterValidator(_no_nul), Field(json_schema_extra={"pattern": "^[^\\x00]*$"})
]
WebhookUrl = Annotated[
    str, Field(min_length=8, max_length=2048, pattern=r"^https?://[^\s/?#]+[^\s]*$")
]


class NewMessage(_Strict):
    params: dict[Literal["param1", "param2", "param3", "param4"], ParamText] = {}
    due: Seconds = Field(0, description="seconds before it may run")
    attachments: list[InlineAttachment | StoredRef] = Field([], max_length=16)
    webhook: WebhookUrl | None = Field(
        None, description="its final state is POSTed here as JSON, retried with backoff"
    )


class StoredAttachment(BaseModel):
    id: str
    name: str
    md5: str
    size: int
    url: str = Field(description="where workers fetch it; give `id` as `ref` to a message")


class MessageAdded(BaseModel):
    id: str
    queue: str
    url: str


class MoveMessage(_Strict):
    to: Literal["done", "err", "relayed"]


class Moved(BaseModel):
    id: str
    state: str


class WorkerQueue(BaseModel):
    name: str
    directory: str
    script: str
    num_workers: int
    messages: dict[str, int]
    form: list[dict[str, str]]


class WorkerQueueList(BaseModel):
    queues: list[WorkerQueue]
    errors: dict[str, str]
