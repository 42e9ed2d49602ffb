// Maintenance jobs: start one, watch its progress (polled every second while one is
// active), pause, resume or cancel it, and read its log.
import { useEffect, useState } from "preact/hooks";
import { Client } from "./api";
import { ErrorLine } from "./buckets";

const describe = (err: any) => `${err.code || "Error"}: ${err.message}`;
const TYPES = ["noop", "encrypt", "decrypt", "compress", "decompress", "rotate-key", "migrate-db", "replicate-existing"];
const ENDED = ["completed", "failed", "cancelled"];

export interface Job {
  id: string; job_type: string; status: string; mode: string; params: Record<string, unknown>;
  total: number | null; done: number; rate: number | null; last_error: string | null;
  created_at: string; started_at: string | null; finished_at: string | null;
}

// "12 s", "3 min", "2 h": the time the remaining work takes at the measured rate.
export function eta(job: Job): string {
  if (!job.total || !job.rate || job.rate <= 0 || job.done >= job.total) return "";
  const seconds = (job.total - job.done) / job.rate;
  if (seconds < 90) return `${Math.ceil(seconds)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function JobProgress(props: { job: Job }) {
  const { job } = props;
  const fraction = job.total ? Math.min(1, job.done / job.total) : 0;
  const left = eta(job);
  return (
    <span class="job-progress">
      <progress max={job.total || 1} value={job.total ? job.done : 0} aria-label={`Progress of job ${job.id}`} />
      {" "}{job.done}{job.total ? ` / ${job.total} (${Math.round(fraction * 100)} %)` : ""}
      {job.rate ? `, ${job.rate.toFixed(1)}/s` : ""}{left ? `, ETA ${left}` : ""}
    </span>
  );
}

export function JobsPage(props: { client: Client }) {
  const { client } = props;
  const [jobs, setJobs] = useState<Job[] | null>(null);
  const [active, setActive] = useState<Job | null>(null);
  const [shown, setShown] = useState<string | null>(null);
  const [logs, setLogs] = useState<{ time: string; level: string; message: string }[]>([]);
  const [error, setError] = useState("");
  const [status, setStatus] = useState("");
  async function load() {
    try {
      const page = await client.admin("GET", "/maintenance/jobs?limit=50");
      setJobs(page.jobs);
      setActive(page.active);
      if (shown) {
        const detail = await client.admin("GET", `/maintenance/jobs/${encodeURIComponent(shown)}`);
        setLogs(detail.logs);
      }
    } catch (err) {
      setError(describe(err));
    }
  }
  useEffect(() => { load(); }, [shown]);
  useEffect(() => {  // poll while a job is active
    if (!active) return;
    const timer = setInterval(load, 1000);
    return () => clearInterval(timer);
  }, [active?.id, active?.status, shown]);

  async function start(e: Event) {
    e.preventDefault();
    setError("");
    setStatus("");
    const form = new FormData(e.target as HTMLFormElement);
    let params: unknown = {};
    const raw = String(form.get("params") || "").trim();
    try {
      params = raw ? JSON.parse(raw) : {};
    } catch {
      setError("The parameters must be a JSON object, e.g. {\"bucket\": \"photos\"}.");
      return;
    }
    try {
      const job = await client.admin("POST", "/maintenance/jobs", {
        type: String(form.get("job_type")), mode: String(form.get("mode")), params,
      });
      setStatus(`Job ${job.id} started`);
      setShown(job.id);
      await load();
    } catch (err) {
      setError(describe(err));
    }
  }
  async function move(job: Job, how: "pause" | "resume" | "cancel") {
    setError("");
    try {
      const path = `/maintenance/jobs/${encodeURIComponent(job.id)}`;
      if (how === "cancel") await client.admin("DELETE", path);
      else await client.admin("POST", `${path}/${how}`);
      await load();
    } catch (err) {
      setError(describe(err));
    }
  }
  return (
    <section aria-labelledby="jobs-title">
      <h1 id="jobs-title">Maintenance jobs</h1>
      <form class="inline" onSubmit={start} aria-label="Start a job">
        <label>Type
          <select name="job_type">{TYPES.map((t) => <option key={t} value={t}>{t}</option>)}</select>
        </label>
        <label>Mode
          <select name="mode">
            <option value="live">live (keeps serving)</option>
            <option value="maintenance">maintenance (out of the load balancer)</option>
          </select>
        </label>
        <label>Parameters (JSON)
          <input name="params" placeholder='{"bucket": "photos", "prefix": ""}' />
        </label>
        <button type="submit">Start job</button>
      </form>
      {status && <p role="status">{status}</p>}
      <ErrorLine error={error} />
      {active && (
        <p class="panel" aria-label="Active job">
          Active: <strong>{active.job_type}</strong> ({active.status}) <JobProgress job={active} />
        </p>
      )}
      {jobs === null ? <p>Loading…</p> : jobs.length === 0 ? <p>No jobs yet.</p> : (
        <div class="scroll">
          <table>
            <thead><tr><th scope="col">Type</th><th scope="col">Status</th><th scope="col">Progress</th><th scope="col">Created</th><th scope="col"><span class="sr">Actions</span></th></tr></thead>
            <tbody>
              {jobs.map((job) => (
                <tr key={job.id}>
                  <td>{job.job_type} <small>{job.mode}</small></td>
                  <td>{job.status}{job.last_error ? `: ${job.last_error}` : ""}</td>
                  <td><JobProgress job={job} /></td>
                  <td>{job.created_at}</td>
                  <td class="actions">
                    {["pending", "running"].includes(job.status) && <button type="button" onClick={() => move(job, "pause")} aria-label={`Pause job ${job.id}`}>Pause</button>}
                    {job.status === "paused" && <button type="button" onClick={() => move(job, "resume")} aria-label={`Resume job ${job.id}`}>Resume</button>}
                    {!ENDED.includes(job.status) && <button type="button" onClick={() => move(job, "cancel")} aria-label={`Cancel job ${job.id}`}>Cancel</button>}
                    <button type="button" onClick={() => setShown(job.id)} aria-label={`Log of job ${job.id}`}>Log</button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {shown && (
        <article class="panel" aria-label="Job log">
          <h2>Log of {shown}</h2>
          <ul class="log">
            {logs.map((entry, i) => <li key={i}><code>{entry.time}</code> {entry.level}: {entry.message}</li>)}
          </ul>
          <button type="button" onClick={() => setShown(null)}>Close log</button>
        </article>
      )}
    </section>
  );
}
