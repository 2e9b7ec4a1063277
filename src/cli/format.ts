// Output helpers: JSON for records (pipe into jq), aligned tables for lists.

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + "\n");
}

/** Columns padded to their widest cell; the last column is not padded. */
export function table(header: string[], rows: string[][]): string {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => (r[i] ?? "").length)));
  return all.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join("  ").trimEnd() + "\n").join("");
}

/** Unix seconds as `2026-01-01 12:00:00` (UTC), or "-" for null. */
export function timeText(t: number | null | undefined): string {
  if (t === null || t === undefined) return "-";
  return new Date(t * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}
