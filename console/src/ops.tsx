import { Fragment } from "preact";
import { useEffect, useState } from "preact/hooks";
import { Client } from "./api";
import { ErrorLine } from "./buckets";

const describe = (err: any) => `${err.code || "Error"}: ${err.message}`;

function Fields(props: { value: Record<string, unknown> | null }) {
  if (!props.value) return <p>Loading…</p>;
  return (
    <dl class="fields">
      {Object.entries(props.value).map(([k, v]) => (
        <Fragment key={k}>
          <dt>{k}</dt>
          <dd>{typeof v === "object" ? <pre>{JSON.stringify(v, null, 2)}</pre> : String(v)}</dd>
        </Fragment>
      ))}
    </dl>
  );
}

export function OpsPage(props: { client: Client }) {
  const { client } = props;
  const [info, setInfo] = useState<any>(null);
  const [stats, setStats] = useState<any>(null);
  const [cluster, setCluster] = useState<any>(null);
  const [error, setError] = useState("");
  useEffect(() => {
    client.admin("GET", "/info").then(setInfo, (e) => setError(describe(e)));
    client.admin("GET", "/stats").then(setStats, () => undefined);
    client.admin("GET", "/cluster").then(setCluster, (e) => setCluster({ unavailable: describe(e) }));
  }, []);
  return (
    <section aria-labelledby="ops-title">
      <h1 id="ops-title">Operations</h1>
      <ErrorLine error={error} />
      <div class="columns">
        <div><h2>Server</h2><Fields value={info} /></div>
        <div><h2>Storage</h2><Fields value={stats} /></div>
      </div>
      <h2>Cluster</h2>
      <Fields value={cluster} />
      <Audit client={client} />
    </section>
  );
}

function Audit(props: { client: Client }) {
  const { client } = props;
  const [entries, setEntries] = useState<any[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [filter, setFilter] = useState<Record<string, string>>({});
  const [error, setError] = useState("");
  async function load(f: Record<string, string>, after: string | null) {
    const q = new URLSearchParams({ limit: "50" });
    for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
    if (after) q.set("cursor", after);
    try {
      const page = await client.admin("GET", `/audit?${q}`);
      setEntries(after ? [...entries, ...page.entries] : page.entries);
      setCursor(page.next_cursor);
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
    for (const k of ["bucket", "operation", "user", "since", "until", "node"]) f[k] = String(data.get(k) || "").trim();
    setFilter(f);
    load(f, null);
  }
  return (
    <>
      <h2>Audit log</h2>
      <form class="inline" onSubmit={apply} aria-label="Audit filters">
        <label>Bucket <input name="bucket" /></label>
        <label>Operation <input name="operation" placeholder="PutObject" /></label>
        <label>User <input name="user" /></label>
        <label>Since <input name="since" placeholder="2026-01-01T00:00:00Z" /></label>
        <label>Until <input name="until" /></label>
        <label>Node <input name="node" placeholder="this node, a node id, or all" /></label>
        <button type="submit">Filter</button>
      </form>
      <ErrorLine error={error} />
      <div class="scroll">
        <table>
          <thead><tr><th scope="col">Time</th><th scope="col">Node</th><th scope="col">Operation</th><th scope="col">User</th><th scope="col">Bucket</th><th scope="col">Key</th><th scope="col">Status</th></tr></thead>
          <tbody>
            {entries.map((e) => (
              <tr key={e.id + e.node_id}>
                <td>{e.time}</td><td>{e.node_id}</td><td>{e.operation}</td><td>{e.username || ""}</td><td>{e.bucket || ""}</td><td>{e.key || ""}</td>
                <td>{e.status}{e.error_code ? ` ${e.error_code}` : ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {cursor && <button type="button" onClick={() => load(filter, cursor)}>Older entries</button>}
    </>
  );
}
