import { Fragment } from "preact";
import { useEffect, useState } from "preact/hooks";
import { Client, formatSize } from "./api";
import { ErrorLine } from "./buckets";
import { Recent } from "./events";
import { Column, Filter, Paged, describe } from "./paged";
import { Link } from "./router";

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
      <h2>Notifications and replication</h2>
      <Recent client={client} path="/notifications/events" field="events" what="notification deliveries" />
      <Recent client={client} path="/replication/journal" field="entries" what="replication journal entries" />
      <p><Link to="/events">Every delivery and journal entry</Link>; a bucket's rules are on its settings page.</p>
      <Audit client={client} />
    </section>
  );
}

const AUDIT_FILTERS: Filter[] = [
  "bucket", { name: "operation", label: "Operation", placeholder: "PutObject" }, "user",
  { name: "since", label: "Since", placeholder: "2026-01-01T00:00:00Z" }, "until",
  { name: "node", label: "Node", placeholder: "this node, a node id, or all" },
];

const AUDIT_COLUMNS: Column[] = [
  ["Time", (e) => e.time], ["Node", (e) => e.node_id], ["Operation", (e) => e.operation],
  ["User", (e) => e.username || ""], ["Bucket", (e) => e.bucket || ""], ["Key", (e) => e.key || ""],
  ["Status", (e) => `${e.status}${e.error_code ? ` ${e.error_code}` : ""}`],
];

function Audit(props: { client: Client }) {
  return (
    <Paged client={props.client} title="Audit log" path="/audit" field="entries" filters={AUDIT_FILTERS}
      columns={AUDIT_COLUMNS} more="Older entries" rowKey={(e) => `${e.id}/${e.node_id}`} />
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
