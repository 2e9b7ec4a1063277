// The offpeak console: sign in with an API key, then batches, files, status,
// and (admin) keys and webhook endpoints. Only the public API is used.
import { render } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError } from "./api";
import { ErrorNote, Overlays, PageTitle, markOnce } from "./components";
import { BatchPage } from "./pages/Batch";
import { BatchesPage } from "./pages/Batches";
import { FilesPage } from "./pages/Files";
import { KeysPage } from "./pages/Keys";
import { NewBatchPage } from "./pages/NewBatch";
import { StatusPage } from "./pages/Status";
import { WebhooksPage } from "./pages/Webhooks";
import { go, href, useRoute, type Route } from "./router";
import { can, signIn, signOut, storedKey, type Session } from "./session";
import type { Me } from "./types";

function SignIn({ onSignedIn, notice }: { onSignedIn(s: Session): void; notice: string | null }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const field = useRef<HTMLInputElement>(null);
  useEffect(() => {
    document.title = "Sign in · offpeak";
    field.current?.focus();
    markOnce("console-interactive");
  }, []);
  const submit = async (e: Event) => {
    e.preventDefault();
    if (!key.trim()) return setError(new ApiError("Enter an API key.", 0));
    setBusy(true);
    setError(null);
    try {
      onSignedIn(await signIn(key, expired));
    } catch (err) {
      setError(err);
      setBusy(false);
    }
  };
  return (
    <main class="signin" id="main">
      <h1>
        <span class="logo" aria-hidden="true" />
        offpeak
      </h1>
      <p class="muted">Batches, files and status of this server.</p>
      {notice && !error && (
        <p class="note" role="status">
          {notice}
        </p>
      )}
      <form onSubmit={submit} class="card">
        <label>
          API key
          <input
            ref={field}
            type="password"
            name="key"
            autoComplete="off"
            spellcheck={false}
            placeholder="sk-op-…"
            value={key}
            onInput={(e) => setKey((e.currentTarget as HTMLInputElement).value)}
            aria-invalid={error ? true : undefined}
            aria-describedby="key-help"
          />
        </label>
        <p id="key-help" class="hint">
          Kept only in this browser tab (session storage) until you sign out or close it.
        </p>
        <ErrorNote error={error} />
        <button type="submit" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </main>
  );
}

interface NavItem {
  to: string;
  label: string;
  match: Route["name"][];
  allowed(me: Me): boolean;
}

const NAV: NavItem[] = [
  { to: href.batches, label: "Batches", match: ["batches", "batch"], allowed: (me) => can(me, "batches:read") },
  { to: href.new, label: "New batch", match: ["new"], allowed: (me) => can(me, "files:write") && can(me, "batches:write") },
  { to: href.files, label: "Files", match: ["files"], allowed: (me) => can(me, "files:read") },
  { to: href.status, label: "Status", match: ["status"], allowed: () => true },
  { to: href.keys, label: "API keys", match: ["keys"], allowed: (me) => can(me, "admin") },
  { to: href.webhooks, label: "Webhooks", match: ["webhooks"], allowed: (me) => can(me, "admin") },
];

function NotAllowed({ what }: { what: string }) {
  return (
    <section>
      <PageTitle text="Not available" />
      <p>This key may not {what}. Sign in with another key to do it.</p>
    </section>
  );
}

function Page({ route, me }: { route: Route; me: Me }) {
  const home = NAV.find((n) => n.allowed(me) && n.to !== href.new)!.to;
  useEffect(() => {
    if (route.name === "home") go(home);
  }, [route.name]);
  switch (route.name) {
    case "home":
      return null;
    case "batches":
      return can(me, "batches:read") ? <BatchesPage me={me} /> : <NotAllowed what="read batches" />;
    case "batch":
      return can(me, "batches:read") ? <BatchPage id={route.id} me={me} /> : <NotAllowed what="read batches" />;
    case "new":
      return can(me, "files:write") && can(me, "batches:write") ? <NewBatchPage /> : <NotAllowed what="upload files and start batches" />;
    case "files":
      return can(me, "files:read") ? <FilesPage me={me} /> : <NotAllowed what="read files" />;
    case "status":
      return <StatusPage me={me} />;
    case "keys":
      return can(me, "admin") ? <KeysPage me={me} /> : <NotAllowed what="manage API keys" />;
    case "webhooks":
      return can(me, "admin") ? <WebhooksPage me={me} /> : <NotAllowed what="manage webhook endpoints" />;
    default:
      return (
        <section>
          <PageTitle text="Page not found" />
          <p>
            There is no such page. <a href={home}>Go to the start page</a>.
          </p>
        </section>
      );
  }
}

function Shell({ session, onSignOut }: { session: Session; onSignOut(): void }) {
  const route = useRoute();
  const { me } = session;
  useEffect(() => markOnce("console-interactive"), []);
  return (
    <>
      <a
        class="skip"
        href="#main"
        onClick={(e) => {
          e.preventDefault();
          document.getElementById("main")?.focus();
        }}
      >
        Skip to content
      </a>
      <header class="top">
        <div class="brand">
          <span class="logo" aria-hidden="true" />
          offpeak
        </div>
        <nav aria-label="Main">
          <ul>
            {NAV.filter((n) => n.allowed(me)).map((n) => (
              <li key={n.to}>
                <a href={n.to} aria-current={n.match.includes(route.name) ? "page" : undefined}>
                  {n.label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <div class="who">
          <span class="muted" title={`Key ${me.id} · scopes: ${me.scopes.join(", ")}`}>
            Project <strong>{me.project}</strong>
          </span>
          <button type="button" class="secondary small" onClick={onSignOut}>
            Sign out
          </button>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        <Page route={route} me={me} />
      </main>
    </>
  );
}

let expiredHandler: () => void = () => {};
/** The API answered 401 while signed in: the key was revoked (or the server's admin key changed). */
const expired = () => expiredHandler();

function App() {
  const [session, setSession] = useState<Session | null>(null);
  const [checking, setChecking] = useState(() => storedKey() !== null);
  const [notice, setNotice] = useState<string | null>(null);
  expiredHandler = () => {
    signOut();
    setSession(null);
    setNotice("This key stopped working (it may have been revoked). Sign in again.");
  };
  useEffect(() => {
    const k = storedKey();
    if (!k) return;
    signIn(k, expired)
      .then(setSession, (e: unknown) => {
        signOut();
        setNotice(e instanceof Error ? e.message : String(e));
      })
      .finally(() => setChecking(false));
  }, []);
  if (checking) return <p class="loading">Loading…</p>;
  return (
    <>
      {session ? (
        <Shell
          session={session}
          onSignOut={() => {
            signOut();
            setSession(null);
            setNotice("Signed out.");
          }}
        />
      ) : (
        <SignIn
          notice={notice}
          onSignedIn={(s) => {
            setNotice(null);
            setSession(s);
          }}
        />
      )}
      <Overlays />
    </>
  );
}

render(<App />, document.getElementById("app")!);
