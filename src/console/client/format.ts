// How numbers and times read on the page.
const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });

export const fmtTime = (s: number | null | undefined): string => (s ? dateTime.format(new Date(s * 1000)) : "—");
export const isoTime = (s: number) => new Date(s * 1000).toISOString();

/** "3 min ago", "in 2 h" */
export function fmtAgo(s: number, now = Date.now() / 1000): string {
  const d = Math.round(now - s);
  const abs = Math.abs(d);
  const txt = abs < 60 ? `${abs} s` : abs < 3600 ? `${Math.floor(abs / 60)} min` : abs < 86400 ? `${Math.floor(abs / 3600)} h` : `${Math.floor(abs / 86400)} d`;
  if (abs < 5) return "just now";
  return d >= 0 ? `${txt} ago` : `in ${txt}`;
}

export function fmtDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "—";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

/** Binary units (KiB, MiB, GiB), as the CLI and the limits (8 GiB) say them. */
export function fmtBytes(n: number | null | undefined): string {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)} ${units[i]}`;
}

export const fmtInt = (n: number) => n.toLocaleString();

/** Batch costs are often fractions of a cent: keep four significant digits below a cent. */
export function fmtCost(cost: { currency: string; amount: number } | null | undefined): string {
  if (!cost) return "—";
  const small = cost.amount !== 0 && Math.abs(cost.amount) < 0.01;
  try {
    return new Intl.NumberFormat(undefined, {
      style: "currency",
      currency: cost.currency || "USD",
      ...(small ? { maximumSignificantDigits: 4 } : { minimumFractionDigits: 2, maximumFractionDigits: 4 }),
    }).format(cost.amount);
  } catch {
    return `${cost.amount} ${cost.currency}`;
  }
}

export const fmtRate = (perSecond: number | null) =>
  perSecond === null ? "—" : perSecond >= 10 ? `${Math.round(perSecond).toLocaleString()}/s` : `${perSecond.toFixed(1)}/s`;
