"""The API's request and response bodies: they make the OpenAPI schema, and every response
is validated against them, so the schema says what the API really sends."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from conveyor.web.ids import JOB_ID_RE, MAX_QUEUE_CHARS, QUEUE_RE

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


class _Strict(BaseModel):
    # Strict: `false` is not a delay of 0, nor 1 a body "1"; what the schema says goes.
    model_config = ConfigDict(extra="forbid", strict=True)


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class Node(BaseModel):
    address: str
    up: bool
    id: str | None = None
    priority: int | None = None
    flags: list[str] = []
    error: str | None = None
    info: dict[str, int | float | str] = {}


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


JobIdText = Annotated[str, Field(pattern=f"^{JOB_ID_RE}$")]
QueueText = Annotated[str, Field(min_length=1, max_length=MAX_QUEUE_CHARS, pattern=f"^{QUEUE_RE}$")]


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


class MessageDetail(MessageSummary):
    queue: str
    url: str
    attachments: list[Attachment]
    envelope: dict[str, Any]
    status_json: dict[str, Any]
    job: JobDetail | None = Field(None, description="SHOW on the node; null once acked")


_BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


class NewAttachment(_Strict):
    name: str = Field(
        min_length=1, max_length=255, pattern=r"^[^/\x00.][^/\x00]*$", description="a file name"
    )
    data: str = Field(description="base64", max_length=MAX_BODY_CHARS, pattern=_BASE64)


class NewMessage(_Strict):
    params: dict[Literal["param1", "param2", "param3", "param4"], str] = {}
    due: Seconds = Field(0, description="seconds before it may run")
    attachments: list[NewAttachment] = Field([], max_length=16)


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
