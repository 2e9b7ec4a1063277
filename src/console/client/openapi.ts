// The little of OpenAPI 3.0 that the API reference (/docs) shows, and how a
// schema reads as one line of text. Pure functions: no DOM.

export interface Schema {
  $ref?: string;
  type?: string;
  format?: string;
  const?: unknown;
  enum?: unknown[];
  nullable?: boolean;
  anyOf?: Schema[];
  oneOf?: Schema[];
  allOf?: Schema[];
  items?: Schema;
  properties?: Record<string, Schema>;
  additionalProperties?: boolean | Schema;
  required?: string[];
  description?: string;
  default?: unknown;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
}

export interface Parameter {
  name: string;
  in: string;
  required?: boolean;
  description?: string;
  schema?: Schema;
}

export interface Content {
  [mediaType: string]: { schema?: Schema };
}

export interface Operation {
  operationId?: string;
  tags?: string[];
  summary?: string;
  description?: string;
  parameters?: Parameter[];
  requestBody?: { required?: boolean; description?: string; content?: Content };
  responses?: Record<string, { description?: string; content?: Content }>;
}

export interface OpenApiDoc {
  openapi: string;
  info: { title: string; version: string; description?: string };
  tags?: { name: string; description?: string }[];
  paths: Record<string, Record<string, Operation>>;
  components?: { schemas?: Record<string, Schema> };
}

export const METHODS = ["get", "post", "put", "patch", "delete", "head", "options", "trace"] as const;

export interface Op extends Operation {
  method: string;
  path: string;
  /** A unique id for the page's anchor. */
  anchor: string;
}

/** Tags in the order they first appear (the document's own `tags` first), each with its operations in path order. */
export function groupByTag(doc: OpenApiDoc): { tag: string; description?: string; ops: Op[] }[] {
  const groups = new Map<string, { tag: string; description?: string; ops: Op[] }>();
  for (const t of doc.tags ?? []) groups.set(t.name, { tag: t.name, description: t.description, ops: [] });
  const used = new Set<string>();
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const method of METHODS) {
      const op = item?.[method];
      if (!op) continue;
      let anchor = slug(op.operationId ?? `${method}-${path}`);
      for (let n = 2; used.has(anchor); n++) anchor = `${slug(op.operationId ?? `${method}-${path}`)}-${n}`;
      used.add(anchor);
      const tag = op.tags?.[0] ?? "other";
      let g = groups.get(tag);
      if (!g) groups.set(tag, (g = { tag, ops: [] }));
      g.ops.push({ ...op, method, path, anchor });
    }
  }
  return [...groups.values()].filter((g) => g.ops.length > 0);
}

const slug = (s: string) => "op-" + s.replace(/[^A-Za-z0-9_-]+/g, "-").replace(/^-+|-+$/g, "");

/** `#/components/schemas/Batch` → its schema, or null. */
export function resolveRef(doc: OpenApiDoc, ref: string): Schema | null {
  const m = /^#\/components\/schemas\/(.+)$/.exec(ref);
  return m ? (doc.components?.schemas?.[decodeURIComponent(m[1]!)] ?? null) : null;
}

export const refName = (ref: string) => ref.slice(ref.lastIndexOf("/") + 1);

/**
 * Elysia's `t.Numeric()` is `anyOf [{type:string, format:integer}, {type:integer}]`
 * (a number that may come as a string, from a query or a form): it reads as
 * the number type alone.
 */
function numericString(s: Schema): string | null {
  return s.type === "string" && (s.format === "integer" || s.format === "number") ? s.format : null;
}

/** The alternatives of a union, null apart. */
export function alternatives(s: Schema): Schema[] | null {
  return s.anyOf ?? s.oneOf ?? null;
}

/** One line: `string`, `integer | null`, `"file"`, `object[]`, `Batch`… */
export function typeText(s: Schema | undefined, depth = 0): string {
  if (!s || depth > 8) return "any";
  let text: string;
  const alts = alternatives(s);
  if (s.$ref) text = refName(s.$ref);
  else if (s.const !== undefined) text = JSON.stringify(s.const);
  else if (s.enum) text = s.enum.map((v) => JSON.stringify(v)).join(" | ");
  else if (alts) {
    const parts: string[] = [];
    for (const a of alts) {
      const t = numericString(a) ?? typeText(a, depth + 1);
      for (const p of t.split(" | ")) if (!parts.includes(p)) parts.push(p);
    }
    text = parts.join(" | ") || "any";
  } else if (s.allOf) text = s.allOf.map((a) => typeText(a, depth + 1)).join(" & ");
  else if (s.type === "array") {
    const item = typeText(s.items, depth + 1);
    text = item.includes(" ") ? `(${item})[]` : `${item}[]`;
  } else if (s.type === "object" && !s.properties && s.additionalProperties && typeof s.additionalProperties === "object")
    text = `map of ${typeText(s.additionalProperties, depth + 1)}`;
  else if (s.type) text = s.format && s.type !== "object" ? `${s.type} (${s.format})` : s.type;
  else if (s.properties) text = "object";
  else text = "any";
  if (s.nullable && !text.split(" | ").includes("null")) text += " | null";
  return text;
}

/** The object whose fields a schema has, looking through `$ref`, a union with one object member, an array's items. */
export function fieldsOf(doc: OpenApiDoc, s: Schema | undefined, depth = 0): Schema | null {
  if (!s || depth > 8) return null;
  if (s.$ref) return fieldsOf(doc, resolveRef(doc, s.$ref) ?? undefined, depth + 1);
  if (s.properties && Object.keys(s.properties).length > 0) return s;
  if (s.type === "array") return fieldsOf(doc, s.items, depth + 1);
  const alts = alternatives(s);
  if (alts) {
    const objects = alts.map((a) => fieldsOf(doc, a, depth + 1)).filter((x): x is Schema => x !== null);
    return objects.length === 1 ? objects[0]! : null;
  }
  return null;
}

/** Bounds and defaults worth a mention ("max 64 chars", "default 20"). */
export function constraints(s: Schema | undefined): string[] {
  if (!s) return [];
  const out: string[] = [];
  if (s.default !== undefined) out.push(`default ${JSON.stringify(s.default)}`);
  if (s.minimum !== undefined) out.push(`min ${s.minimum}`);
  if (s.maximum !== undefined) out.push(`max ${s.maximum}`);
  if (s.minLength !== undefined) out.push(`min length ${s.minLength}`);
  if (s.maxLength !== undefined) out.push(`max length ${s.maxLength}`);
  if (s.minItems !== undefined) out.push(`min items ${s.minItems}`);
  if (s.maxItems !== undefined) out.push(`max items ${s.maxItems}`);
  return out;
}

/** Media types that share one schema are shown once: [[types…], schema]. */
export function byShape(content: Content | undefined): [string[], Schema | undefined][] {
  const out: [string[], Schema | undefined, string][] = [];
  for (const [type, media] of Object.entries(content ?? {})) {
    const key = JSON.stringify(media?.schema ?? null);
    const same = out.find((o) => o[2] === key);
    if (same) same[0].push(type);
    else out.push([[type], media?.schema, key]);
  }
  return out.map(([types, schema]) => [types, schema]);
}
