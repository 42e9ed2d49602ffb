// One bucket's settings: quota and compression (admin API), and every S3 configuration
// document (encryption, tags, lifecycle, object lock, policy, CORS, notifications,
// replication) shown and edited as the document itself, with the server's validation
// message on a refusal. A document this server does not offer yet says so (501). The
// notification and replication rules' status is bucket_events.tsx.
import { useEffect, useState } from "preact/hooks";
import { ApiError, Client, documentBody, formatSize } from "./api";
import { BucketEventsStatus } from "./bucket_events";
import { ErrorLine } from "./buckets";
import { Link } from "./router";

const describe = (err: any) => `${err.code || "Error"}: ${err.message}`;
const NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"';

interface Doc {
  title: string;
  query: string;
  json?: boolean;
  removable: boolean;
  sample: string;
  // S3 answers an empty document, not 404, when nothing is configured (notifications).
  emptyIsUnset?: boolean;
}

// The documents, in the order a bucket's owner meets them.
export const DOCUMENTS: Doc[] = [
  { title: "Default encryption", query: "encryption", removable: true,
    sample: `<ServerSideEncryptionConfiguration ${NS}><Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>AES256</SSEAlgorithm></ApplyServerSideEncryptionByDefault></Rule></ServerSideEncryptionConfiguration>` },
  { title: "Tags", query: "tagging", removable: true,
    sample: `<Tagging ${NS}><TagSet><Tag><Key>team</Key><Value>media</Value></Tag></TagSet></Tagging>` },
  { title: "Lifecycle rules", query: "lifecycle", removable: true,
    sample: `<LifecycleConfiguration ${NS}><Rule><ID>expire-tmp</ID><Filter><Prefix>tmp/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>7</Days></Expiration></Rule></LifecycleConfiguration>` },
  { title: "Object lock", query: "object-lock", removable: false,
    sample: `<ObjectLockConfiguration ${NS}><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule><DefaultRetention><Mode>GOVERNANCE</Mode><Days>1</Days></DefaultRetention></Rule></ObjectLockConfiguration>` },
  { title: "Bucket policy", query: "policy", json: true, removable: true,
    sample: JSON.stringify({ Version: "2012-10-17", Statement: [{ Effect: "Allow", Principal: "*", Action: ["s3:GetObject"], Resource: ["arn:aws:s3:::BUCKET/public/*"] }] }, null, 2) },
  { title: "CORS", query: "cors", removable: true,
    sample: `<CORSConfiguration ${NS}><CORSRule><AllowedOrigin>https://app.example.com</AllowedOrigin><AllowedMethod>GET</AllowedMethod><AllowedMethod>PUT</AllowedMethod><AllowedHeader>*</AllowedHeader><MaxAgeSeconds>3000</MaxAgeSeconds></CORSRule></CORSConfiguration>` },
  { title: "Notifications", query: "notification", removable: false, emptyIsUnset: true,
    sample: `<NotificationConfiguration ${NS}><QueueConfiguration><Id>uploads</Id><Queue>arn:objstore:sqs:us-east-1:hooks:webhook</Queue><Event>s3:ObjectCreated:*</Event></QueueConfiguration></NotificationConfiguration>` },
  { title: "Replication", query: "replication", removable: true,
    sample: `<ReplicationConfiguration ${NS}><Role></Role><Rule><ID>all</ID><Status>Enabled</Status><Priority>1</Priority><DeleteMarkerReplication><Status>Enabled</Status></DeleteMarkerReplication><Filter><Prefix></Prefix></Filter><Destination><Bucket>arn:aws:s3:::backup</Bucket><Endpoint>https://backup.example.com:9000</Endpoint><CredentialRef>backup</CredentialRef></Destination></Rule></ReplicationConfiguration>` },
];

// Indents an XML document for reading; anything that is not XML comes back as is.
export function pretty(text: string, json = false): string {
  if (json) {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; }
  }
  const doc = new DOMParser().parseFromString(text, "application/xml");
  if (doc.getElementsByTagName("parsererror").length) return text;
  const lines: string[] = [];
  const walk = (node: Element, depth: number) => {
    const pad = "  ".repeat(depth);
    const children = Array.from(node.children);
    if (!children.length) {
      lines.push(`${pad}<${node.tagName}>${node.textContent ?? ""}</${node.tagName}>`);
      return;
    }
    const attrs = depth === 0 && node.getAttribute("xmlns") ? ` xmlns="${node.getAttribute("xmlns")}"` : "";
    lines.push(`${pad}<${node.tagName}${attrs}>`);
    children.forEach((c) => walk(c, depth + 1));
    lines.push(`${pad}</${node.tagName}>`);
  };
  walk(doc.documentElement, 0);
  return lines.join("\n");
}

// An XML document whose root element has no child elements (an empty configuration).
export function isEmptyDocument(text: string): boolean {
  const doc = new DOMParser().parseFromString(text, "application/xml");
  if (doc.getElementsByTagName("parsererror").length) return false;
  return doc.documentElement.children.length === 0;
}

function DocumentEditor(props: { client: Client; bucket: string; doc: Doc }) {
  const { client, bucket, doc } = props;
  const path = `/${encodeURIComponent(bucket)}?${doc.query}`;
  const [text, setText] = useState<string>("");
  const [state, setState] = useState<"loading" | "set" | "unset" | "unavailable">("loading");
  const [error, setError] = useState("");
  const [note, setNote] = useState("");
  async function load() {
    try {
      const response = await client.s3("GET", path);
      const body = await response.text();
      if (doc.emptyIsUnset && isEmptyDocument(body)) {
        setText(doc.sample.replace("BUCKET", bucket));
        setState("unset");
        return;
      }
      setText(pretty(body, doc.json));
      setState("set");
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) {
        setText(doc.sample.replace("BUCKET", bucket));
        setState("unset");
      } else if (err instanceof ApiError && err.status === 501) {
        setState("unavailable");
      } else {
        setError(describe(err));
      }
    }
  }
  useEffect(() => { load(); }, [bucket]);
  async function save(e: Event) {
    e.preventDefault();
    setError("");
    setNote("");
    try {
      await client.s3("PUT", path, await documentBody(text, doc.json ? "application/json" : "application/xml"));
      setNote(`${doc.title} saved`);
      await load();
    } catch (err) {
      setError(describe(err));
    }
  }
  async function remove() {
    setError("");
    setNote("");
    try {
      await client.s3("DELETE", path);
      setNote(`${doc.title} removed`);
      await load();
    } catch (err) {
      setError(describe(err));
    }
  }
  const id = `doc-${doc.query}`;
  return (
    <details class="panel doc" open={state === "set"}>
      <summary>{doc.title}: <span>{{ loading: "…", set: "set", unset: "not set", unavailable: "not available on this server" }[state]}</span></summary>
      {state !== "unavailable" && state !== "loading" && (
        <form onSubmit={save} aria-label={doc.title}>
          <label for={id}>{doc.title} document{state === "unset" ? " (an example to start from)" : ""}</label>
          <textarea id={id} rows={Math.min(16, Math.max(4, text.split("\n").length + 1))} value={text}
            onInput={(e) => setText((e.target as HTMLTextAreaElement).value)} spellcheck={false} />
          <div class="inline-row">
            <button type="submit">Save {doc.title.toLowerCase()}</button>
            {doc.removable && state === "set" && <button type="button" onClick={remove}>Remove {doc.title.toLowerCase()}</button>}
          </div>
        </form>
      )}
      {note && <p role="status">{note}</p>}
      <ErrorLine error={error} />
    </details>
  );
}

function Quota(props: { client: Client; bucket: string }) {
  const { client, bucket } = props;
  const path = `/buckets/${encodeURIComponent(bucket)}/quota`;
  const [quota, setQuota] = useState<any>(null);
  const [error, setError] = useState("");
  const load = () => client.admin("GET", path).then(setQuota, (e) => setError(describe(e)));
  useEffect(() => { load(); }, [bucket]);
  async function save(e: Event) {
    e.preventDefault();
    setError("");
    const form = new FormData(e.target as HTMLFormElement);
    const limit = (name: string) => {
      const raw = String(form.get(name) || "").trim();
      return raw === "" ? null : Number(raw);
    };
    const mib = limit("max_mib");
    try {
      setQuota(await client.admin("PUT", path, {
        max_bytes: mib === null ? null : Math.round(mib * 1024 * 1024), max_objects: limit("max_objects"),
      }));
    } catch (err) {
      setError(describe(err));
    }
  }
  if (!quota) return <section class="panel"><h2>Quota</h2><ErrorLine error={error} /></section>;
  return (
    <section class="panel" aria-labelledby="quota-title">
      <h2 id="quota-title">Quota</h2>
      <p>
        Using {formatSize(quota.usage.bytes)} in {quota.usage.objects} object versions; limits:{" "}
        {quota.max_bytes === null ? "no byte limit" : formatSize(quota.max_bytes)},{" "}
        {quota.max_objects === null ? "no object limit" : `${quota.max_objects} objects`}.
      </p>
      <form class="inline" onSubmit={save} aria-label="Quota">
        <label>Max size (MiB, empty: unlimited)
          <input name="max_mib" type="number" min="0" step="any" value={quota.max_bytes === null ? "" : quota.max_bytes / 1048576} />
        </label>
        <label>Max objects (empty: unlimited)
          <input name="max_objects" type="number" min="0" step="1" value={quota.max_objects ?? ""} />
        </label>
        <button type="submit">Save quota</button>
      </form>
      <ErrorLine error={error} />
    </section>
  );
}

function Compression(props: { client: Client; bucket: string }) {
  const { client, bucket } = props;
  const path = `/buckets/${encodeURIComponent(bucket)}/compression`;
  const [setting, setSetting] = useState<any>(null);
  const [level, setLevel] = useState(3);
  const [error, setError] = useState("");
  const load = () => client.admin("GET", path).then((s) => { setSetting(s); if (s.level) setLevel(s.level); },
    (e) => setError(describe(e)));
  useEffect(() => { load(); }, [bucket]);
  async function change(on: boolean) {
    setError("");
    try {
      if (on) await client.admin("PUT", path, { algorithm: "zstd", level });
      else await client.admin("DELETE", path);
      await load();
    } catch (err) {
      setError(describe(err));
    }
  }
  return (
    <section class="panel" aria-labelledby="compression-title">
      <h2 id="compression-title">Compression</h2>
      {setting && (
        <p>New objects are {setting.algorithm ? <strong>compressed with {setting.algorithm} (level {setting.level})</strong> : <strong>stored uncompressed</strong>}.</p>
      )}
      <div class="inline-row">
        <label class="inline">Level
          <input type="number" min="1" max="19" value={level} onInput={(e) => setLevel(Number((e.target as HTMLInputElement).value))} />
        </label>
        <button type="button" onClick={() => change(true)}>Compress new objects</button>
        {setting?.algorithm && <button type="button" onClick={() => change(false)}>Turn compression off</button>}
      </div>
      <ErrorLine error={error} />
    </section>
  );
}

// Public links: what anyone may read (download), write (upload) or both under a prefix,
// written as statements of the bucket policy by the admin API (as `objstore anonymous set`).
function PublicLinks(props: { client: Client; bucket: string }) {
  const { client, bucket } = props;
  const path = `/buckets/${encodeURIComponent(bucket)}/anonymous`;
  const [links, setLinks] = useState<any>(null);
  const [error, setError] = useState("");
  const load = () => client.admin("GET", path).then(setLinks, (e) => setError(describe(e)));
  useEffect(() => { load(); }, [bucket]);
  async function change(e: Event) {
    e.preventDefault();
    setError("");
    const form = new FormData(e.target as HTMLFormElement);
    try {
      setLinks(await client.admin("PUT", path, {
        prefix: String(form.get("prefix") || ""), access: String(form.get("access")),
      }));
    } catch (err) {
      setError(describe(err));
    }
  }
  return (
    <section class="panel" aria-labelledby="public-title">
      <h2 id="public-title">Public links</h2>
      {links && (links.public_prefixes.length
        ? <p>Anyone may read: {links.public_prefixes.map((p: string) => <code key={p}>{p || "(the whole bucket)"} </code>)}</p>
        : <p>Nothing in this bucket is public.</p>)}
      {links && links.rules.length > 0 && (
        <ul>{links.rules.map((r: any) => <li key={r.prefix + r.access}>{r.prefix || "(whole bucket)"}: {r.access}</li>)}</ul>
      )}
      <form class="inline" onSubmit={change} aria-label="Public link">
        <label>Prefix (empty: the whole bucket) <input name="prefix" placeholder="public/" /></label>
        <label>Access
          <select name="access">
            <option value="download">download (anyone reads and lists)</option>
            <option value="upload">upload (anyone writes)</option>
            <option value="public">public (both)</option>
            <option value="none">none (remove the link)</option>
          </select>
        </label>
        <button type="submit">Set public link</button>
      </form>
      <ErrorLine error={error} />
    </section>
  );
}

export function BucketSettingsPage(props: { client: Client; bucket: string }) {
  const { client, bucket } = props;
  return (
    <section aria-labelledby="settings-title">
      <h1 id="settings-title">Settings of {bucket}</h1>
      <p><Link to={`/b/${encodeURIComponent(bucket)}`}>Back to the objects of {bucket}</Link></p>
      <div class="columns">
        <Quota client={client} bucket={bucket} />
        <Compression client={client} bucket={bucket} />
      </div>
      <PublicLinks client={client} bucket={bucket} />
      <BucketEventsStatus client={client} bucket={bucket} />
      <h2>Configuration documents</h2>
      {DOCUMENTS.map((doc) => <DocumentEditor key={doc.query} client={client} bucket={bucket} doc={doc} />)}
    </section>
  );
}
