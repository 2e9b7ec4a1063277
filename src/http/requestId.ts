// The id of each HTTP request (x-request-id, the log line's request_id):
// made when the request arrives (app.ts, and the direct dispatch) and read
// by whatever answers or logs it. Kept here, below every route and service,
// so that they read it without importing the app that wires them.
import { attached } from "../attached";
import { newId } from "../ids";

const requestIds = attached<string>("requestId");

/** Gives `request` a new id (once, when it arrives). */
export function assignRequestId(request: Request): string {
  const id = newId("req_");
  requestIds.set(request, id);
  return id;
}

export const requestIdOf = (request: Request): string => requestIds.get(request) ?? "req_unknown";
