import { Fragment } from "preact";
import { useEffect, useState } from "preact/hooks";
import { Client, formatSize } from "./api";
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
      <Charts client={client} />
      <h2>Cluster</h2>
      <Nodes cluster={cluster} />
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

const FIGURES: [string, string, boolean][] = [
  ["requests", "Requests per sample", false], ["errors", "Errors per sample", false],
  ["bytes_in", "Bytes received", true], ["bytes_out", "Bytes sent", true],
  ["objects", "Object versions", false], ["stored_bytes", "Bytes stored", true],
];

// The points of a line chart of `values` in a width x height box (the largest at the top).
export function points(values: number[], width = 300, height = 60): string {
  if (!values.length) return "";
  const top = Math.max(...values, 1);
  const step = values.length > 1 ? width / (values.length - 1) : 0;
  return values.map((v, i) => `${(i * step).toFixed(1)},${(height - (v / top) * (height - 2) - 1).toFixed(1)}`).join(" ");
}

function Charts(props: { client: Client }) {
  const { client } = props;
  const [samples, setSamples] = useState<any[] | null>(null);
  const [error, setError] = useState("");
  useEffect(() => {
    const load = () => client.admin("GET", "/metrics/history?limit=120").then(
      (page) => setSamples([...page.samples].reverse()), (e) => setError(describe(e)));
    load();
    const timer = setInterval(load, 30000);
    return () => clearInterval(timer);
  }, []);
  return (
    <>
      <h2>Metrics history</h2>
      <ErrorLine error={error} />
      {samples && samples.length === 0 && <p>No samples yet (one every [metrics] history_interval_seconds).</p>}
      {samples && samples.length > 0 && (
        <div class="charts">
          {FIGURES.map(([name, title, bytes]) => {
            const values = samples.map((s) => Number(s[name]) || 0);
            const last = values[values.length - 1];
            return (
              <figure class="chart" key={name} aria-label={title}>
                <figcaption>{title}: {bytes ? formatSize(last) : last} (max {bytes ? formatSize(Math.max(...values)) : Math.max(...values)})</figcaption>
                <svg viewBox="0 0 300 60" preserveAspectRatio="none" role="img" aria-label={`${title} over the last ${values.length} samples`}>
                  <polyline points={points(values)} />
                </svg>
              </figure>
            );
          })}
        </div>
      )}
    </>
  );
}

function Nodes(props: { cluster: any }) {
  const nodes: any[] = props.cluster?.nodes || [];
  if (!nodes.length) return null;
  return (
    <div class="scroll">
      <table aria-label="Cluster nodes">
        <thead><tr><th scope="col">Node</th><th scope="col">State</th><th scope="col">Eligible</th><th scope="col">Config</th><th scope="col">Clock offset</th><th scope="col">Sync</th><th scope="col">Last seen</th></tr></thead>
        <tbody>
          {nodes.map((n) => (
            <tr key={n.node_id}>
              <td>{n.node_id}{props.cluster.worker_leader === n.node_id ? " (leader)" : ""}</td>
              <td>{n.state}{n.pruned ? " (pruned)" : ""}</td>
              <td>{n.eligible ? "yes" : "no"}</td>
              <td>{n.config_ok === false ? "drift" : "ok"}</td>
              <td>{n.clock_offset_seconds == null ? "" : `${Number(n.clock_offset_seconds).toFixed(3)} s`}</td>
              <td>{n.sync ? (typeof n.sync === "object" ? JSON.stringify(n.sync) : String(n.sync)) : ""}</td>
              <td>{n.last_seen || ""}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
