// A filtered, paged table of an admin API view that pages with `limit`, `cursor` and
// `next_cursor` (the audit log, notification deliveries, the replication journal): the
// filter form, the table, "more" appending the next page, an optional action per row.
import { useEffect, useState } from "preact/hooks";
import { Client } from "./api";
import { ErrorLine } from "./buckets";

export const describe = (err: any) => `${err.code || "Error"}: ${err.message}`;

// A filter: the query parameter's name, or the name with its label and a placeholder.
export type Filter = string | { name: string; label: string; placeholder?: string };
export type Column = [string, (row: any) => any];

const filterName = (f: Filter) => (typeof f === "string" ? f : f.name);
const filterLabel = (f: Filter) => (typeof f === "string" ? f[0].toUpperCase() + f.slice(1) : f.label);

export function Paged(props: {
  client: Client; title: string; path: string; field: string; filters: Filter[];
  columns: Column[]; action?: (row: any, reload: () => void) => any;
  fixed?: Record<string, string>; more?: string; rowKey?: (row: any) => string;
  level?: 2 | 3; empty?: string;
}) {
  const { client } = props;
  const [rows, setRows] = useState<any[] | null>(null);
  const [cursor, setCursor] = useState<string | null>(null);
  const [filter, setFilter] = useState<Record<string, string>>({});
  const [error, setError] = useState("");
  async function load(f: Record<string, string>, after: string | null) {
    const q = new URLSearchParams({ limit: "50", ...props.fixed });
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
  useEffect(() => { load({}, null); }, [JSON.stringify(props.fixed || {})]);
  function apply(e: Event) {
    e.preventDefault();
    const data = new FormData(e.target as HTMLFormElement);
    const f: Record<string, string> = {};
    for (const name of props.filters.map(filterName)) f[name] = String(data.get(name) || "").trim();
    setFilter(f);
    load(f, null);
  }
  const Heading = props.level === 3 ? "h3" : "h2";
  const key = props.rowKey || ((row: any) => String(row.id));
  return (
    <section aria-label={props.title}>
      <Heading>{props.title}</Heading>
      <form class="inline" onSubmit={apply} aria-label={`${props.title} filters`}>
        {props.filters.map((f) => (
          <label key={filterName(f)}>{filterLabel(f)} <input name={filterName(f)}
            placeholder={typeof f === "string" ? undefined : f.placeholder} /></label>
        ))}
        <button type="submit">Filter {props.title.toLowerCase()}</button>
      </form>
      <ErrorLine error={error} />
      {rows !== null && rows.length === 0 && <p>{props.empty || "Nothing yet."}</p>}
      {rows !== null && rows.length > 0 && (
        <div class="scroll">
          <table>
            <thead><tr>{props.columns.map(([h]) => <th scope="col" key={h}>{h}</th>)}{props.action && <th scope="col"><span class="sr">Actions</span></th>}</tr></thead>
            <tbody>
              {rows.map((row) => (
                <tr key={key(row)}>
                  {props.columns.map(([h, cell]) => <td key={h}>{cell(row)}</td>)}
                  {props.action && <td>{props.action(row, () => load(filter, null))}</td>}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {cursor && <button type="button" onClick={() => load(filter, cursor)}>{props.more || `More ${props.title.toLowerCase()}`}</button>}
    </section>
  );
}
