// What a cluster's per-key budget (./clusterBudget.ts) asks of the
// database, and what it gets back: src/nodes/keyUsage.ts does it with one
// statement on the key's row for the window.
import type { Limits } from "./rateLimit";

/** Requests and tokens. */
export interface Budget {
  requests: number;
  tokens: number;
}

/** One statement on a key's row for a window (src/nodes/keyUsage.ts). */
export interface Take {
  keyId: string;
  windowStart: number;
  limits: Limits;
  /** Applied first: given back (negative) or owed (positive) since the last statement. */
  delta: Budget;
  /** What the first waiting request lacks: nothing is taken unless every limited dimension has at least this much left. */
  need: Budget;
  /** Per dimension: up to this much, as far as the window has it (at least `need`). */
  want: Budget;
}

export interface Taken {
  got: Budget;
  /** What the cluster has taken of the window after this statement (owed tokens included). */
  total: Budget;
}

/** The database side of a cluster's limits: src/nodes/keyUsage.ts. */
export interface BudgetStore {
  take(t: Take): Promise<Taken>;
  /** Live nodes (the block a node takes is a share of what is left). */
  nodes(): number;
}
