"""The HTTP app channel: one attempt posted to the app, its answer read as an ``Outcome``.

One ``aiohttp.ClientSession`` serves the whole sidecar; connections are reused. Its
connector has no limit of its own: the receiver's slots (``concurrency``, which a live
reload may change) bound the requests at the app, and a pool sized at start would hold a
grown concurrency at the start's value. A request has no
timeout of its own: the worker cancels it at its queue's timeout (``delivery.cancel``), and a
cancelled request's connection is closed (the app sees the client go), never reused.
"""

from __future__ import annotations

import json

import aiohttp

from priority_pubsub.app.backpressure import BUSY_STATUSES, parse_retry_after
from priority_pubsub.app.channel.bulk import Batch, entry_outcome
from priority_pubsub.app.request import NOT_REACHABLE, Prepared
from priority_pubsub.core import json_text
from priority_pubsub.core.app_request import AppRequest
from priority_pubsub.core.outcome import Outcome
from priority_pubsub.settings.config import AppConfig


def classify(
    status: int,
    body: bytes,
    fatal_codes: tuple[int, ...],
    *,
    exact_status: bool = False,
    retry_after: str | None = None,
) -> Outcome:
    """The app's answer as an outcome (docs/app/contract.md),
    following daprd's HTTP subscriber (dapr ``pkg/runtime/subscription/postman/http/http.go``):
    any 2xx whose body is not a JSON object, or whose ``status`` is empty or SUCCESS, acks;
    RETRY and unknown statuses retry; DROP and 404 drop; every other code retries. Two
    differences, both native conveniences: ``fatal_codes`` (empty in Dapr mode) dead-letter at
    once, and status strings match case-insensitively unless ``exact_status`` (Dapr mode:
    daprd compares exactly). And the app's "not now": 429 or 503 with a ``Retry-After`` is a
    release (the app did not take the message), not a failed attempt (docs/app/down.md).
    """
    if 200 <= status < 300:
        return _classify_success(status, body, exact_status)
    if status == 404:
        return Outcome.drop("app returned 404", status)
    if status in fatal_codes:
        return Outcome.dead(f"app returned fatal status {status}", status)
    if status in BUSY_STATUSES and (wait_s := parse_retry_after(retry_after)) is not None:
        return Outcome.release(f"app busy: {status} with Retry-After {wait_s:g}s", status, wait_s)
    return Outcome.retry(f"app returned {status}", status)


def _classify_success(status: int, body: bytes, exact_status: bool) -> Outcome:
    try:
        document = json_text.parse(body) if body.strip() else None
    except json_text.JsonUnreadable:
        return Outcome.ack(status)
    if not isinstance(document, dict):
        return Outcome.ack(status)
    answer = document.get("status")
    word = str(answer) if exact_status else str(answer).upper()
    if answer is None or answer == "" or word == "SUCCESS":
        return Outcome.ack(status)
    if word == "DROP":
        return Outcome.drop("app answered DROP", status)
    if word == "RETRY":
        return Outcome.retry("app answered RETRY", status)
    return Outcome.retry(f"app answered unknown status {str(answer)[:40]!r}", status)


class HttpAppChannel:
    """Posts requests to the app; every failure becomes an ``Outcome``, never an exception."""

    def __init__(self, app: AppConfig, *, exact_status: bool = False) -> None:
        self._app = app
        self._exact_status = exact_status
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=60)
        self._session = aiohttp.ClientSession(
            connector=connector,
            # only the connect phase: a connect that times out never reached the app (a
            # release), the rest is bounded by the delivery's timeout
            timeout=aiohttp.ClientTimeout(sock_connect=self._app.timeout_s),
            raise_for_status=False,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def deliver(self, prepared: Prepared) -> Outcome:
        return await self.post(prepared.url, prepared.request)

    async def post(self, url: str, request: AppRequest) -> Outcome:
        answer = await self._exchange(url, request.body, request.headers)
        if isinstance(answer, Outcome):
            return answer
        status, body, retry_after = answer
        return classify(status, body, self._app.fatal_codes, exact_status=self._exact_status,
                        retry_after=retry_after)

    async def deliver_bulk(self, batch: Batch) -> dict[str, Outcome] | Outcome:
        """A batch as daprd posts it: the bulk envelope as JSON to the route, the bulk
        metadata as headers; the answer's ``statuses`` per entry (``channel.bulk``)."""
        headers = {"Content-Type": "application/json", "pubsubName": batch.pubsub}
        token = batch.entries[0].prepared.request.headers.get("dapr-api-token")
        if token:
            headers["dapr-api-token"] = token
        answer = await self._exchange(batch.url, json.dumps(batch.envelope()).encode(), headers)
        if isinstance(answer, Outcome):
            return answer
        status, body, _ = answer
        if status == 404:
            return Outcome.drop("app returned 404", status)
        if not 200 <= status < 300:
            return Outcome.retry(f"app returned {status}", status)
        try:
            statuses = json_text.parse(body).get("statuses") or []
            return {str(item["entryId"]): entry_outcome(str(item.get("status") or ""),
                                                        str(item["entryId"]), status)
                    for item in statuses}
        except (json_text.JsonUnreadable, AttributeError, KeyError, TypeError) as exc:
            return Outcome.retry(f"failed unmarshalling app response for bulk subscribe: "
                                 f"{exc}"[:300], status)

    async def _exchange(self, url: str, body: bytes, headers: dict[str, str]
                        ) -> tuple[int, bytes, str | None] | Outcome:
        """The app's status, body and Retry-After; a failure to get them as an outcome."""
        assert self._session is not None, "start() first"
        try:
            async with self._session.post(url, data=body, headers=headers) as rsp:
                answer = await rsp.content.read(self._app.max_response_bytes)
                return rsp.status, answer, rsp.headers.get("Retry-After")
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            # The request never reached the app (refused, DNS, connect timeout): not an attempt.
            return Outcome.release(f"{NOT_REACHABLE}: {type(exc).__name__}: {exc}"[:300])
        except aiohttp.ClientError as exc:
            return Outcome.retry(f"app unreachable: {type(exc).__name__}: {exc}"[:300])
