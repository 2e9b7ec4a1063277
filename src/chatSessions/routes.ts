import { Elysia, t } from "elysia";
import { principalOf } from "../auth/plugin";
import type { AppContext } from "../context";
import { jsonOnly } from "../http/jsonBody";
import { intParam } from "../http/query";
import { chatView, createChat, deleteChat, getChat, listChats } from "./service";
import { streamReply } from "./stream";

export const chatsRoutes = (ctx: AppContext) =>
  new Elysia({ prefix: "/chats", detail: { tags: ["chats"] } })
    .post("", ({ request, body }) => createChat(ctx, principalOf(request).project, body), {
      parse: jsonOnly,
      body: t.Object({ model: t.String(), system: t.Optional(t.Nullable(t.String())), metadata: t.Optional(t.Unknown()) }),
      detail: { summary: "Create a chat session" },
    })
    .get(
      "",
      ({ request, query }) => listChats(ctx, principalOf(request).project, intParam(query.limit, "limit", 1, 100, 20), query.after || undefined),
      { query: t.Object({ limit: t.Optional(t.String()), after: t.Optional(t.String()) }), detail: { summary: "List chat sessions" } },
    )
    .get("/:id", async ({ request, params }) => chatView(ctx, await getChat(ctx, principalOf(request).project, params.id)), {
      detail: { summary: "Retrieve a chat session with its messages" },
    })
    .delete("/:id", ({ request, params }) => deleteChat(ctx, principalOf(request).project, params.id), { detail: { summary: "Delete a chat session" } })
    // temperature null means not given (docs/CONTRACT.md §1: absent values may be sent as
    // null), as for max_tokens; it is dropped here so no upstream is sent a null.
    .post("/:id/stream", ({ request, params, body }) => streamReply(ctx, principalOf(request), params.id, { ...body, temperature: body.temperature ?? undefined }, request), {
      parse: jsonOnly,
      // max_tokens is checked in streamReply: Elysia turns t.Integer into a
      // union that also takes numeric strings, and "10" must be refused (docs/CONTRACT.md §10).
      body: t.Object({
        content: t.String(),
        max_tokens: t.Optional(t.Unknown()),
        temperature: t.Optional(t.Nullable(t.Number({ minimum: 0, maximum: 2 }))),
      }),
      detail: { summary: "Send a message and stream the reply (SSE)" },
    });
