# docs/CONTRACT.md §22 with the official Python SDK: uploads.upload_file_chunked sends a
# batch file in parts (a small part_size, so there are several) and
# completes it; the File it answers with holds the same bytes and runs as a
# batch on offpeak-echo. Run by test/uploads.test.ts with OPENAI_BASE_URL and
# OPENAI_API_KEY set; prints "all ok" at the end.
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from openai import OpenAI

client = OpenAI(max_retries=0)
lines = [
    json.dumps({"custom_id": f"py-{i}", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "offpeak-echo", "messages": [{"role": "user", "content": f"hello {i}"}]}})
    for i in range(500)
]
data = ("\n".join(lines) + "\n").encode()
with tempfile.TemporaryDirectory() as d:
    path = Path(d) / "requests.jsonl"
    path.write_bytes(data)
    upload = client.uploads.upload_file_chunked(
        file=path, mime_type="application/jsonl", purpose="batch", part_size=10_000, md5=hashlib.md5(data).hexdigest()
    )
assert upload.status == "completed", upload
assert upload.file is not None and upload.file.bytes == len(data), upload
assert client.files.content(upload.file.id).read() == data
print("ok: upload_file_chunked completed in", -(-len(data) // 10_000), "parts")

batch = client.batches.create(input_file_id=upload.file.id, endpoint="/v1/chat/completions", completion_window="24h")
deadline = time.time() + 120
while batch.status not in ("completed", "failed", "expired", "cancelled") and time.time() < deadline:
    time.sleep(0.2)
    batch = client.batches.retrieve(batch.id)
assert batch.status == "completed", batch
assert batch.request_counts.completed == len(lines), batch.request_counts
print("ok: the batch on it completed")
print("all ok")
