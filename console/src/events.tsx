// Events: this node's notification deliveries (each with its attempts and errors) and its
// replication journal (with a retry of an entry), filtered and paged as the admin API
// pages them. The tables are shared with a bucket's status (bucket_events.tsx).
import { useEffect, useState } from "preact/hooks";
import { Client } from "./api";
import { Column, Filter, Paged, describe } from "./paged";

const RECENT = 100;

// "3 delivered, 1 failed" over the rows of a page (statuses in the order first met).
export function tally(rows: any[]): string {
  const counts = new Map<string, number>();
  for (const row of rows) counts.set(row.status, (counts.get(row.status) || 0) + 1);
  return Array.from(counts, ([status, n]) => `${n} ${status.toLowerCase()}`).join(", ");
}

// One line on the outcome of the newest RECENT rows of a view (deliveries, journal entries).
export function Recent(props: { client: Client; path: string; query?: Record<string, string>; field: string; what: string }) {
  const [summary, setSummary] = useState<string | null>(null);
  const q = new URLSearchParams({ ...props.query, limit: String(RECENT) }).toString();
  useEffect(() => {
    props.client.admin("GET", `${props.path}?${q}`).then((page) => {
      const rows: any[] = page[props.field] || [];
      setSummary(rows.length ? `Last ${rows.length} ${props.what}: ${tally(rows)}.` : `No ${props.what} yet.`);
    }, (err) => setSummary(describe(err)));
  }, [props.path, q]);
  return summary === null ? null : <p>{summary}</p>;
}

export const deliveryErrors = (row: any) => (row.errors || []).map((a: any) => a.error).filter(Boolean).join("; ");

export const DELIVERY_COLUMNS: Column[] = [
  ["Time", (r) => r.time], ["Event", (r) => r.event_name], ["Bucket", (r) => r.bucket],
  ["Key", (r) => r.key], ["Target", (r) => r.target], ["Status", (r) => r.status],
  ["Attempts", (r) => r.attempts], ["Errors", deliveryErrors],
];

export const JOURNAL_COLUMNS: Column[] = [
  ["Time", (r) => r.time], ["Kind", (r) => r.kind], ["Bucket", (r) => r.bucket],
  ["Key", (r) => r.key],
  ["Destination", (r) => (r.destination ? `${r.destination.bucket} at ${r.destination.endpoint}` : "")],
  ["Status", (r) => r.status], ["Attempts", (r) => r.attempts], ["Error", (r) => r.last_error || ""],
];

// The Retry button of a journal entry that is FAILED or backing off.
export function retryAction(client: Client, setNote: (text: string) => void) {
  return (row: any, reload: () => void) => row.status === "FAILED" || row.status === "PENDING" ? (
    <button type="button" aria-label={`Retry journal entry ${row.id}`} onClick={async () => {
      try {
        await client.admin("POST", `/replication/retry/${encodeURIComponent(row.id)}`);
        setNote(`Entry ${row.id} is due again`);
        reload();
      } catch (err) {
        setNote(describe(err));
      }
    }}>Retry</button>
  ) : null;
}

export function Deliveries(props: { client: Client; bucket?: string; level?: 2 | 3 }) {
  const filters: Filter[] = props.bucket ? ["status", "target"] : ["bucket", "status", "target"];
  return (
    <Paged client={props.client} title="Notification deliveries" path="/notifications/events"
      field="events" filters={filters} columns={DELIVERY_COLUMNS} level={props.level}
      fixed={props.bucket ? { bucket: props.bucket } : undefined} />
  );
}

export function Journal(props: { client: Client; bucket?: string; level?: 2 | 3; setNote: (text: string) => void }) {
  const filters: Filter[] = props.bucket ? ["status"] : ["bucket", "status"];
  return (
    <Paged client={props.client} title="Replication journal" path="/replication/journal"
      field="entries" filters={filters} columns={JOURNAL_COLUMNS} level={props.level}
      fixed={props.bucket ? { bucket: props.bucket } : undefined}
      action={retryAction(props.client, props.setNote)} />
  );
}

export function EventsPage(props: { client: Client }) {
  const { client } = props;
  const [note, setNote] = useState("");
  return (
    <section aria-labelledby="events-title">
      <h1 id="events-title">Events</h1>
      {note && <p role="status">{note}</p>}
      <Deliveries client={client} />
      <Journal client={client} setNote={setNote} />
    </section>
  );
}
