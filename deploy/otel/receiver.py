"""An OTLP/HTTP trace receiver for tests and for looking at a trace by hand.

It takes `POST /v1/traces` as a collector does (an `ExportTraceServiceRequest` in protobuf,
decoded with the `opentelemetry-proto` package), keeps every span it was sent, and serves them
back as JSON on `GET /spans` (one object per span: its service, trace and span ids, parent,
name, kind, start and end in Unix nanoseconds, attributes, events and links). `GET /healthz`
answers once it listens. With `--refuse` it answers every export with 503, as a collector
that is overloaded does. With `--count-only` it keeps no span and decodes nothing, counting
exports and bytes (`GET /spans` then lists none): a collector that costs the machine nothing,
for a bench of what exporting costs the exporter.
"""

import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse


def value_of(v):
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value_of(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind)


def attributes(kvs):
    return {kv.key: value_of(kv.value) for kv in kvs}


class Spans:
    def __init__(self):
        self.lock = threading.Lock()
        self.spans = []
        self.requests = 0
        self.bytes = 0

    def take(self, request):
        taken = []
        for rs in request.resource_spans:
            resource = attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    taken.append(
                        {
                            "service": resource.get("service.name", ""),
                            "resource": resource,
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent_span_id": s.parent_span_id.hex(),
                            "name": s.name,
                            "kind": s.kind,
                            "start_ns": s.start_time_unix_nano,
                            "end_ns": s.end_time_unix_nano,
                            "attributes": attributes(s.attributes),
                            "events": [{"name": e.name, "time_ns": e.time_unix_nano, "attributes": attributes(e.attributes)} for e in s.events],
                            "links": [{"trace_id": l.trace_id.hex(), "span_id": l.span_id.hex()} for l in s.links],
                            "status": s.status.code,
                        }
                    )
        with self.lock:
            self.spans.extend(taken)
            self.requests += 1

    def json(self):
        with self.lock:
            return json.dumps({"requests": self.requests, "bytes": self.bytes, "spans": self.spans})


def handler(spans, refuse, count_only):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            sys.stderr.write("%s\n" % (fmt % args))

        def send(self, status, body, content_type):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/healthz":
                self.send(200, b"ok\n", "text/plain")
            elif self.path == "/spans":
                self.send(200, spans.json().encode(), "application/json")
            else:
                self.send(404, b"not found\n", "text/plain")

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            if self.path != "/v1/traces":
                self.send(404, b"not found\n", "text/plain")
                return
            if refuse:
                self.send(503, b"refused\n", "text/plain")
                return
            if count_only:
                with spans.lock:
                    spans.requests += 1
                    spans.bytes += len(body)
                self.send(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")
                return
            if self.headers.get("Content-Encoding") == "gzip":
                import gzip

                body = gzip.decompress(body)
            request = ExportTraceServiceRequest()
            try:
                request.ParseFromString(body)
            except Exception as e:  # a malformed export is the exporter's bug: say so
                self.send(400, f"undecodable ExportTraceServiceRequest: {e}\n".encode(), "text/plain")
                return
            spans.take(request)
            self.send(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

    return Handler


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4318)
    parser.add_argument("--refuse", action="store_true", help="answer every export with 503")
    parser.add_argument("--count-only", action="store_true", help="decode and keep nothing; count exports and bytes")
    parser.add_argument("--die-with-stdin", action="store_true", help="exit when standard input closes (the owner holds it)")
    args = parser.parse_args()
    if args.die_with_stdin:
        threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    server = ThreadingHTTPServer((args.host, args.port), handler(Spans(), args.refuse, args.count_only))
    print(f"listening on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
