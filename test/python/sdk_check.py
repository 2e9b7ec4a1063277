"""The official Python SDK against an offpeak server (docs/CONTRACT.md §13): Responses
and Completions, plain and streamed, on offpeak-echo and (if
OFFPEAK_UPSTREAM_MODEL names one) an upstream model, and a batch on each
endpoint. Run by test/python-sdk.test.ts when python3 has the `openai`
package; by hand against any running offpeak:

    OPENAI_BASE_URL=http://127.0.0.1:8080/api/v1 OPENAI_API_KEY=sk-op-... python3 test/python/sdk_check.py

Prints one "ok: ..." line per check; exits non-zero on the first failure.
"""
import json
import os
import time

import openai
from openai import OpenAI

client = OpenAI(max_retries=0)
upstream = os.environ.get("OFFPEAK_UPSTREAM_MODEL")


def ok(what):
    print(f"ok: {what}", flush=True)


def check_responses(model, echo):
    r = client.responses.create(model=model, input="hello from python")
    assert r.object == "response", r
    assert r.output_text == "hello from python", r.output_text
    assert r.usage.output_tokens > 0 and r.usage.input_tokens > 0, r.usage
    if echo:
        assert r.id.startswith("resp_") and r.status == "completed", r
        cut = client.responses.create(model=model, input="one two three four", max_output_tokens=2)
        assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens", cut
        assert cut.output_text == "one two", cut.output_text
    ok(f"responses.create ({model})")

    events = list(client.responses.create(model=model, input="streamed from python", stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed", types
    seq = [e.sequence_number for e in events]
    assert seq == sorted(seq) and len(set(seq)) == len(seq), seq
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "streamed from python", text
    ok(f"responses.create(stream=True) ({model}): {len(events)} events")

    with client.responses.stream(model=model, input="final from python") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "final from python", deltas
    assert final.output_text == "final from python", final.output_text
    ok(f"responses.stream().get_final_response() ({model})")

    if echo:
        try:
            client.responses.create(model=model, input="x", previous_response_id="resp_AAAAAAAAAAAAAAAAAAAAAAAA")
        except openai.BadRequestError as e:
            assert e.status_code == 400 and e.body["param"] == "previous_response_id", e.body
            ok("previous_response_id on offpeak-echo: 400 naming it")
        else:
            raise AssertionError("previous_response_id on offpeak-echo must be refused")


def check_completions(model, echo):
    c = client.completions.create(model=model, prompt="complete from python")
    assert c.object == "text_completion", c
    assert c.choices[0].text == "complete from python", c.choices[0].text
    ok(f"completions.create ({model})")
    text = "".join(chunk.choices[0].text for chunk in client.completions.create(model=model, prompt="stream from python", stream=True) if chunk.choices)
    assert text == "stream from python", text
    ok(f"completions.create(stream=True) ({model})")
    if echo:
        c = client.completions.create(model=model, prompt=["a b", "c"], n=2, max_tokens=1, echo=True)
        assert [x.text for x in c.choices] == ["a ba", "a ba", "cc", "cc"], [x.text for x in c.choices]
        ok("completions.create with n, max_tokens, echo")


def run_batch(endpoint, lines):
    data = "\n".join(json.dumps(l) for l in lines) + "\n"
    f = client.files.create(file=("python.jsonl", data.encode()), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint=endpoint, completion_window="24h")
    deadline = time.time() + 60
    while b.status not in ("completed", "failed", "expired", "cancelled"):
        assert time.time() < deadline, b
        time.sleep(0.1)
        b = client.batches.retrieve(b.id)
    assert b.status == "completed", b
    assert b.request_counts.completed == len(lines) and b.request_counts.failed == 0, b.request_counts
    out = [json.loads(l) for l in client.files.content(b.output_file_id).text.splitlines() if l]
    return b, {l["custom_id"]: l["response"]["body"] for l in out}


def check_batches(model):
    b, bodies = run_batch("/v1/responses", [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/responses", "body": {"model": model, "input": f"line {i}"}} for i in range(3)])
    for i in range(3):
        body = bodies[f"r{i}"]
        assert body["object"] == "response", body
        text = [c["text"] for item in body["output"] if item["type"] == "message" for c in item["content"]]
        assert text == [f"line {i}"], text
    assert b.usage.input_tokens > 0 and b.usage.output_tokens > 0, b.usage
    ok(f"batch on /v1/responses ({model}): usage {b.usage.input_tokens} in, {b.usage.output_tokens} out")
    b, bodies = run_batch("/v1/completions", [{"custom_id": f"c{i}", "method": "POST", "url": "/v1/completions", "body": {"model": model, "prompt": f"prompt {i}"}} for i in range(3)])
    assert [bodies[f"c{i}"]["choices"][0]["text"] for i in range(3)] == [f"prompt {i}" for i in range(3)], bodies
    ok(f"batch on /v1/completions ({model})")


check_responses("offpeak-echo", True)
check_completions("offpeak-echo", True)
check_batches("offpeak-echo")
if upstream:
    check_responses(upstream, False)
    check_completions(upstream, False)
    check_batches(upstream)
print("all ok", flush=True)
