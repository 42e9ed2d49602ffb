import { Fragment } from "preact";
import { useEffect, useState } from "preact/hooks";
import { Client, Listing, abandonUpload, documentBody, encodeKey, formatSize, interruptedUploads, listPage, text, upload } from "./api";
import { Link } from "./router";

export function ErrorLine(props: { error: string }) {
  return props.error ? <p role="alert" class="error">{props.error}</p> : null;
}

const describe = (err: any) => `${err.code || "Error"}: ${err.message}`;

export function BucketsPage(props: { client: Client }) {
  const { client } = props;
  const [buckets, setBuckets] = useState<{ name: string; created: string }[] | null>(null);
  const [error, setError] = useState("");
  const [name, setName] = useState("");
  async function load() {
    try {
      const doc = await client.s3Xml("GET", "/");
      setBuckets(Array.from(doc.getElementsByTagName("Bucket")).map((b) => ({
        name: text(b, "Name"), created: text(b, "CreationDate"),
      })));
    } catch (err) {
      setError(describe(err));
    }
  }
  useEffect(() => { load(); }, []);
  async function create(e: Event) {
    e.preventDefault();
    setError("");
    try {
      await client.s3("PUT", "/" + encodeURIComponent(name));
      setName("");
      await load();
    } catch (err) {
      setError(describe(err));
    }
  }
  async function remove(bucket: string) {
    if (!confirm(`Delete the bucket ${bucket}? It must be empty.`)) return;
    setError("");
    try {
      await client.s3("DELETE", "/" + encodeURIComponent(bucket));
      await load();
    } catch (err) {
      setError(describe(err));
    }
  }
  return (
    <section aria-labelledby="buckets-title">
      <h1 id="buckets-title">Buckets</h1>
      <form class="inline" onSubmit={create}>
        <label>
          New bucket name
          <input value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} required
            pattern="[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]" />
        </label>
        <button type="submit">Create bucket</button>
      </form>
      <ErrorLine error={error} />
      {buckets === null ? <p>Loading…</p> : buckets.length === 0 ? <p>No buckets yet.</p> : (
        <table>
          <thead><tr><th scope="col">Name</th><th scope="col">Created</th><th scope="col"><span class="sr">Actions</span></th></tr></thead>
          <tbody>
            {buckets.map((b) => (
              <tr key={b.name}>
                <td><Link to={`/b/${encodeURIComponent(b.name)}`}>{b.name}</Link></td>
                <td>{b.created}</td>
                <td><button type="button" onClick={() => remove(b.name)} aria-label={`Delete bucket ${b.name}`}>Delete</button></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

interface Upload { name: string; size: number; sent: number; error: string; done: boolean; resumed?: boolean }

export function BrowsePage(props: { client: Client; bucket: string; prefix: string }) {
  const { client, bucket, prefix } = props;
  const [pages, setPages] = useState<Listing[]>([]);
  const [error, setError] = useState("");
  const [uploads, setUploads] = useState<Upload[]>([]);
  const [share, setShare] = useState<{ key: string; url: string } | null>(null);
  const [expiry, setExpiry] = useState(3600);
  const [dragging, setDragging] = useState(false);
  const [versioning, setVersioning] = useState("");
  const [details, setDetails] = useState<string | null>(null);
  const bucketPath = "/" + encodeURIComponent(bucket);
  async function loadVersioning() {
    try {
      const doc = await client.s3Xml("GET", `${bucketPath}?versioning`);
      setVersioning(text(doc, "Status") || "Off");
    } catch {
      setVersioning("");
    }
  }
  async function changeVersioning(status: "Enabled" | "Suspended") {
    setError("");
    try {
      await client.s3("PUT", `${bucketPath}?versioning`, await documentBody(
        `<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>${status}</Status></VersioningConfiguration>`));
      await loadVersioning();
    } catch (err) {
      setError(describe(err));
    }
  }
  useEffect(() => { loadVersioning(); }, [bucket]);

  async function first() {
    setError("");
    try {
      setPages([await listPage(client, bucket, prefix, null)]);
    } catch (err) {
      setError(describe(err));
    }
  }
  useEffect(() => { setPages([]); setShare(null); setDetails(null); first(); }, [bucket, prefix]);
  const next = pages.length ? pages[pages.length - 1].next : null;
  async function more() {
    try {
      const page = await listPage(client, bucket, prefix, next);
      setPages([...pages, page]);
    } catch (err) {
      setError(describe(err));
    }
  }

  // A file's key: its path inside a chosen folder (webkitRelativePath), else its name.
  const nameOf = (f: File) => (f as any).webkitRelativePath || f.name;
  async function send(files: File[]) {
    const start = uploads.length;
    let list = [...uploads, ...files.map((f) => ({ name: nameOf(f), size: f.size, sent: 0, error: "", done: false }))];
    setUploads(list);
    const update = (i: number, change: Partial<Upload>) => {
      list = list.map((u, j) => (j === i ? { ...u, ...change } : u));
      setUploads(list);
    };
    for (const [n, file] of files.entries()) {
      const i = start + n;
      try {
        const { resumed } = await upload(client, bucket, prefix + nameOf(file), file, (sent) => update(i, { sent }));
        update(i, { done: true, sent: file.size, resumed });
      } catch (err) {
        update(i, { error: describe(err) });
      }
    }
    await first();
  }

  // A short-lived presigned GET asking for an attachment: the browser streams the object to
  // disk itself, so a large object never sits in the tab's memory.
  async function download(key: string) {
    try {
      const name = key.split("/").pop() || key;
      const url = await client.presign(bucket, key, 300, {
        "response-content-disposition": `attachment; filename*=UTF-8''${encodeURIComponent(name)}`,
      });
      const a = document.createElement("a");
      a.href = url;
      a.download = name;
      document.body.appendChild(a);
      a.click();
      a.remove();
    } catch (err) {
      setError(describe(err));
    }
  }
  async function remove(key: string) {
    if (!confirm(`Delete ${key}?`)) return;
    try {
      await client.s3("DELETE", `/${encodeURIComponent(bucket)}/${encodeKey(key)}`);
      await first();
    } catch (err) {
      setError(describe(err));
    }
  }
  async function makeLink(key: string) {
    setShare({ key, url: await client.presign(bucket, key, expiry) });
  }

  const crumbs = prefix.split("/").filter(Boolean);
  const here = (p: string) => `/b/${encodeURIComponent(bucket)}${p ? "?prefix=" + encodeURIComponent(p) : ""}`;
  return (
    <section aria-labelledby="browse-title">
      <h1 id="browse-title">{bucket}</h1>
      <p><Link to={`/b/${encodeURIComponent(bucket)}/settings`}>Settings of {bucket}</Link> (quota, compression, encryption, tags, lifecycle, lock, policy, CORS, notifications, replication)</p>
      {versioning && (
        <p class="inline-row">
          Versioning: <strong>{versioning}</strong>{" "}
          {versioning === "Enabled"
            ? <button type="button" onClick={() => changeVersioning("Suspended")}>Suspend versioning</button>
            : <button type="button" onClick={() => changeVersioning("Enabled")}>Enable versioning</button>}
        </p>
      )}
      <nav aria-label="Path" class="crumbs">
        <Link to={here("")}>{bucket}</Link>
        {crumbs.map((c, i) => (
          <span key={i}> / <Link to={here(crumbs.slice(0, i + 1).join("/") + "/")}>{c}</Link></span>
        ))}
      </nav>
      <div
        class={"drop" + (dragging ? " over" : "")}
        onDragOver={(e) => { e.preventDefault(); setDragging(true); }}
        onDragLeave={() => setDragging(false)}
        onDrop={(e) => {
          e.preventDefault();
          setDragging(false);
          send(Array.from(e.dataTransfer?.files || []));
        }}
      >
        <label>
          Upload files to {prefix || "the bucket root"} (or drop them here)
          <input type="file" multiple onChange={(e) => {
            const input = e.target as HTMLInputElement;
            send(Array.from(input.files || []));
            input.value = "";
          }} />
        </label>
        <label>
          Upload a folder (its files keep their paths)
          <input type="file" multiple {...{ webkitdirectory: "" }} onChange={(e) => {
            const input = e.target as HTMLInputElement;
            send(Array.from(input.files || []));
            input.value = "";
          }} />
        </label>
      </div>
      {uploads.length > 0 && (
        <ul class="uploads" aria-label="Uploads">
          {uploads.map((u, i) => (
            <li key={i} data-sent={u.sent}>
              <span>{u.name}</span>
              <progress max={u.size || 1} value={u.sent} aria-label={`Upload of ${u.name}`} />
              <span class="status">{u.error ? `${u.error} (choose the same file again to resume)` : (u.done ? (u.resumed ? "Uploaded (resumed)" : "Uploaded") : `${formatSize(u.sent)} of ${formatSize(u.size)}`)}</span>
            </li>
          ))}
        </ul>
      )}
      <Interrupted key={uploads.filter((u) => u.done || u.error).length} client={client} bucket={bucket} />
      <ErrorLine error={error} />
      {share && (
        <div class="share" role="status">
          <label>
            Share link for {share.key}
            <input readOnly value={share.url} onFocus={(e) => (e.target as HTMLInputElement).select()} />
          </label>
          <button type="button" onClick={() => navigator.clipboard?.writeText(share.url)}>Copy</button>
        </div>
      )}
      {details !== null && <ObjectDetails client={client} bucket={bucket} objectKey={details} onClose={() => setDetails(null)} />}
      <label class="inline">
        Share links expire after
        <select value={String(expiry)} onChange={(e) => setExpiry(Number((e.target as HTMLSelectElement).value))}>
          <option value="900">15 minutes</option>
          <option value="3600">1 hour</option>
          <option value="86400">1 day</option>
          <option value="604800">7 days</option>
        </select>
      </label>
      <table>
        <thead><tr><th scope="col">Name</th><th scope="col">Size</th><th scope="col">Modified</th><th scope="col"><span class="sr">Actions</span></th></tr></thead>
        <tbody>
          {pages.flatMap((page) => [
            ...page.folders.map((f) => (
              <tr key={"d" + f}>
                <td><Link to={here(f)}>{f.slice(prefix.length)}</Link></td><td>—</td><td /><td />
              </tr>
            )),
            ...page.objects.map((o) => (
              <tr key={"o" + o.key}>
                <td>{o.key.slice(prefix.length)}</td>
                <td>{formatSize(o.size)}</td>
                <td>{o.modified}</td>
                <td class="actions">
                  <button type="button" onClick={() => download(o.key)} aria-label={`Download ${o.key}`}>Download</button>
                  <button type="button" onClick={() => makeLink(o.key)} aria-label={`Share ${o.key}`}>Share</button>
                  <button type="button" onClick={() => setDetails(o.key)} aria-label={`Details of ${o.key}`}>Details</button>
                  <button type="button" onClick={() => remove(o.key)} aria-label={`Delete ${o.key}`}>Delete</button>
                </td>
              </tr>
            )),
          ])}
        </tbody>
      </table>
      {pages.length > 0 && !pages.some((p) => p.folders.length || p.objects.length) && <p>Nothing here yet.</p>}
      {next && <button type="button" onClick={more}>Load more</button>}
    </section>
  );
}

// One object: its headers and metadata (HEAD), tags, and versions with a download of each.
function ObjectDetails(props: { client: Client; bucket: string; objectKey: string; onClose: () => void }) {
  const { client, bucket, objectKey } = props;
  const path = `/${encodeURIComponent(bucket)}/${encodeKey(objectKey)}`;
  const [head, setHead] = useState<[string, string][]>([]);
  const [tags, setTags] = useState<[string, string][]>([]);
  const [versions, setVersions] = useState<{ id: string; latest: boolean; size: string; modified: string; marker: boolean }[]>([]);
  const [error, setError] = useState("");
  const [note, setNote] = useState("");
  const [tagText, setTagText] = useState("");
  const [locked, setLocked] = useState(false);
  const [legalHold, setLegalHold] = useState("");
  async function loadTags() {
    const tagging = await client.s3Xml("GET", `${path}?tagging`);
    const found: [string, string][] = Array.from(tagging.getElementsByTagName("Tag")).map((t) => [text(t, "Key"), text(t, "Value")]);
    setTags(found);
    setTagText(found.map(([k, v]) => `${k}=${v}`).join("\n"));
  }
  async function loadLock() {
    try {
      const config = await client.s3Xml("GET", `/${encodeURIComponent(bucket)}?object-lock`);
      setLocked(text(config, "ObjectLockEnabled") === "Enabled");
    } catch {
      setLocked(false);
      return;
    }
    try {
      setLegalHold(text(await client.s3Xml("GET", `${path}?legal-hold`), "Status") || "OFF");
    } catch {
      setLegalHold("OFF");
    }
  }
  async function saveTags(e: Event) {
    e.preventDefault();
    setError("");
    setNote("");
    const pairs = tagText.split("\n").map((line) => line.trim()).filter(Boolean).map((line) => {
      const at = line.indexOf("=");
      return at < 0 ? [line, ""] : [line.slice(0, at).trim(), line.slice(at + 1).trim()];
    });
    const esc = (v: string) => v.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
    const body = `<Tagging xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><TagSet>${pairs.map(([k, v]) => `<Tag><Key>${esc(k)}</Key><Value>${esc(v)}</Value></Tag>`).join("")}</TagSet></Tagging>`;
    try {
      if (pairs.length) await client.s3("PUT", `${path}?tagging`, await documentBody(body));
      else await client.s3("DELETE", `${path}?tagging`);
      setNote("Tags saved");
      await loadTags();
    } catch (err) {
      setError(describe(err));
    }
  }
  async function changeLegalHold(status: "ON" | "OFF") {
    setError("");
    try {
      await client.s3("PUT", `${path}?legal-hold`, await documentBody(
        `<LegalHold xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>${status}</Status></LegalHold>`));
      setLegalHold(status);
    } catch (err) {
      setError(describe(err));
    }
  }
  async function retain(e: Event) {
    e.preventDefault();
    setError("");
    setNote("");
    const form = new FormData(e.target as HTMLFormElement);
    const until = new Date(String(form.get("until")));
    if (isNaN(until.getTime())) {
      setError("Give the date the object is retained until.");
      return;
    }
    try {
      await client.s3("PUT", `${path}?retention`, await documentBody(
        `<Retention xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Mode>${form.get("mode")}</Mode><RetainUntilDate>${until.toISOString()}</RetainUntilDate></Retention>`));
      setNote("Retention set");
    } catch (err) {
      setError(describe(err));
    }
  }
  useEffect(() => {
    loadLock();
    (async () => {
      try {
        const response = await client.s3("HEAD", path);
        const shown = ["content-type", "content-length", "etag", "last-modified", "x-amz-version-id",
          "x-amz-storage-class", "x-amz-object-lock-mode", "x-amz-object-lock-retain-until-date",
          "x-amz-object-lock-legal-hold"];
        const rows: [string, string][] = [];
        response.headers.forEach((value, name) => {
          if (shown.includes(name) || name.startsWith("x-amz-meta-")) rows.push([name, value]);
        });
        setHead(rows);
        await loadTags();
        const q = new URLSearchParams({ versions: "", prefix: objectKey, "max-keys": "100" });
        const listed = await client.s3Xml("GET", `/${encodeURIComponent(bucket)}?${q}`);
        const entries = [...Array.from(listed.getElementsByTagName("Version")), ...Array.from(listed.getElementsByTagName("DeleteMarker"))];
        setVersions(entries.filter((v) => text(v, "Key") === objectKey).map((v) => ({
          id: text(v, "VersionId"), latest: text(v, "IsLatest") === "true", size: text(v, "Size"),
          modified: text(v, "LastModified"), marker: v.tagName === "DeleteMarker",
        })).sort((a, b) => b.modified.localeCompare(a.modified)));
      } catch (err) {
        setError(describe(err));
      }
    })();
  }, [objectKey]);
  async function downloadVersion(id: string) {
    const url = await client.presign(bucket, objectKey, 300, {
      versionId: id, "response-content-disposition": "attachment",
    });
    window.location.assign(url);
  }
  return (
    <article class="panel" aria-label={`Details of ${objectKey}`}>
      <h2>{objectKey}</h2>
      <ErrorLine error={error} />
      <dl class="fields">
        {head.map(([k, v]) => <Fragment key={k}><dt>{k}</dt><dd>{v}</dd></Fragment>)}
      </dl>
      <h3>Tags</h3>
      {tags.length ? <ul>{tags.map(([k, v]) => <li key={k}>{k} = {v}</li>)}</ul> : <p>No tags.</p>}
      <form onSubmit={saveTags} aria-label="Edit tags">
        <label>Tags, one key=value per line
          <textarea rows={3} value={tagText} onInput={(e) => setTagText((e.target as HTMLTextAreaElement).value)} />
        </label>
        <button type="submit">Save tags</button>
      </form>
      {note && <p role="status">{note}</p>}
      {locked && (
        <>
          <h3>Object lock</h3>
          <p class="inline-row">
            Legal hold: <strong>{legalHold}</strong>{" "}
            <button type="button" onClick={() => changeLegalHold(legalHold === "ON" ? "OFF" : "ON")}>
              {legalHold === "ON" ? "Release legal hold" : "Place legal hold"}
            </button>
          </p>
          <form class="inline" onSubmit={retain} aria-label="Retention">
            <label>Mode
              <select name="mode"><option value="GOVERNANCE">GOVERNANCE</option><option value="COMPLIANCE">COMPLIANCE (can not be shortened)</option></select>
            </label>
            <label>Retain until <input name="until" type="datetime-local" required /></label>
            <button type="submit">Set retention</button>
          </form>
        </>
      )}
      <h3>Versions</h3>
      <ul>
        {versions.map((v) => (
          <li key={v.id}>
            <code>{v.id}</code> {v.modified} {v.marker ? "(delete marker)" : formatSize(Number(v.size))}
            {v.latest ? " (latest)" : ""}{" "}
            {!v.marker && v.id !== "null" && <button type="button" onClick={() => downloadVersion(v.id)} aria-label={`Download version ${v.id}`}>Download</button>}
          </li>
        ))}
      </ul>
      <button type="button" onClick={props.onClose}>Close details</button>
    </article>
  );
}

// Multipart uploads this browser started into the bucket and did not finish: choosing the
// same file again resumes one; "Abandon" aborts it on the server.
function Interrupted(props: { client: Client; bucket: string }) {
  const [entries, setEntries] = useState(() => interruptedUploads().filter((u) => u.bucket === props.bucket));
  if (!entries.length) return null;
  return (
    <ul class="uploads" aria-label="Interrupted uploads">
      {entries.map((u) => (
        <li key={u.id}>
          <span>{u.key} ({formatSize(u.size)}) was interrupted: choose {u.name} again to resume.</span>
          <button type="button" aria-label={`Abandon the upload of ${u.key}`} onClick={async () => {
            await abandonUpload(props.client, u);
            setEntries(entries.filter((e) => e.id !== u.id));
          }}>Abandon</button>
        </li>
      ))}
    </ul>
  );
}
