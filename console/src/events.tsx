// Events: this node's notification deliveries (each with its attempts and errors) and its
// replication journal (with a retry of an entry), filtered and paged as the admin API
// pages them. The tables are shared with a bucket's status (bucket_events.tsx).
import { useState } from "preact/hooks";
import { Client } from "./api";
import { Column, Filter, Paged, describe } from "./paged";

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
