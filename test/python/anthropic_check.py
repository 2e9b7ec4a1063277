"""The official Python `anthropic` SDK against an offpeak server (docs/CONTRACT.md §22):
a plain and a streamed message on offpeak-echo, count_tokens, and an error
raised as the SDK's class. Run by test/python-anthropic.test.ts when a
python has the `anthropic` package; by hand against any running offpeak
(the base URL is the server's root: the SDK adds /v1/messages):

    ANTHROPIC_BASE_URL=http://127.0.0.1:8080 ANTHROPIC_API_KEY=sk-op-... python3 test/python/anthropic_check.py

Prints one "ok: ..." line per check; exits non-zero on the first failure.
"""
import anthropic
from anthropic import Anthropic

client = Anthropic(max_retries=0)


def ok(what):
    print(f"ok: {what}", flush=True)


m = client.messages.create(
    model="offpeak-echo",
    max_tokens=100,
    system="Repeat the user.",
    messages=[{"role": "user", "content": "hello from python"}],
)
assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_"), m
assert [b.type for b in m.content] == ["text"] and m.content[0].text == "hello from python", m.content
assert m.stop_reason == "end_turn" and m.stop_sequence is None, m
assert m.usage.input_tokens > 0 and m.usage.output_tokens == 3, m.usage
assert m._request_id and m._request_id.startswith("req_"), m._request_id
ok("messages.create")

cut = client.messages.create(model="offpeak-echo", max_tokens=100, stop_sequences=["!"], messages=[{"role": "user", "content": "stop here! not this"}])
assert cut.content[0].text == "stop here" and cut.stop_reason == "stop_sequence" and cut.stop_sequence == "!", cut
ok("messages.create with stop_sequences")

deltas = []
with client.messages.stream(model="offpeak-echo", max_tokens=3, messages=[{"role": "user", "content": "streamed from python today"}]) as stream:
    for text in stream.text_stream:
        deltas.append(text)
    final = stream.get_final_message()
assert deltas == ["streamed", " from", " python"], deltas
assert final.content[0].text == "streamed from python" and final.stop_reason == "max_tokens" and final.usage.output_tokens == 3, final
ok("messages.stream")

types = [e.type for e in client.messages.create(model="offpeak-echo", max_tokens=10, messages=[{"role": "user", "content": "raw events"}], stream=True)]
assert types[0] == "message_start" and types[-1] == "message_stop" and "content_block_delta" in types and "message_delta" in types, types
ok("messages.create(stream=True)")

count = client.messages.count_tokens(model="offpeak-echo", system="Repeat the user.", messages=[{"role": "user", "content": "hello from python"}])
assert count.input_tokens == m.usage.input_tokens, (count, m.usage)
ok("messages.count_tokens")

try:
    client.messages.create(model="no-such-model", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    raise AssertionError("an unknown model was answered")
except anthropic.NotFoundError as e:
    assert e.status_code == 404 and e.body["error"]["type"] == "not_found_error", e.body
ok("NotFoundError")

print("all ok")
