"""The official Python `anthropic` SDK's Message Batches against an offpeak server
(docs/CONTRACT.md §22): create a batch on offpeak-echo, retrieve it until it
ends, read its results, find it in the list, delete it. Run by
test/python-anthropic-batches.test.ts when a python has the `anthropic`
package; by hand against any running offpeak (the base URL is the server's root):

    ANTHROPIC_BASE_URL=http://127.0.0.1:8080 ANTHROPIC_API_KEY=sk-op-... python3 test/python/anthropic_batches_check.py

Prints one "ok: ..." line per check; exits non-zero on the first failure.
"""
import time

import anthropic
from anthropic import Anthropic

client = Anthropic(max_retries=0)


def ok(what):
    print(f"ok: {what}", flush=True)


texts = {"py-1": "hello from python", "py-2": "a second request", "py_3": "and a third"}
batch = client.messages.batches.create(
    requests=[
        {"custom_id": cid, "params": {"model": "offpeak-echo", "max_tokens": 100, "messages": [{"role": "user", "content": text}]}}
        for cid, text in texts.items()
    ]
)
assert batch.id.startswith("msgbatch_") and batch.type == "message_batch", batch
assert batch.processing_status == "in_progress" and batch.request_counts.processing == 3, batch
ok("messages.batches.create")

# Polled until it ends with the SDK's retrieve, as a client does (a batch that never ends fails by the test runner's timeout).
while True:
    batch = client.messages.batches.retrieve(batch.id)
    if batch.processing_status == "ended":
        break
    time.sleep(0.05)
assert batch.request_counts.succeeded == 3 and batch.request_counts.errored == 0, batch.request_counts
assert batch.results_url and batch.ended_at is not None, batch
ok("messages.batches.retrieve until ended")

seen = {}
for r in client.messages.batches.results(batch.id):
    assert r.custom_id not in seen, r.custom_id
    assert r.result.type == "succeeded", r
    seen[r.custom_id] = r.result.message.content[0].text
assert seen == texts, seen
ok("messages.batches.results")

assert batch.id in [b.id for b in client.messages.batches.list(limit=100)]
ok("messages.batches.list")

try:
    client.messages.batches.create(requests=[{"custom_id": "same", "params": {"model": "offpeak-echo", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}}] * 2)
    raise AssertionError("a duplicate custom_id was taken")
except anthropic.BadRequestError as e:
    assert e.status_code == 400 and e.body["error"]["type"] == "invalid_request_error" and "duplicate" in e.body["error"]["message"], e.body
ok("BadRequestError")

deleted = client.messages.batches.delete(batch.id)
assert deleted.id == batch.id and deleted.type == "message_batch_deleted", deleted
try:
    client.messages.batches.retrieve(batch.id)
    raise AssertionError("a deleted batch was found")
except anthropic.NotFoundError:
    pass
ok("messages.batches.delete")

print("all ok")
