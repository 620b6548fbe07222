# A stand-in for Kinesis that takes every PutRecords at once (no storage): to find what
# Rebound's click stream sustains when the stream is not the bound. Answers DescribeStreamSummary
# and PutRecords only.
import json, sys
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
calls = {"put": 0, "records": 0}
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        target = self.headers.get("X-Amz-Target", "")
        if target.endswith("PutRecords"):
            n = len(json.loads(body)["Records"])
            calls["put"] += 1; calls["records"] += n
            out = {"FailedRecordCount": 0, "Records": [{"SequenceNumber": "1", "ShardId": "shardId-000000000000"}] * n}
        elif target.endswith("DescribeStreamSummary"):
            out = {"StreamDescriptionSummary": {"StreamName": "s", "StreamARN": "arn:aws:kinesis:us-east-1:123456789012:stream/s",
                   "StreamStatus": "ACTIVE", "RetentionPeriodHours": 24, "StreamCreationTimestamp": 1.7e9,
                   "EnhancedMonitoring": [], "OpenShardCount": 1}}
        else:
            self.send_response(400); self.send_header("Content-Length", "0"); self.end_headers(); return
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        data = json.dumps(calls).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
