// Shapes of the public API's answers (docs/CONTRACT.md §4, §5, §8, §2, §12), as the console reads them.
export interface ErrorBody {
  error?: { message?: string; type?: string; param?: string | null; code?: string | null };
}

export interface List<T> {
  object: "list";
  data: T[];
  first_id?: string | null;
  last_id?: string | null;
  has_more?: boolean;
}

export interface Me {
  object: "api_key";
  id: string;
  project: string;
  scopes: string[];
}

export interface FileRecord {
  id: string;
  object: "file";
  bytes: number;
  created_at: number;
  filename: string;
  purpose: string;
  status: string;
  expires_at: number | null;
}

export interface BatchError {
  code: string;
  message: string;
  param: string | null;
  line: number | null;
}

export interface Batch {
  id: string;
  object: "batch";
  endpoint: string;
  model: string | null;
  errors: { object: "list"; data: BatchError[] } | null;
  input_file_id: string;
  completion_window: string;
  status: string;
  output_file_id: string | null;
  error_file_id: string | null;
  created_at: number;
  in_progress_at: number | null;
  expires_at: number | null;
  finalizing_at: number | null;
  completed_at: number | null;
  failed_at: number | null;
  expired_at: number | null;
  cancelling_at: number | null;
  cancelled_at: number | null;
  request_counts: { total: number; completed: number; failed: number };
  usage: { input_tokens: number; output_tokens: number; total_tokens: number } | null;
  cost: { currency: string; amount: number; discount: number } | null;
  metadata: Record<string, string> | null;
  /** docs/CONTRACT.md §18: when it should end at its recent rate (Unix s); null until a rate is known, and once it ends. */
  estimated_completion_at?: number | null;
  /** docs/CONTRACT.md §18: why a running batch is not moving (upstream_down, rate_limited, peak_hours, queued). */
  status_details?: { code: string; message: string; since: number | null } | null;
  /** A message batch made through Anthropic's API (docs/CONTRACT.md §22), and its id there (msgbatch_…). */
  api?: "anthropic";
  message_batch_id?: string;
}

export interface Status {
  status: "ok" | "degraded";
  version: string;
  uptime_s: number;
  database: { ok: boolean };
  storage: { ok: boolean; free_bytes: number | null };
  batches: { validating: number; in_progress: number; finalizing: number };
  models: { id: string; owned_by: string; healthy: boolean; in_flight: number; queued: number }[];
  /** last_error is shown to admin keys only (docs/CONTRACT.md §16): absent for others. */
  upstreams?: { name: string; healthy: boolean; since: number | null; last_error?: string | null }[];
}

/** GET /upstreams (docs/CONTRACT.md §21, admin keys only). */
export interface UpstreamReplica {
  id: string;
  base_url: string;
  weight: number;
  state: "active" | "draining" | "down";
  source: "config" | "api" | "dns";
  in_flight: number;
  concurrency_limit: number | null;
  healthy: boolean;
  latency_ms?: number | null;
}

export interface Upstream {
  name: string;
  engine: string | null;
  models: string[];
  replicas: UpstreamReplica[];
}

export interface ApiKey {
  id: string;
  object: "api_key";
  name: string;
  project: string;
  scopes: string[];
  rate_limits: { rpm: number | null; tpm: number | null };
  /** null for OFFPEAK_ADMIN_KEY. */
  created_at: number | null;
  /** "env": OFFPEAK_ADMIN_KEY, set in the server's environment (not revocable through the API). */
  source?: "db" | "env";
  key?: string;
}

export interface WebhookEndpoint {
  id: string;
  object: "webhook_endpoint";
  url: string;
  events: string[];
  project: string;
  created_at: number;
  secret?: string;
}

export interface Delivery {
  event_id: string;
  type: string;
  attempt: number;
  status_code: number | null;
  error: string | null;
  created_at: number;
}
