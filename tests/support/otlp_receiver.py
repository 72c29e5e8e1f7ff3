"""A real OTLP trace receiver, run as its own process: gRPC ``TraceService/Export`` and HTTP
``POST /v1/traces`` (protobuf), built on ``opentelemetry-proto`` (the collector's wire format).

Every received span becomes one JSON line in ``--out`` (ids as lowercase hex, attributes as
plain values), so tests read exactly what an OpenTelemetry collector would have been sent.

    python -m tests.support.otlp_receiver --grpc-port 4317 --http-port 4318 --out spans.jsonl
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.servers import free_port


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in any_value.kvlist_value.values}
    return getattr(any_value, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items}


def spans_of(request: Any, transport: str) -> list[dict[str, Any]]:
    """An ``ExportTraceServiceRequest`` as flat span records."""
    found = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append({
                    "transport": transport,
                    "resource": resource,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": span.kind,
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                    "attributes": _attributes(span.attributes),
                    "events": [{"name": e.name, "time_ns": e.time_unix_nano,
                                "attributes": _attributes(e.attributes)} for e in span.events],
                    "status": {"code": span.status.code, "message": span.status.message},
                })
    return found


class _Sink:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()

    def write(self, spans: list[dict[str, Any]]) -> None:
        with self._lock, self._path.open("a") as out:
            for span in spans:
                out.write(json.dumps(span) + "\n")


def serve(grpc_port: int, http_port: int, out: Path) -> None:
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as pb_grpc

    sink = _Sink(out)

    class TraceService(pb_grpc.TraceServiceServicer):  # type: ignore[misc]
        def Export(self, request: Any, context: Any) -> Any:
            sink.write(spans_of(request, "grpc"))
            return pb.ExportTraceServiceResponse()

    class HttpTraces(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            request = pb.ExportTraceServiceRequest()
            request.ParseFromString(body)
            sink.write(spans_of(request, "http"))
            answer = pb.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_TraceServiceServicer_to_server(TraceService(), server)
    server.add_insecure_port(f"127.0.0.1:{grpc_port}")
    server.start()
    web = http.server.ThreadingHTTPServer(("127.0.0.1", http_port), HttpTraces)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    stop.wait()
    web.shutdown()
    server.stop(grace=1).wait()


@dataclass
class OtlpReceiver:
    """The receiver process, for tests: ``with OtlpReceiver(tmp_path) as receiver: ...``."""

    directory: Path
    process: subprocess.Popen[str] | None = None

    def __post_init__(self) -> None:
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.out = self.directory / "spans.jsonl"

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def __enter__(self) -> OtlpReceiver:
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.otlp_receiver", "--grpc-port",
             str(self.grpc_port), "--http-port", str(self.http_port), "--out", str(self.out)],
            stdout=subprocess.PIPE, text=True, cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready", "OTLP receiver did not start"
        return self

    def __exit__(self, *_: object) -> None:
        assert self.process is not None
        self.process.terminate()
        self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def spans(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]

    def wait_for(self, count: int, timeout_s: float = 20) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(found := self.spans()) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"expected {count} span(s), got {len(self.spans())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    serve(args.grpc_port, args.http_port, args.out)


if __name__ == "__main__":
    main()
