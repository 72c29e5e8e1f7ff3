"""``s3_claim_check``: bodies too large for the queue travel through S3, in the pointer format
of AWS's SQS Extended Client libraries, so either side may be AWS's client or this sidecar.

The format, as AWS's clients write it (``amazon-sqs-extended-client`` 1.0.1 on PyPI,
``sqs_extended_client/client.py`` ``_store_message_in_s3``; the Java
``amazon-sqs-java-extended-client-lib`` 2.x serialises its ``PayloadS3Pointer`` with Jackson's
type wrapper to the same array, 1.x with the class ``com.amazon.sqs.javamessaging.
MessageS3Pointer``):

* the message attribute ``ExtendedPayloadSize`` (legacy: ``SQSLargePayloadSize``), a Number:
  the body's size in bytes. Its presence marks the body as a pointer;
* the body ``["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": B,
  "s3Key": K}]``. The bare object ``{"s3BucketName": B, "s3Key": K}`` (a pointer serialised
  without the type wrapper) is read too.

Receiving: the object is fetched before delivery, in a worker thread, into one buffer of its
Content-Length (objects over ``max_object_bytes`` are dead-lettered before reading). After
an ack the object is deleted (``delete_after_ack``, default true, as AWS's Java client does;
AWS's Python client keeps objects unless told to delete them); after a retry or a dead letter
it is kept, so the message can still be read. A fetch that fails for now (network, throttling,
5xx) retries the message; a missing object or bucket, a denied access or a malformed pointer
dead-letters it with the reason.

Publishing (``priority-pubsub publish``): a body whose size plus its attributes' exceeds
``threshold_bytes`` is put into ``bucket`` under a random key and replaced by the pointer.

S3 is reached with the standard AWS chain (credentials, ``AWS_REGION``, ``AWS_ENDPOINT_URL_S3``
or ``AWS_ENDPOINT_URL``), or ``region`` / ``endpoint_url`` given here, as for the SQS driver.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from priority_pubsub.core.errors import TransformError, TransformUnavailable
from priority_pubsub.core.outcome import Kind, Outcome
from priority_pubsub.telemetry.logs import get_logger
from priority_pubsub.transforms.base import Payload

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client

log = get_logger(__name__)

SIZE_ATTRIBUTE = "ExtendedPayloadSize"
LEGACY_SIZE_ATTRIBUTE = "SQSLargePayloadSize"
POINTER_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"
KNOWN_POINTER_CLASSES = frozenset({
    POINTER_CLASS, "com.amazon.sqs.javamessaging.MessageS3Pointer",
    "com.amazonaws.payloadoffloading.PayloadS3Pointer",
})
DEFAULT_THRESHOLD_BYTES = 262_144
_GONE = frozenset({"NoSuchKey", "NoSuchBucket", "404", "NotFound", "InvalidObjectState"})
_DENIED = frozenset({"AccessDenied", "403", "Forbidden", "AllAccessDisabled",
                     "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccountProblem"})


class ClaimCheckOptions(BaseModel):
    """``transforms: [{name: s3_claim_check, bucket: B, ...}]``."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    bucket: str | None = Field(default=None, min_length=3)
    """Where ``publish`` puts bodies over the threshold (received pointers name their own)."""
    threshold_bytes: int = Field(default=DEFAULT_THRESHOLD_BYTES, ge=0, le=DEFAULT_THRESHOLD_BYTES)
    delete_after_ack: bool = True
    max_object_bytes: int = Field(default=256 * 1024 * 1024, ge=1)
    """Larger objects are dead-lettered unread: the sidecar holds one body per worker."""
    region: str | None = None
    endpoint_url: str | None = None


@dataclass(frozen=True, slots=True)
class S3Claim:
    bucket: str
    key: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def parse_pointer(body: bytes) -> S3Claim:
    """The object a pointer body names; ``TransformError`` when it is not a pointer."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TransformError(f"malformed S3 pointer: not JSON: {exc}") from None
    if isinstance(document, list):
        if len(document) != 2 or document[0] not in KNOWN_POINTER_CLASSES:
            raise TransformError("malformed S3 pointer: expected [\"<pointer class>\", "
                                 "{\"s3BucketName\", \"s3Key\"}]")
        document = document[1]
    if not isinstance(document, dict):
        raise TransformError("malformed S3 pointer: not an object")
    bucket, key = document.get("s3BucketName"), document.get("s3Key")
    if not (isinstance(bucket, str) and bucket and isinstance(key, str) and key):
        raise TransformError("malformed S3 pointer: s3BucketName and s3Key must be strings")
    return S3Claim(bucket, key)


def pointer_body(claim: S3Claim) -> bytes:
    """The pointer as AWS's clients write it."""
    return json.dumps([POINTER_CLASS, {"s3BucketName": claim.bucket, "s3Key": claim.key}]
                      ).encode("utf-8")


class S3ClaimCheck:
    """See the module docstring. Async: S3 calls run in worker threads."""

    name = "s3_claim_check"
    options_model: ClassVar[type[BaseModel]] = ClaimCheckOptions

    def __init__(self, options: BaseModel) -> None:
        assert isinstance(options, ClaimCheckOptions)
        self.options = options
        self._client: S3Client | None = None

    # -- receiving -------------------------------------------------------------------------

    async def apply(self, payload: Payload) -> Payload:
        attributes = dict(payload.attributes)
        if attributes.pop(SIZE_ATTRIBUTE, None) is None \
                and attributes.pop(LEGACY_SIZE_ATTRIBUTE, None) is None:
            return payload  # not offloaded
        claim = parse_pointer(payload.body)
        body = await asyncio.to_thread(self._fetch, claim)
        return Payload(body, attributes, payload.content_type, (*payload.claims, claim))

    def _fetch(self, claim: S3Claim) -> bytes:
        with _classified(f"get {claim.url}"):
            answer = self._s3().get_object(Bucket=claim.bucket, Key=claim.key)
            size = answer["ContentLength"]
            stream = answer["Body"]
            try:
                if size > self.options.max_object_bytes:
                    raise TransformError(f"{claim.url} is {size} bytes, over max_object_bytes "
                                         f"({self.options.max_object_bytes})")
                # One read of a known Content-Length: urllib3 fills one buffer of that size
                # and botocore checks the length (test_a_64mb_body_is_held_once measures it).
                body: bytes = stream.read()
                return body
            finally:
                stream.close()

    async def after_settle(self, outcome: Outcome, payload: Payload) -> None:
        if outcome.kind is not Kind.ACK or not self.options.delete_after_ack:
            return  # kept on retry and dead letter: the message still points at it
        for claim in payload.claims:
            if isinstance(claim, S3Claim):
                await asyncio.to_thread(self._delete, claim)

    def _delete(self, claim: S3Claim) -> None:
        try:
            with _classified(f"delete {claim.url}"):
                self._s3().delete_object(Bucket=claim.bucket, Key=claim.key)
        except TransformError as exc:  # the message is acked: an orphan object, not a loss
            log.warning("claim-checked object not deleted", object=claim.url, error=str(exc))

    # -- publishing ------------------------------------------------------------------------

    async def before_publish(self, payload: Payload) -> Payload:
        size = len(payload.body) + sum(len(k.encode()) + len(v.encode())
                                       for k, v in payload.attributes.items())
        if size <= self.options.threshold_bytes:
            return payload
        if not self.options.bucket:
            raise TransformError(f"body of {size} bytes is over threshold_bytes "
                                 f"({self.options.threshold_bytes}): set the transform's bucket")
        claim = S3Claim(self.options.bucket, str(uuid.uuid4()))
        await asyncio.to_thread(self._put, claim, payload.body)
        attributes = {**payload.attributes, SIZE_ATTRIBUTE: str(len(payload.body))}
        return Payload(pointer_body(claim), attributes, payload.content_type)

    def _put(self, claim: S3Claim, body: bytes) -> None:
        with _classified(f"put {claim.url}"):
            self._s3().put_object(Bucket=claim.bucket, Key=claim.key, Body=body)

    def _s3(self) -> S3Client:
        if self._client is None:
            import boto3

            with _classified("create S3 client"):
                self._client = boto3.session.Session().client(
                    "s3", region_name=self.options.region,
                    endpoint_url=self.options.endpoint_url)
        return self._client


@contextmanager
def _classified(doing: str) -> Iterator[None]:
    """botocore errors -> ``TransformError`` (gone, denied: dead letter) or
    ``TransformUnavailable`` (anything that may pass: retry)."""
    import botocore.exceptions

    try:
        yield
    except botocore.exceptions.ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        text = f"S3 {doing}: {code}: {error.get('Message', '')}".rstrip(": ")
        if code in _GONE:
            raise TransformError(f"{text} (the object is gone)") from exc
        if code in _DENIED:
            raise TransformError(f"{text} (access denied)") from exc
        raise TransformUnavailable(text) from exc
    except botocore.exceptions.BotoCoreError as exc:
        raise TransformUnavailable(f"S3 {doing}: {exc}") from exc
