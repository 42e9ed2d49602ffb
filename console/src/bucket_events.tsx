// A bucket's notification and replication status, beyond the configuration documents:
// the rules as a table (targets, events, filters; destinations, prefixes, what is
// replicated), the outcome of the bucket's recent deliveries and journal entries, and the
// operator's actions: a test event to a rule's target, replicating the objects written
// before a rule, retrying a journal entry.
import { useEffect, useState } from "preact/hooks";
import { ApiError, Client, text } from "./api";
import { ErrorLine } from "./buckets";
import { Deliveries, Journal, Recent } from "./events";
import { describe } from "./paged";

const KINDS: [string, string][] = [["QueueConfiguration", "Queue"], ["TopicConfiguration", "Topic"],
  ["CloudFunctionConfiguration", "CloudFunction"]];
const ARN_PREFIX = "arn:objstore:sqs:";

export interface NotificationRule { id: string; destination: string; target: string; events: string[]; filter: string }
export interface ReplicationRule {
  id: string; status: string; priority: string; prefix: string; bucket: string; endpoint: string;
  credential: string; deleteMarkers: boolean; existing: boolean;
}

// The target a destination names: `arn:objstore:sqs:<region>:<name>:<kind>` names a
// configured target; an http(s) URL is an ad-hoc webhook.
export function targetOf(destination: string): string {
  return destination.startsWith(ARN_PREFIX) ? destination.split(":")[4] || destination : destination;
}

const children = (node: Element, tag: string) => Array.from(node.children).filter((c) => c.tagName === tag);

export function notificationRules(doc: Document): NotificationRule[] {
  return KINDS.flatMap(([element, field]) => Array.from(doc.getElementsByTagName(element)).map((rule) => {
    const destination = text(rule, field);
    const filter = Array.from(rule.getElementsByTagName("FilterRule"))
      .map((f) => `${text(f, "Name").toLowerCase()} ${text(f, "Value")}`).join(", ");
    return { id: text(rule, "Id"), destination, target: targetOf(destination),
      events: children(rule, "Event").map((e) => e.textContent || ""), filter };
  }));
}

export function replicationRules(doc: Document): ReplicationRule[] {
  return Array.from(doc.getElementsByTagName("Rule")).map((rule) => {
    const enabled = (tag: string) => {
      const element = rule.getElementsByTagName(tag)[0];
      return element !== undefined && text(element, "Status") === "Enabled";
    };
    const destination = rule.getElementsByTagName("Destination")[0];
    return {
      id: text(rule, "ID"), status: children(rule, "Status")[0]?.textContent || "", priority: text(rule, "Priority"),
      prefix: text(rule, "Prefix"), bucket: text(destination, "Bucket").replace(/^arn:aws:s3:::/, ""),
      endpoint: text(destination, "Endpoint"), credential: text(destination, "CredentialRef"),
      deleteMarkers: enabled("DeleteMarkerReplication"), existing: enabled("ExistingObjectReplication"),
    };
  });
}

function NotificationStatus(props: { client: Client; bucket: string }) {
  const { client, bucket } = props;
  const [rules, setRules] = useState<NotificationRule[] | null>(null);
  const [error, setError] = useState("");
  const [note, setNote] = useState("");
  useEffect(() => {
    client.s3Xml("GET", `/${encodeURIComponent(bucket)}?notification`).then(
      (doc) => setRules(notificationRules(doc)), (err) => setError(describe(err)));
  }, [bucket]);
  async function test(rule: NotificationRule) {
    setNote("");
    const body = rule.destination.startsWith(ARN_PREFIX) ? { target: rule.target } : { url: rule.destination };
    try {
      const found = await client.admin("POST", "/notifications/test-webhook", body);
      setNote(found.delivered ? `A test event reached ${rule.target}` : `The test event to ${rule.target} failed: ${found.error}`);
    } catch (err) {
      setNote(describe(err));
    }
  }
  return (
    <section class="panel" aria-labelledby="notification-status-title">
      <h2 id="notification-status-title">Notifications</h2>
      <ErrorLine error={error} />
      {rules !== null && rules.length === 0 && <p>No notification rules: no events are sent.</p>}
      {rules !== null && rules.length > 0 && (
        <div class="scroll">
          <table aria-label="Notification rules">
            <thead><tr><th scope="col">Rule</th><th scope="col">Target</th><th scope="col">Events</th><th scope="col">Filter</th><th scope="col"><span class="sr">Actions</span></th></tr></thead>
            <tbody>
              {rules.map((r) => (
                <tr key={r.id + r.destination}>
                  <td>{r.id}</td><td>{r.target}</td><td>{r.events.join(", ")}</td><td>{r.filter || "every key"}</td>
                  <td><button type="button" onClick={() => test(r)} aria-label={`Send a test event to ${r.target}`}>Test</button></td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {note && <p role="status">{note}</p>}
      <Recent client={client} path="/notifications/events" query={{ bucket }} field="events" what="deliveries" />
      <Deliveries client={client} bucket={bucket} level={3} />
    </section>
  );
}

function ReplicationStatus(props: { client: Client; bucket: string }) {
  const { client, bucket } = props;
  const [rules, setRules] = useState<ReplicationRule[] | null>(null);
  const [error, setError] = useState("");
  const [note, setNote] = useState("");
  useEffect(() => {
    client.s3Xml("GET", `/${encodeURIComponent(bucket)}?replication`).then(
      (doc) => setRules(replicationRules(doc)),
      (err) => (err instanceof ApiError && err.status === 404 ? setRules([]) : setError(describe(err))));
  }, [bucket]);
  async function existing() {
    setNote("");
    try {
      const found = await client.admin("POST", `/replication/existing/${encodeURIComponent(bucket)}`);
      setNote(`${found.journaled} existing object versions journaled for replication`);
    } catch (err) {
      setNote(describe(err));
    }
  }
  return (
    <section class="panel" aria-labelledby="replication-status-title">
      <h2 id="replication-status-title">Replication</h2>
      <ErrorLine error={error} />
      {rules !== null && rules.length === 0 && <p>No replication rules: nothing is copied elsewhere.</p>}
      {rules !== null && rules.length > 0 && (
        <>
          <div class="scroll">
            <table aria-label="Replication rules">
              <thead><tr><th scope="col">Rule</th><th scope="col">Status</th><th scope="col">Prefix</th><th scope="col">Destination</th><th scope="col">Credential</th><th scope="col">Delete markers</th><th scope="col">Existing objects</th></tr></thead>
              <tbody>
                {rules.map((r) => (
                  <tr key={r.id}>
                    <td>{r.id}{r.priority ? ` (priority ${r.priority})` : ""}</td><td>{r.status}</td><td>{r.prefix || "every key"}</td>
                    <td>{r.bucket} at {r.endpoint || "(no endpoint)"}</td><td>{r.credential}</td>
                    <td>{r.deleteMarkers ? "replicated" : "not replicated"}</td><td>{r.existing ? "replicated" : "not replicated"}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          {rules.some((r) => r.existing) && <button type="button" onClick={existing}>Replicate existing objects</button>}
        </>
      )}
      {note && <p role="status">{note}</p>}
      <Recent client={client} path="/replication/journal" query={{ bucket }} field="entries" what="journal entries" />
      <Journal client={client} bucket={bucket} level={3} setNote={setNote} />
    </section>
  );
}

export function BucketEventsStatus(props: { client: Client; bucket: string }) {
  return (
    <>
      <NotificationStatus client={props.client} bucket={props.bucket} />
      <ReplicationStatus client={props.client} bucket={props.bucket} />
    </>
  );
}
