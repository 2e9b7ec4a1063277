// Hash routes (#/batches/batch_…): the server answers only "/", deep links
// and the back button work, and nothing secret is ever in the URL.
import { useEffect, useState } from "preact/hooks";

export type Route =
  | { name: "home" }
  | { name: "batches" }
  | { name: "batch"; id: string }
  | { name: "new" }
  | { name: "files" }
  | { name: "status" }
  | { name: "keys" }
  | { name: "webhooks" }
  | { name: "unknown" };

export function parseHash(hash: string): Route {
  const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  const [a, b] = parts;
  if (!a) return { name: "home" };
  if (a === "batches" && !b) return { name: "batches" };
  if (a === "batches" && b === "new") return { name: "new" };
  if (a === "batches" && b) return { name: "batch", id: b };
  if (a === "files" || a === "status" || a === "keys" || a === "webhooks") return { name: a };
  return { name: "unknown" };
}

export const href = {
  batches: "#/batches",
  batch: (id: string) => `#/batches/${encodeURIComponent(id)}`,
  new: "#/batches/new",
  files: "#/files",
  status: "#/status",
  keys: "#/keys",
  webhooks: "#/webhooks",
};

/** True once the person has moved between pages (focus then goes to the new page's heading). */
export let navigated = false;

export function go(to: string) {
  if (location.hash !== to) location.hash = to;
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseHash(location.hash));
  useEffect(() => {
    const on = () => {
      navigated = true;
      setRoute(parseHash(location.hash));
    };
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return route;
}
