// A message batch's `succeeded` result line (docs/CONTRACT.md §22), written
// straight from the text of its output line: one pass over the JSON text
// finds the fields the message needs (custom_id; the answer's model; its
// first choice's text, finish_reason and stop_reason; the usage counts),
// takes them as the JSON tokens they are (a string with its quotes and
// escapes, as written), and the result line is put together around them.
// Parsing every output line into objects and serialising the message again
// made reading a message batch's results cost several times the CPU of
// downloading the same batch's output file.
//
// Only what the pass is sure of is written this way: an answer with tool
// calls or with content given as parts, a key of interest spelled with
// escapes, or anything else unexpected answers null, and the caller
// translates that line the full way (./results.ts with ../message.ts),
// which this matches field for field, a key given twice included (the
// last one counts, as for JSON.parse). test/anthropic-batch-results.test.ts
// compares the two.
//
// Over 400 lines: one scanner over one line's JSON text, whose steps share
// its cursor and the slots it fills; apart, each would pass the other its
// positions.

/** What a value is to the message: where it goes, or nothing. */
const enum Slot {
  None,
  CustomId,
  Response,
  Body,
  Model,
  Choices,
  Choice,
  Message,
  Content,
  ToolCalls,
  Finish,
  StopReason,
  Usage,
  PromptTokens,
  CompletionTokens,
  Details,
  CachedTokens,
}

/** What a container is: one of the slots above that hold objects or arrays, or None (skipped). */
type Kind = Slot;

const SPACE = 0x20;
const TAB = 0x09;
const LF = 0x0a;
const CR = 0x0d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const MINUS = 0x2d;
const ZERO = 0x30;
const NINE = 0x39;
const EMPTY_TEXT = '""';

/** Thrown inside the pass when the line is not one it handles: the caller falls back. */
const NOT_HANDLED = Symbol("not handled");
function fail(): never {
  throw NOT_HANDLED;
}

/** The keys of interest in each kind of object: [key with its quotes, the slot of its value]. */
const KEYS: Partial<Record<Kind, [string, Slot][]>> = {
  [Slot.None]: [], // the line's top level, see TOP below
  [Slot.Response]: [['"body"', Slot.Body]],
  [Slot.Body]: [
    ['"model"', Slot.Model],
    ['"choices"', Slot.Choices],
    ['"usage"', Slot.Usage],
  ],
  [Slot.Choice]: [
    ['"message"', Slot.Message],
    ['"finish_reason"', Slot.Finish],
    ['"stop_reason"', Slot.StopReason],
  ],
  [Slot.Message]: [
    ['"content"', Slot.Content],
    ['"tool_calls"', Slot.ToolCalls],
  ],
  [Slot.Usage]: [
    ['"prompt_tokens"', Slot.PromptTokens],
    ['"completion_tokens"', Slot.CompletionTokens],
    ['"prompt_tokens_details"', Slot.Details],
  ],
  [Slot.Details]: [['"cached_tokens"', Slot.CachedTokens]],
};
/** The line's own object: `{id, custom_id, response, error}`. */
const TOP = -1;
const TOP_KEYS: [string, Slot][] = [
  ['"custom_id"', Slot.CustomId],
  ['"response"', Slot.Response],
];

// The pass's state (one line at a time; nothing awaits inside it).
const kinds: number[] = [];
const isObject: boolean[] = [];
const counts: number[] = [];
let customId: string | null = null;
let model = EMPTY_TEXT;
let text = EMPTY_TEXT;
let finish: string | null = null;
let matched: string | null = null;
let prompt = 0;
let completion = 0;
let cached: number | null = null;

function resetChoice(): void {
  text = EMPTY_TEXT;
  finish = null;
  matched = null;
}
function resetUsage(): void {
  prompt = 0;
  completion = 0;
  cached = null;
}
function resetAnswer(): void {
  model = EMPTY_TEXT;
  resetChoice();
  resetUsage();
}

/** Index just past the string that opens at `start` (a quote). */
function stringEnd(s: string, start: number): number {
  // A loop over the characters: most strings here are short keys, where indexOf's call costs more.
  for (let j = start + 1; ; j++) {
    const c = s.charCodeAt(j);
    if (c === QUOTE) return j + 1;
    if (c === BACKSLASH) j++;
    else if (c !== c) fail(); // NaN: the line ended inside the string
  }
}

/** The slot of the value of the key [start, end) in an object of kind `kind`. */
function slotOf(s: string, kind: number, start: number, end: number): Slot {
  const keys = kind === TOP ? TOP_KEYS : KEYS[kind as Kind];
  if (!keys || keys.length === 0) return Slot.None;
  const len = end - start;
  for (const [k, slot] of keys) if (k.length === len && s.startsWith(k, start)) return slot;
  // A key of interest written with escapes would be missed: the full way.
  for (let i = start + 1; i < end - 1; i++) if (s.charCodeAt(i) === BACKSLASH) fail();
  return Slot.None;
}

/** An object or array opens where a value of `slot` goes: the kind it is (None: its contents are skipped). */
function open(slot: Slot, object: boolean): Kind {
  switch (slot) {
    case Slot.CustomId:
      return fail();
    case Slot.Response:
      if (!object) fail();
      // A later `response` replaces an earlier one, body and all.
      resetAnswer();
      return Slot.Response;
    case Slot.Body:
      resetAnswer();
      return object ? Slot.Body : Slot.None;
    case Slot.Model:
      model = EMPTY_TEXT;
      return Slot.None;
    case Slot.Choices:
      resetChoice();
      return object ? Slot.None : Slot.Choices;
    case Slot.Choice:
      return object ? Slot.Choice : Slot.None;
    case Slot.Message:
      text = EMPTY_TEXT;
      return object ? Slot.Message : Slot.None;
    case Slot.Content:
      // Content as parts: the full way.
      if (!object) fail();
      text = EMPTY_TEXT;
      return Slot.None;
    case Slot.ToolCalls:
      return object ? Slot.None : Slot.ToolCalls;
    case Slot.Finish:
      finish = null;
      return Slot.None;
    case Slot.StopReason:
      matched = null;
      return Slot.None;
    case Slot.Usage:
      resetUsage();
      return object ? Slot.Usage : Slot.None;
    case Slot.PromptTokens:
      prompt = 0;
      return Slot.None;
    case Slot.CompletionTokens:
      completion = 0;
      return Slot.None;
    case Slot.Details:
      cached = null;
      return object ? Slot.Details : Slot.None;
    case Slot.CachedTokens:
      cached = null;
      return Slot.None;
    default:
      return Slot.None;
  }
}

/** A string token [start, end) where a value of `slot` goes. */
function takeString(s: string, slot: Slot, start: number, end: number): void {
  switch (slot) {
    case Slot.None:
      return;
    case Slot.CustomId:
      customId = s.slice(start, end);
      return;
    case Slot.Model:
      model = s.slice(start, end);
      return;
    case Slot.Content:
      text = s.slice(start, end);
      return;
    case Slot.Finish: {
      const raw = s.slice(start, end);
      finish = raw.includes("\\") ? (JSON.parse(raw) as string) : raw.slice(1, -1);
      return;
    }
    case Slot.StopReason:
      matched = end - start > 2 ? s.slice(start, end) : null;
      return;
    default:
      other(slot);
  }
}

/** A number, true, false or null where a value of `slot` goes (`num`: the number, or null for the others). */
function takeScalar(slot: Slot, num: number | null): void {
  switch (slot) {
    case Slot.None:
      return;
    case Slot.PromptTokens:
      prompt = num !== null && num >= 0 ? num : 0;
      return;
    case Slot.CompletionTokens:
      completion = num !== null && num >= 0 ? num : 0;
      return;
    case Slot.CachedTokens:
      cached = num !== null && num >= 0 ? num : null;
      return;
    default:
      other(slot);
  }
}

/** A value that is not of the type its slot reads: what the full way makes of it. */
function other(slot: Slot): void {
  switch (slot) {
    case Slot.CustomId:
    case Slot.Response:
      fail();
      break;
    case Slot.Body:
      resetAnswer();
      break;
    case Slot.Model:
      model = EMPTY_TEXT;
      break;
    case Slot.Choices:
      resetChoice();
      break;
    case Slot.Message:
    case Slot.Content:
      text = EMPTY_TEXT;
      break;
    case Slot.Finish:
      finish = null;
      break;
    case Slot.StopReason:
      matched = null;
      break;
    case Slot.Usage:
      resetUsage();
      break;
    case Slot.PromptTokens:
      prompt = 0;
      break;
    case Slot.CompletionTokens:
      completion = 0;
      break;
    case Slot.Details:
    case Slot.CachedTokens:
      cached = null;
      break;
    // Choice, ToolCalls: nothing to take from a scalar.
  }
}

/** The slot of element `index` of an array of kind `kind`. */
function elementSlot(kind: number, index: number): Slot {
  if (kind === Slot.Choices) return index === 0 ? Slot.Choice : Slot.None;
  // Any tool call: the full way.
  if (kind === Slot.ToolCalls) fail();
  return Slot.None;
}

function walk(s: string): void {
  const n = s.length;
  let i = 0;
  let depth = 0;
  let slot: Slot | typeof TOP = TOP;
  customId = null;
  resetAnswer();
  // Each round reads a value at i (after whitespace), then what follows it.
  for (;;) {
    let c = s.charCodeAt(i);
    while (c === SPACE || c === LF || c === CR || c === TAB) c = s.charCodeAt(++i);
    let opened = false;
    if (c === QUOTE) {
      const end = stringEnd(s, i);
      if (slot !== TOP) takeString(s, slot, i, end);
      else fail();
      i = end;
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      const object = c === OPEN_OBJECT;
      kinds[depth] = slot === TOP ? TOP : open(slot, object);
      isObject[depth] = object;
      counts[depth] = 0;
      depth++;
      i++;
      opened = true;
    } else if (c === MINUS || (c >= ZERO && c <= NINE)) {
      const start = i;
      let d = s.charCodeAt(++i);
      // Digits, '.', 'e'/'E', '+'/'-': whether they make a number is Number()'s to say.
      while ((d >= ZERO && d <= NINE) || d === 0x2e || d === 0x65 || d === 0x45 || d === 0x2b || d === MINUS) d = s.charCodeAt(++i);
      const v = Number(s.slice(start, i));
      // Not a number, or one too large for a double (which the full way writes as null): the full way.
      if (!Number.isFinite(v)) fail();
      if (slot === TOP) fail();
      takeScalar(slot, v);
    } else if (s.startsWith("null", i) || s.startsWith("true", i)) {
      if (slot === TOP) fail();
      takeScalar(slot, null);
      i += 4;
    } else if (s.startsWith("false", i)) {
      if (slot === TOP) fail();
      takeScalar(slot, null);
      i += 5;
    } else fail();

    // What follows: a key or an element (then the round reads its value), or the container's end.
    for (;;) {
      c = s.charCodeAt(i);
      while (c === SPACE || c === LF || c === CR || c === TAB) c = s.charCodeAt(++i);
      if (depth === 0) {
        if (i !== n) fail();
        return;
      }
      const top = depth - 1;
      const object = isObject[top]!;
      if (opened) {
        opened = false;
        if (c === (object ? CLOSE_OBJECT : CLOSE_ARRAY)) {
          i++;
          depth--;
          continue;
        }
      } else if (c === COMMA) {
        c = s.charCodeAt(++i);
        while (c === SPACE || c === LF || c === CR || c === TAB) c = s.charCodeAt(++i);
      } else if (c === (object ? CLOSE_OBJECT : CLOSE_ARRAY)) {
        i++;
        depth--;
        continue;
      } else fail();
      if (object) {
        if (c !== QUOTE) fail();
        const end = stringEnd(s, i);
        slot = slotOf(s, kinds[top]!, i, end);
        i = end;
        c = s.charCodeAt(i);
        while (c === SPACE || c === LF || c === CR || c === TAB) c = s.charCodeAt(++i);
        if (c !== COLON) fail();
        i++;
      } else slot = elementSlot(kinds[top]!, counts[top]!++);
      break;
    }
  }
}

/** ../message.ts stopReasonOf, for an answer without tool calls. */
function stop(): string {
  if (finish === "length") return '"stop_reason":"max_tokens","stop_sequence":null';
  if (finish === "tool_calls" || finish === "function_call") return '"stop_reason":"tool_use","stop_sequence":null';
  if (finish === "content_filter") return '"stop_reason":"refusal","stop_sequence":null';
  if (matched !== null) return `"stop_reason":"stop_sequence","stop_sequence":${matched}`;
  return '"stop_reason":"end_turn","stop_sequence":null';
}

/**
 * `{custom_id, result: {type: "succeeded", message}}` and a newline for the
 * output line `line` (`{id, custom_id, response: {status_code, request_id,
 * body}, error}`), the message's id `messageId`; null when the line is not
 * one this handles (the caller translates it the full way).
 */
export function succeededText(line: string, messageId: string): string | null {
  try {
    walk(line);
  } catch (e) {
    if (e === NOT_HANDLED) return null;
    throw e;
  }
  if (customId === null) return null;
  const content = text === EMPTY_TEXT ? "" : `{"type":"text","text":${text},"citations":null}`;
  const input = Math.max(0, prompt - (cached ?? 0));
  return (
    `{"custom_id":${customId},"result":{"type":"succeeded","message":{"id":"${messageId}","type":"message","role":"assistant","model":${model},` +
    `"content":[${content}],${stop()},"stop_details":null,"container":null,` +
    `"usage":{"input_tokens":${input},"output_tokens":${completion},"cache_creation_input_tokens":null,"cache_read_input_tokens":${cached ?? "null"},"server_tool_use":null,"service_tier":null}}}}\n`
  );
}
