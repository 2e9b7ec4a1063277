// The API reference at /docs: reads the OpenAPI document the server makes
// from its route schemas (docs/json) and lists each tag's operations with
// their parameters, request body and responses. Served from the executable
// like the console, under the same CSP: nothing from elsewhere, nothing
// inline. No key needed: both the page and the document are public.
import { Fragment, render } from "preact";
import { useEffect, useMemo, useState } from "preact/hooks";
import {
  byShape,
  constraints,
  fieldsOf,
  groupByTag,
  refName,
  typeText,
  type Content,
  type OpenApiDoc,
  type Op,
  type Parameter,
  type Schema,
} from "./openapi";

/** Beside the page, whatever prefix a reverse proxy puts before it ("/docs" → "/docs/json"). */
const here = location.pathname.replace(/\/+$/, "");
const SPEC_URL = `${here}/json`;
/** The API base as a client would write it, from where this page is. */
const API_BASE = new URL("api/v1", new URL(here.slice(0, here.lastIndexOf("/") + 1), location.origin)).href;
const CONSOLE_URL = here.slice(0, here.lastIndexOf("/") + 1);

function Fields({ doc, schema, depth }: { doc: OpenApiDoc; schema: Schema; depth: number }) {
  const required = new Set(schema.required ?? []);
  return (
    <ul class="schema-fields">
      {Object.entries(schema.properties ?? {}).map(([name, prop]) => {
        const nested = depth < 6 ? fieldsOf(doc, prop) : null;
        const notes = constraints(prop);
        return (
          <li key={name}>
            <code class="field-name">{name}</code> <span class="type">{typeText(prop)}</span>
            {required.has(name) && <span class="req"> required</span>}
            {notes.length > 0 && <span class="muted"> · {notes.join(", ")}</span>}
            {prop.description && <div class="field-desc">{prop.description}</div>}
            {nested && nested !== schema && <Fields doc={doc} schema={nested} depth={depth + 1} />}
          </li>
        );
      })}
    </ul>
  );
}

function SchemaView({ doc, schema }: { doc: OpenApiDoc; schema: Schema | undefined }) {
  if (!schema) return <p class="muted">No schema given.</p>;
  const fields = fieldsOf(doc, schema);
  return (
    <div class="schema">
      <p class="schema-type">
        <span class="type">{typeText(schema)}</span>
        {schema.$ref && <span class="muted"> ({refName(schema.$ref)})</span>}
        {schema.description && <span> · {schema.description}</span>}
      </p>
      {fields && <Fields doc={doc} schema={fields} depth={0} />}
    </div>
  );
}

function ContentView({ doc, content }: { doc: OpenApiDoc; content: Content | undefined }) {
  const shapes = byShape(content);
  if (shapes.length === 0) return <p class="muted">No body documented.</p>;
  return (
    <>
      {shapes.map(([types, schema]) => (
        <div key={types.join()} class="content">
          <p class="media">
            {types.map((t, i) => (
              <Fragment key={t}>
                {i > 0 && ", "}
                <code>{t}</code>
              </Fragment>
            ))}
          </p>
          <SchemaView doc={doc} schema={schema} />
        </div>
      ))}
    </>
  );
}

function Params({ params }: { params: Parameter[] }) {
  return (
    <table class="list compact params">
      <thead>
        <tr>
          <th scope="col">Name</th>
          <th scope="col">In</th>
          <th scope="col">Type</th>
          <th scope="col">Required</th>
        </tr>
      </thead>
      <tbody>
        {params.map((p) => (
          <tr key={`${p.in}:${p.name}`}>
            <td data-label="Name">
              <code>{p.name}</code>
              {p.description && <div class="field-desc">{p.description}</div>}
            </td>
            <td data-label="In">{p.in}</td>
            <td data-label="Type">
              <span class="type">{typeText(p.schema)}</span>
              {constraints(p.schema).length > 0 && <span class="muted"> · {constraints(p.schema).join(", ")}</span>}
            </td>
            <td data-label="Required">{p.required ? "yes" : "no"}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function OperationView({ doc, op }: { doc: OpenApiDoc; op: Op }) {
  const params = op.parameters ?? [];
  const responses = Object.entries(op.responses ?? {});
  return (
    <article class="op card" id={op.anchor} aria-labelledby={`${op.anchor}-title`}>
      <h3 id={`${op.anchor}-title`} class="op-title">
        <span class={`method method-${op.method}`}>{op.method.toUpperCase()}</span> <code class="path">{op.path}</code>
      </h3>
      {op.summary && <p class="summary">{op.summary}</p>}
      {op.description && <p class="muted">{op.description}</p>}
      {params.length > 0 && (
        <section>
          <h4>Parameters</h4>
          <Params params={params} />
        </section>
      )}
      {op.requestBody && (
        <section>
          <h4>
            Request body{op.requestBody.required ? <span class="req"> required</span> : <span class="muted"> optional</span>}
          </h4>
          {op.requestBody.description && <p>{op.requestBody.description}</p>}
          <ContentView doc={doc} content={op.requestBody.content} />
        </section>
      )}
      <section>
        <h4>Responses</h4>
        {responses.length === 0 && <p class="muted">None documented.</p>}
        {responses.map(([code, r]) => (
          <div key={code} class="response">
            <p class="response-code">
              <span class={`status status-${code[0]}xx`}>{code}</span>
              {r.description && <span> {r.description}</span>}
            </p>
            {r.content ? <ContentView doc={doc} content={r.content} /> : <p class="muted">No schema given.</p>}
          </div>
        ))}
      </section>
    </article>
  );
}

const tagId = (tag: string) => `tag-${tag.replace(/[^A-Za-z0-9_-]+/g, "-")}`;

const matches = (op: Op, tag: string, q: string) =>
  !q || [op.method, op.path, op.summary ?? "", op.description ?? "", tag].some((s) => s.toLowerCase().includes(q));

function Reference({ doc }: { doc: OpenApiDoc }) {
  const [filter, setFilter] = useState("");
  const groups = useMemo(() => groupByTag(doc), [doc]);
  const q = filter.trim().toLowerCase();
  const shown = groups.map((g) => ({ ...g, ops: g.ops.filter((op) => matches(op, g.tag, q)) })).filter((g) => g.ops.length > 0);
  const count = shown.reduce((n, g) => n + g.ops.length, 0);
  return (
    <div class="docs">
      <nav class="toc" aria-label="Operations">
        <label class="toc-filter">
          Filter
          <input type="search" value={filter} placeholder="path, method or words" onInput={(e) => setFilter((e.currentTarget as HTMLInputElement).value)} />
        </label>
        <p class="sub" role="status">
          {count} operation{count === 1 ? "" : "s"}
        </p>
        {shown.map((g) => (
          <div key={g.tag}>
            <a class="toc-tag" href={`#${tagId(g.tag)}`}>
              {g.tag}
            </a>
            <ul>
              {g.ops.map((op) => (
                <li key={op.anchor}>
                  <a href={`#${op.anchor}`}>
                    <span class={`method method-${op.method}`}>{op.method.toUpperCase()}</span> <span class="path">{op.path}</span>
                  </a>
                </li>
              ))}
            </ul>
          </div>
        ))}
      </nav>
      <main id="main" tabIndex={-1}>
        <h1>{doc.info.title} API reference</h1>
        {doc.info.description && <p>{doc.info.description}</p>}
        <div class="note">
          <p>
            Base URL <code class="url">{API_BASE}</code> (every route also answers under <code>/v1</code>). Send the key as{" "}
            <code>Authorization: Bearer sk-op-…</code>.
          </p>
          <p>
            The machine-readable document: <a href={SPEC_URL}>OpenAPI {doc.openapi} JSON</a>.
          </p>
        </div>
        {shown.length === 0 && <p class="empty">No operation matches “{filter}”.</p>}
        {shown.map((g) => (
          <section key={g.tag} class="tag" aria-labelledby={tagId(g.tag)}>
            <h2 id={tagId(g.tag)}>{g.tag}</h2>
            {g.description && <p class="muted">{g.description}</p>}
            {g.ops.map((op) => (
              <OperationView key={op.anchor} doc={doc} op={op} />
            ))}
          </section>
        ))}
      </main>
    </div>
  );
}

function Docs() {
  const [doc, setDoc] = useState<OpenApiDoc | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    fetch(SPEC_URL, { cache: "no-store" })
      .then(async (res) => {
        if (!res.ok) throw new Error(`${SPEC_URL} answered ${res.status} ${res.statusText}`);
        return (await res.json()) as OpenApiDoc;
      })
      .then(setDoc, (e: unknown) => setError(e instanceof Error ? e.message : String(e)));
  }, []);
  useEffect(() => {
    if (!doc) return;
    document.title = `${doc.info.title} ${doc.info.version} · API reference`;
    // The operations exist only now: go to the one the address names.
    const target = location.hash.length > 1 ? document.getElementById(decodeURIComponent(location.hash.slice(1))) : null;
    target?.scrollIntoView();
  }, [doc]);
  return (
    <>
      <header class="top">
        <div class="brand">
          <span class="logo" aria-hidden="true" />
          offpeak
        </div>
        <nav aria-label="Main">
          <ul>
            <li>
              <a href={CONSOLE_URL}>Console</a>
            </li>
            <li>
              <a href={here} aria-current="page">
                API reference
              </a>
            </li>
          </ul>
        </nav>
        {doc && <span class="who muted">version {doc.info.version}</span>}
      </header>
      {error ? (
        <main id="main">
          <p class="note note-error" role="alert">
            The API document could not be read: {error}
          </p>
        </main>
      ) : doc ? (
        <Reference doc={doc} />
      ) : (
        <p class="loading">Loading…</p>
      )}
    </>
  );
}

render(<Docs />, document.getElementById("docs")!);
