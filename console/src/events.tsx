// Events: this node's notification deliveries (each with its attempts and errors) and its
// replication journal (with a retry of an entry), filtered and paged as the admin API
// pages them.
import { useEffect, useState } from "preact/hooks";
import { Client } from "./api";
import { ErrorLine } from "./buckets";

const describe = (err: any) => `${err.code || "Error"}: ${err.message}`;

function Paged(props: {
  client: Client; title: string; path: string; field: string; filters: string[];
  columns: [string, (row: any) => any][]; action?: (row: any, reload: () => void) => any;
}) {
  const { client } = props;
  const [rows, setRows] = useState<any[] | null>(null);
  const [cursor, setCursor] = useState<string | null>(null);
  const [filter, setFilter] = useState<Record<string, string>>({});
  const [error, setError] = useState("");
  async function load(f: Record<string, string>, after: string | null) {
    const q = new URLSearchParams({ limit: "50" });
    for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
    if (after) q.set("cursor", after);
    try {
      const page = await client.admin("GET", `${props.path}?${q}`);
      const found = page[props.field] || [];
      setRows(after && rows ? [...rows, ...found] : found);
      setCursor(page.next_cursor || null);
      setError("");
    } catch (err) {
      setError(describe(err));
    }
  }
  useEffect(() => { load({}, null); }, []);
  function apply(e: Event) {
    e.preventDefault();
    const data = new FormData(e.target as HTMLFormElement);
    const f: Record<string, string> = {};
    for (const k of props.filters) f[k] = String(data.get(k) || "").trim();
    setFilter(f);
    load(f, null);
  }
  return (
    <section aria-label={props.title}>
      <h2>{props.title}</h2>
      <form class="inline" onSubmit={apply} aria-label={`${props.title} filters`}>
        {props.filters.map((k) => <label key={k}>{k[0].toUpperCase() + k.slice(1)} <input name={k} /></label>)}
        <button type="submit">Filter {props.title.toLowerCase()}</button>
      </form>
      <ErrorLine error={error} />
      {rows !== null && rows.length === 0 && <p>Nothing yet.</p>}
      {rows !== null && rows.length > 0 && (
        <div class="scroll">
          <table>
            <thead><tr>{props.columns.map(([h]) => <th scope="col" key={h}>{h}</th>)}{props.action && <th scope="col"><span class="sr">Actions</span></th>}</tr></thead>
            <tbody>
              {rows.map((row) => (
                <tr key={row.id}>
                  {props.columns.map(([h, cell]) => <td key={h}>{cell(row)}</td>)}
                  {props.action && <td>{props.action(row, () => load(filter, null))}</td>}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {cursor && <button type="button" onClick={() => load(filter, cursor)}>More {props.title.toLowerCase()}</button>}
    </section>
  );
}

export function EventsPage(props: { client: Client }) {
  const { client } = props;
  const [note, setNote] = useState("");
  const errors = (row: any) => (row.attempts_detail || row.errors || []).map((a: any) => a.error).filter(Boolean).join("; ");
  return (
    <section aria-labelledby="events-title">
      <h1 id="events-title">Events</h1>
      {note && <p role="status">{note}</p>}
      <Paged client={client} title="Notification deliveries" path="/notifications/events" field="events"
        filters={["bucket", "status", "target"]}
        columns={[["Time", (r) => r.time], ["Event", (r) => r.event_name], ["Bucket", (r) => r.bucket],
          ["Key", (r) => r.key], ["Target", (r) => r.target], ["Status", (r) => r.status],
          ["Attempts", (r) => (typeof r.attempts === "number" ? r.attempts : (r.attempts || []).length)],
          ["Errors", errors]]} />
      <Paged client={client} title="Replication journal" path="/replication/journal" field="entries"
        filters={["bucket", "status"]}
        columns={[["Time", (r) => r.time], ["Kind", (r) => r.kind], ["Bucket", (r) => r.bucket],
          ["Key", (r) => r.key], ["Destination", (r) => (typeof r.destination === "object" ? JSON.stringify(r.destination) : r.destination || r.endpoint)],
          ["Status", (r) => r.status], ["Attempts", (r) => r.attempts], ["Error", (r) => r.last_error || ""]]}
        action={(row, reload) => row.status === "FAILED" || row.status === "PENDING" ? (
          <button type="button" aria-label={`Retry journal entry ${row.id}`} onClick={async () => {
            try {
              await client.admin("POST", `/replication/retry/${encodeURIComponent(row.id)}`);
              setNote(`Entry ${row.id} is due again`);
              reload();
            } catch (err) {
              setNote(describe(err));
            }
          }}>Retry</button>
        ) : null} />
    </section>
  );
}
