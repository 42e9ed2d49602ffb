// The console's client: every S3 and admin call is signed in the browser with SigV4
// (aws4fetch). The secret lives in this tab's sessionStorage only; sign-out removes it.
import { AwsClient } from "aws4fetch";

export interface Session {
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
}

const STORE = "objstore.console.session";

export function loadSession(): Session | null {
  const raw = sessionStorage.getItem(STORE);
  if (!raw) return null;
  try {
    return JSON.parse(raw) as Session;
  } catch {
    return null;
  }
}

export function saveSession(s: Session): void {
  sessionStorage.setItem(STORE, JSON.stringify(s));
}

export function clearSession(): void {
  sessionStorage.removeItem(STORE);
}

export class ApiError extends Error {
  constructor(public status: number, public code: string, message: string) {
    super(message);
  }
}

// A configuration document's request: S3 wants an integrity header on these PUTs
// (Content-MD5 or x-amz-checksum-*); browsers have no MD5, so SHA-256 it is.
export async function documentBody(body: string, contentType = "application/xml"): Promise<RequestInit> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(body));
  const base64 = btoa(String.fromCharCode(...new Uint8Array(digest)));
  return { body, headers: { "Content-Type": contentType, "x-amz-checksum-sha256": base64 } };
}

export function encodeKey(key: string): string {
  return key.split("/").map(encodeURIComponent).join("/");
}

function origin(): string {
  return window.location.origin;
}

export class Client {
  private aws: AwsClient;
  constructor(public session: Session) {
    this.aws = new AwsClient({
      accessKeyId: session.accessKeyId,
      secretAccessKey: session.secretAccessKey,
      service: "s3",
      region: session.region || "us-east-1",
    });
  }

  async s3(method: string, path: string, init: RequestInit = {}): Promise<Response> {
    const response = await this.aws.fetch(origin() + path, { ...init, method });
    if (!response.ok) throw await s3Error(response);
    return response;
  }

  async s3Xml(method: string, path: string, init: RequestInit = {}): Promise<Document> {
    const response = await this.s3(method, path, init);
    return new DOMParser().parseFromString(await response.text(), "application/xml");
  }

  async admin<T = any>(method: string, path: string, body?: unknown): Promise<T> {
    const init: RequestInit = { method };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers = { "Content-Type": "application/json" };
    }
    const response = await this.aws.fetch(origin() + "/admin" + path, init);
    const text = await response.text();
    let doc: any = null;
    try {
      doc = text ? JSON.parse(text) : null;
    } catch {
      doc = null;
    }
    if (!response.ok) {
      if (doc && doc.error) throw new ApiError(response.status, doc.error, doc.message || doc.error);
      throw parseXmlError(response.status, text);
    }
    return doc as T;
  }

  // Signed headers for a request the caller sends itself (XMLHttpRequest, for upload progress).
  async signedHeaders(method: string, path: string): Promise<Headers> {
    const request = await this.aws.sign(origin() + path, { method });
    return request.headers;
  }

  // A presigned GET of an object, signed here in the browser; valid for `seconds`.
  async presign(bucket: string, key: string, seconds: number, params: Record<string, string> = {}): Promise<string> {
    const url = new URL(origin() + "/" + encodeURIComponent(bucket) + "/" + encodeKey(key));
    for (const [name, value] of Object.entries(params)) url.searchParams.set(name, value);
    url.searchParams.set("X-Amz-Expires", String(seconds));
    const request = await this.aws.sign(url.toString(), { method: "GET", aws: { signQuery: true } });
    return request.url;
  }
}

async function s3Error(response: Response): Promise<ApiError> {
  return parseXmlError(response.status, await response.text());
}

function parseXmlError(status: number, text: string): ApiError {
  const doc = new DOMParser().parseFromString(text || "<x/>", "application/xml");
  const code = doc.querySelector("Code")?.textContent || `HTTP ${status}`;
  const message = doc.querySelector("Message")?.textContent || code;
  return new ApiError(status, code, message);
}

export function text(node: Element | Document, tag: string): string {
  return node.getElementsByTagName(tag)[0]?.textContent ?? "";
}

export interface Listing {
  folders: string[];
  objects: { key: string; size: number; modified: string; etag: string }[];
  next: string | null;
}

// One page of a bucket by prefix and delimiter: never the whole bucket.
export async function listPage(
  c: Client, bucket: string, prefix: string, token: string | null, pageSize = 200,
): Promise<Listing> {
  // encoding-type=url: keys holding characters XML 1.0 can not carry still parse.
  const q = new URLSearchParams({
    "list-type": "2", delimiter: "/", prefix, "max-keys": String(pageSize), "encoding-type": "url",
  });
  if (token) q.set("continuation-token", token);
  const doc = await c.s3Xml("GET", `/${encodeURIComponent(bucket)}?${q}`);
  const folders = Array.from(doc.getElementsByTagName("CommonPrefixes")).map((n) => decodeURIComponent(text(n, "Prefix")));
  const objects = Array.from(doc.getElementsByTagName("Contents")).map((n) => ({
    key: decodeURIComponent(text(n, "Key")),
    size: Number(text(n, "Size")),
    modified: text(n, "LastModified"),
    etag: text(n, "ETag"),
  }));
  const truncated = text(doc, "IsTruncated") === "true";
  return { folders, objects, next: truncated ? text(doc, "NextContinuationToken") : null };
}

export const PART_SIZE = 8 * 1024 * 1024;
const MAX_PARTS = 10000;

// Parts of 8 MiB, larger when a file would need more than S3's 10,000 parts.
export function partSize(total: number): number {
  const mib = 1024 * 1024;
  return Math.max(PART_SIZE, Math.ceil(total / MAX_PARTS / mib) * mib);
}

function put(
  c: Client, path: string, body: Blob, onProgress: (sent: number) => void,
): Promise<string> {
  return c.signedHeaders("PUT", path).then(
    (headers) =>
      new Promise<string>((resolve, reject) => {
        const xhr = new XMLHttpRequest();
        xhr.open("PUT", path);
        headers.forEach((value, name) => {
          if (name !== "host") xhr.setRequestHeader(name, value);
        });
        xhr.upload.onprogress = (e) => onProgress(e.loaded);
        xhr.onload = () => {
          if (xhr.status >= 200 && xhr.status < 300) resolve(xhr.getResponseHeader("ETag") || "");
          else reject(parseXmlError(xhr.status, xhr.responseText));
        };
        xhr.onerror = () => reject(new ApiError(0, "NetworkError", "The upload failed."));
        xhr.send(body);
      }),
  );
}

// Where an interrupted multipart upload is remembered (this browser's localStorage, by
// bucket, key and the file's name, size and modification time): choosing the same file
// again resumes it, skipping the parts the server already holds (ListParts).
const RESUME = "objstore.console.upload.";

interface Resumable { uploadId: string; partSize: number }

function resumeKey(bucket: string, key: string, file: Blob): string {
  const f = file as File;
  return RESUME + JSON.stringify([bucket, key, f.name || "", file.size, f.lastModified || 0]);
}

// The parts an upload holds: part number -> ETag (null when the upload is gone).
async function listParts(c: Client, path: string, uploadId: string): Promise<Map<number, { etag: string; size: number }> | null> {
  const parts = new Map<number, { etag: string; size: number }>();
  let marker = "";
  for (;;) {
    const q = new URLSearchParams({ uploadId, "max-parts": "1000" });
    if (marker) q.set("part-number-marker", marker);
    let doc: Document;
    try {
      doc = await c.s3Xml("GET", `${path}?${q}`);
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) return null;
      throw err;
    }
    for (const p of Array.from(doc.getElementsByTagName("Part"))) {
      parts.set(Number(text(p, "PartNumber")), { etag: text(p, "ETag"), size: Number(text(p, "Size")) });
    }
    if (text(doc, "IsTruncated") !== "true") return parts;
    marker = text(doc, "NextPartNumberMarker");
  }
}

// Uploads a file: one PUT when small, else a multipart upload of PART_SIZE parts that an
// interruption leaves in place, so that the same file chosen again resumes it.
export async function upload(
  c: Client, bucket: string, key: string, file: Blob, onProgress: (sent: number) => void,
): Promise<{ resumed: boolean }> {
  const path = `/${encodeURIComponent(bucket)}/${encodeKey(key)}`;
  if (file.size <= PART_SIZE) {
    await put(c, path, file, onProgress);
    onProgress(file.size);
    return { resumed: false };
  }
  const remembered = resumeKey(bucket, key, file);
  let state: Resumable | null = null;
  try {
    state = JSON.parse(localStorage.getItem(remembered) || "null");
  } catch {
    state = null;
  }
  let held = state ? await listParts(c, path, state.uploadId) : null;
  const resumed = held !== null;
  if (!state || held === null) {
    const created = await c.s3Xml("POST", `${path}?uploads`);
    state = { uploadId: text(created, "UploadId"), partSize: partSize(file.size) };
    held = new Map();
    localStorage.setItem(remembered, JSON.stringify(state));
  }
  const { uploadId } = state;
  const size = state.partSize;
  const etags: string[] = [];
  for (let offset = 0, part = 1; offset < file.size; offset += size, part++) {
    const length = Math.min(size, file.size - offset);
    const have = held.get(part);
    if (have && have.size === length) {  // already on the server
      etags.push(have.etag);
      onProgress(offset + length);
      continue;
    }
    const q = new URLSearchParams({ partNumber: String(part), uploadId });
    etags.push(await put(c, `${path}?${q}`, file.slice(offset, offset + size),
      (sent) => onProgress(offset + sent)));
  }
  const parts = etags
    .map((etag, i) => `<Part><PartNumber>${i + 1}</PartNumber><ETag>${etag}</ETag></Part>`)
    .join("");
  await c.s3("POST", `${path}?${new URLSearchParams({ uploadId })}`, {
    body: `<CompleteMultipartUpload>${parts}</CompleteMultipartUpload>`,
  });
  localStorage.removeItem(remembered);
  onProgress(file.size);
  return { resumed };
}

// Interrupted uploads this browser remembers, and forgetting one (aborting it on the server).
export function interruptedUploads(): { id: string; bucket: string; key: string; name: string; size: number; uploadId: string }[] {
  const found = [];
  for (let i = 0; i < localStorage.length; i++) {
    const id = localStorage.key(i) || "";
    if (!id.startsWith(RESUME)) continue;
    try {
      const [bucket, key, name, size] = JSON.parse(id.slice(RESUME.length));
      const state: Resumable = JSON.parse(localStorage.getItem(id) || "null");
      found.push({ id, bucket, key, name, size, uploadId: state.uploadId });
    } catch {
      localStorage.removeItem(id);
    }
  }
  return found;
}

export async function abandonUpload(c: Client, entry: { id: string; bucket: string; key: string; uploadId: string }): Promise<void> {
  const path = `/${encodeURIComponent(entry.bucket)}/${encodeKey(entry.key)}`;
  await c.s3("DELETE", `${path}?${new URLSearchParams({ uploadId: entry.uploadId })}`).catch(() => undefined);
  localStorage.removeItem(entry.id);
}

export function formatSize(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}
