import { useEffect, useState } from "preact/hooks";
import { Client } from "./api";
import { ErrorLine } from "./buckets";

const describe = (err: any) => `${err.code || "Error"}: ${err.message}`;

const EXAMPLE = JSON.stringify({
  Version: "2012-10-17",
  Statement: [{ Effect: "Allow", Action: ["s3:GetObject", "s3:ListBucket"], Resource: ["arn:aws:s3:::example", "arn:aws:s3:::example/*"] }],
}, null, 2);

interface User { user_id: string; username: string; description: string; is_root: boolean }
interface Grant { grant_id: string; name: string; description: string }

export function IamPage(props: { client: Client }) {
  const { client } = props;
  const [users, setUsers] = useState<User[]>([]);
  const [grants, setGrants] = useState<Grant[]>([]);
  const [error, setError] = useState("");
  const [selected, setSelected] = useState<User | null>(null);
  async function load() {
    try {
      setUsers(await client.admin("GET", "/users"));
      setGrants(await client.admin("GET", "/grants"));
    } catch (err) {
      setError(describe(err));
    }
  }
  useEffect(() => { load(); }, []);
  async function createUser(e: Event) {
    e.preventDefault();
    const form = e.target as HTMLFormElement;
    const data = new FormData(form);
    setError("");
    try {
      const user = await client.admin<User>("POST", "/users", { username: data.get("username"), description: data.get("description") || "" });
      form.reset();
      await load();
      setSelected(user);
    } catch (err) {
      setError(describe(err));
    }
  }
  return (
    <section aria-labelledby="iam-title">
      <h1 id="iam-title">Access</h1>
      <ErrorLine error={error} />
      <div class="columns">
        <div>
          <h2>Users</h2>
          <form class="inline" onSubmit={createUser}>
            <label>Username <input name="username" required /></label>
            <label>Description <input name="description" /></label>
            <button type="submit">Create user</button>
          </form>
          <ul class="picklist">
            {users.map((u) => (
              <li key={u.user_id}>
                <button type="button" aria-pressed={selected?.user_id === u.user_id} onClick={() => setSelected(u)}>
                  {u.username}{u.is_root ? " (root)" : ""}
                </button>
              </li>
            ))}
          </ul>
          {selected && <UserPanel client={client} user={selected} grants={grants} key={selected.user_id}
            onDeleted={() => { setSelected(null); load(); }} />}
        </div>
        <div>
          <GrantsPanel client={client} grants={grants} reload={load} />
          <TeamsPanel client={client} users={users} grants={grants} />
        </div>
      </div>
    </section>
  );
}

function UserPanel(props: { client: Client; user: User; grants: Grant[]; onDeleted: () => void }) {
  const { client, user, grants } = props;
  const base = `/users/${encodeURIComponent(user.user_id)}`;
  const [keys, setKeys] = useState<any[]>([]);
  const [attached, setAttached] = useState<Grant[]>([]);
  const [secret, setSecret] = useState<{ id: string; secret: string } | null>(null);
  const [error, setError] = useState("");
  const [choice, setChoice] = useState("");
  const [effective, setEffective] = useState<{ grant_id: string; name: string; source: string }[]>([]);
  async function load() {
    try {
      setKeys(await client.admin("GET", `${base}/credentials`));
      setAttached(await client.admin("GET", `${base}/grants`));
      setEffective(await client.admin("GET", `${base}/effective-grants`));
    } catch (err) {
      setError(describe(err));
    }
  }
  useEffect(() => { load(); }, []);
  async function createKey() {
    setError("");
    try {
      const made = await client.admin("POST", `${base}/credentials`, { description: "made in the console" });
      setSecret({ id: made.access_key_id, secret: made.secret_access_key });
      await load();
    } catch (err) {
      setError(describe(err));
    }
  }
  async function attach(e: Event) {
    e.preventDefault();
    if (!choice) return;
    setError("");
    try {
      await client.admin("PUT", `${base}/grants/${encodeURIComponent(choice)}`);
      await load();
    } catch (err) {
      setError(describe(err));
    }
  }
  async function setActive(id: string, active: boolean) {
    setError("");
    try {
      await client.admin("PUT", `/credentials/${encodeURIComponent(id)}`, { active });
      await load();
    } catch (err) {
      setError(describe(err));
    }
  }
  async function deleteKey(id: string) {
    if (!confirm(`Delete the access key ${id}?`)) return;
    setError("");
    try {
      await client.admin("DELETE", `/credentials/${encodeURIComponent(id)}`);
      await load();
    } catch (err) {
      setError(describe(err));
    }
  }
  async function deleteUser() {
    if (!confirm(`Delete the user ${user.username}? Their access keys must be deleted first.`)) return;
    setError("");
    try {
      await client.admin("DELETE", base);
      props.onDeleted();
    } catch (err) {
      setError(describe(err));
    }
  }
  async function detach(grantId: string) {
    try {
      await client.admin("DELETE", `${base}/grants/${encodeURIComponent(grantId)}`);
      await load();
    } catch (err) {
      setError(describe(err));
    }
  }
  return (
    <article class="panel" aria-label={`User ${user.username}`}>
      <h3>{user.username}</h3>
      <ErrorLine error={error} />
      <h4>Access keys</h4>
      <ul>
        {keys.map((k) => (
          <li key={k.access_key_id}>
            <code>{k.access_key_id}</code> {k.active ? "active" : "inactive"} {k.description}{" "}
            <button type="button" onClick={() => setActive(k.access_key_id, !k.active)}
              aria-label={`${k.active ? "Deactivate" : "Activate"} ${k.access_key_id}`}>{k.active ? "Deactivate" : "Activate"}</button>
            <button type="button" onClick={() => deleteKey(k.access_key_id)} aria-label={`Delete ${k.access_key_id}`}>Delete</button>
          </li>
        ))}
      </ul>
      <button type="button" onClick={createKey}>Create access key</button>
      {secret && (
        <div class="secret" role="status">
          <p>Copy the secret now: it is shown only once.</p>
          <label>Access key ID <input readOnly value={secret.id} /></label>
          <label>Secret access key <input readOnly value={secret.secret} aria-label="New secret access key" /></label>
          <button type="button" onClick={() => navigator.clipboard?.writeText(secret.secret)}>Copy secret</button>
          <button type="button" onClick={() => setSecret(null)}>Done</button>
        </div>
      )}
      <h4>Grants</h4>
      <ul>
        {attached.map((g) => (
          <li key={g.grant_id}>{g.name} <button type="button" onClick={() => detach(g.grant_id)} aria-label={`Detach ${g.name}`}>Detach</button></li>
        ))}
      </ul>
      <form class="inline" onSubmit={attach}>
        <label>
          Attach grant
          <select value={choice} onChange={(e) => setChoice((e.target as HTMLSelectElement).value)}>
            <option value="">Choose…</option>
            {grants.map((g) => <option key={g.grant_id} value={g.grant_id}>{g.name}</option>)}
          </select>
        </label>
        <button type="submit">Attach</button>
      </form>
      <h4>Effective grants</h4>
      <ul aria-label="Effective grants">
        {effective.map((g) => <li key={g.grant_id + g.source}>{g.name} <small>({g.source})</small></li>)}
      </ul>
      {!user.is_root && <p><button type="button" onClick={deleteUser}>Delete user {user.username}</button></p>}
    </article>
  );
}

function GrantsPanel(props: { client: Client; grants: Grant[]; reload: () => Promise<void> }) {
  const { client, grants, reload } = props;
  const [name, setName] = useState("");
  const [doc, setDoc] = useState(EXAMPLE);
  const [error, setError] = useState("");
  const [saved, setSaved] = useState("");
  const [editing, setEditing] = useState<Grant | null>(null);
  async function edit(g: Grant) {
    setError("");
    setSaved("");
    try {
      const full = await client.admin("GET", `/grants/${encodeURIComponent(g.grant_id)}`);
      setEditing(g);
      setName(full.name);
      setDoc(JSON.stringify(full.document, null, 2));
    } catch (err) {
      setError(describe(err));
    }
  }
  async function remove(g: Grant) {
    if (!confirm(`Delete the grant ${g.name}? It is detached from every user and team.`)) return;
    try {
      await client.admin("DELETE", `/grants/${encodeURIComponent(g.grant_id)}`);
      await reload();
    } catch (err) {
      setError(describe(err));
    }
  }
  async function create(e: Event) {
    e.preventDefault();
    setError("");
    setSaved("");
    let document: unknown;
    try {
      document = JSON.parse(doc);
    } catch (err: any) {
      setError(`The policy is not valid JSON: ${err.message}`);
      return;
    }
    try {
      if (editing) {
        await client.admin("PUT", `/grants/${encodeURIComponent(editing.grant_id)}`, { name, document });
        setSaved(`Grant ${name} saved.`);
      } else {
        await client.admin("POST", "/grants", { name, document });
        setSaved(`Grant ${name} created.`);
      }
      setEditing(null);
      setName("");
      await reload();
    } catch (err) {
      setError(describe(err));  // the server's validation message
    }
  }
  return (
    <>
      <h2>Grants</h2>
      <ul>
        {grants.map((g) => (
          <li key={g.grant_id}>
            {g.name} <small>{g.description}</small>{" "}
            <button type="button" onClick={() => edit(g)} aria-label={`Edit grant ${g.name}`}>Edit</button>
            <button type="button" onClick={() => remove(g)} aria-label={`Delete grant ${g.name}`}>Delete</button>
          </li>
        ))}
      </ul>
      <form onSubmit={create} class="policy">
        <label>Grant name <input value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} required /></label>
        <label>
          Policy document
          <textarea rows={12} spellcheck={false} value={doc} onInput={(e) => setDoc((e.target as HTMLTextAreaElement).value)} />
        </label>
        <button type="submit">{editing ? `Save grant ${editing.name}` : "Create grant"}</button>
        {editing && <button type="button" onClick={() => { setEditing(null); setName(""); setDoc(EXAMPLE); }}>Cancel</button>}
        <ErrorLine error={error} />
        {saved && <p role="status">{saved}</p>}
      </form>
    </>
  );
}

interface Team { team_id: string; name: string; description: string; member_count?: number }

function TeamsPanel(props: { client: Client; users: User[]; grants: Grant[] }) {
  const { client, users, grants } = props;
  const [teams, setTeams] = useState<Team[]>([]);
  const [selected, setSelected] = useState<Team | null>(null);
  const [members, setMembers] = useState<User[]>([]);
  const [teamGrants, setTeamGrants] = useState<Grant[]>([]);
  const [error, setError] = useState("");
  const guard = async (work: () => Promise<void>) => {
    setError("");
    try {
      await work();
    } catch (err) {
      setError(describe(err));
    }
  };
  const load = () => guard(async () => setTeams(await client.admin("GET", "/teams")));
  const open = (t: Team) => guard(async () => {
    const base = `/teams/${encodeURIComponent(t.team_id)}`;
    setMembers(await client.admin("GET", `${base}/members`));
    setTeamGrants(await client.admin("GET", `${base}/grants`));
    setSelected(t);
  });
  useEffect(() => { load(); }, []);
  const base = selected ? `/teams/${encodeURIComponent(selected.team_id)}` : "";
  function create(e: Event) {
    e.preventDefault();
    const form = e.target as HTMLFormElement;
    const name = String(new FormData(form).get("team") || "");
    guard(async () => {
      const team = await client.admin<Team>("POST", "/teams", { name });
      form.reset();
      await load();
      await open(team);
    });
  }
  function pick(e: Event, kind: "members" | "grants") {
    e.preventDefault();
    const id = String(new FormData(e.target as HTMLFormElement).get("id") || "");
    if (!id || !selected) return;
    guard(async () => {
      await client.admin("PUT", `${base}/${kind}/${encodeURIComponent(id)}`);
      await open(selected);
    });
  }
  const drop = (kind: "members" | "grants", id: string) => selected && guard(async () => {
    await client.admin("DELETE", `${base}/${kind}/${encodeURIComponent(id)}`);
    await open(selected);
  });
  const removeTeam = () => selected && confirm(`Delete the team ${selected.name}?`) && guard(async () => {
    await client.admin("DELETE", base);
    setSelected(null);
    await load();
  });
  return (
    <>
      <h2>Teams</h2>
      <ErrorLine error={error} />
      <form class="inline" onSubmit={create}>
        <label>Team name <input name="team" required /></label>
        <button type="submit">Create team</button>
      </form>
      <ul class="picklist">
        {teams.map((t) => (
          <li key={t.team_id}>
            <button type="button" aria-pressed={selected?.team_id === t.team_id} onClick={() => open(t)}>{t.name}</button>
          </li>
        ))}
      </ul>
      {selected && (
        <article class="panel" aria-label={`Team ${selected.name}`}>
          <h3>{selected.name}</h3>
          <h4>Members</h4>
          <ul>
            {members.map((m) => (
              <li key={m.user_id}>{m.username} <button type="button" onClick={() => drop("members", m.user_id)} aria-label={`Remove ${m.username}`}>Remove</button></li>
            ))}
          </ul>
          <form class="inline" onSubmit={(e) => pick(e, "members")}>
            <label>Add member
              <select name="id">
                <option value="">Choose…</option>
                {users.map((u) => <option key={u.user_id} value={u.user_id}>{u.username}</option>)}
              </select>
            </label>
            <button type="submit">Add</button>
          </form>
          <h4>Grants</h4>
          <ul>
            {teamGrants.map((g) => (
              <li key={g.grant_id}>{g.name} <button type="button" onClick={() => drop("grants", g.grant_id)} aria-label={`Detach ${g.name} from the team`}>Detach</button></li>
            ))}
          </ul>
          <form class="inline" onSubmit={(e) => pick(e, "grants")}>
            <label>Attach grant to the team
              <select name="id">
                <option value="">Choose…</option>
                {grants.map((g) => <option key={g.grant_id} value={g.grant_id}>{g.name}</option>)}
              </select>
            </label>
            <button type="submit">Attach to team</button>
          </form>
          <p><button type="button" onClick={removeTeam}>Delete team {selected.name}</button></p>
        </article>
      )}
    </>
  );
}
