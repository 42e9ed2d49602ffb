import { render } from "preact";
import { useState } from "preact/hooks";
import { Client, Session, clearSession, loadSession, saveSession } from "./api";
import { Link, navigate, useRoute } from "./router";
import { BucketsPage, BrowsePage } from "./buckets";
import { IamPage } from "./iam";
import { EventsPage } from "./events";
import { JobsPage } from "./jobs";
import { OpsPage } from "./ops";
import { BucketSettingsPage } from "./settings";
import "./style.css";

function SignIn(props: { onSignedIn: (s: Session) => void }) {
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  async function submit(e: Event) {
    e.preventDefault();
    const form = new FormData(e.target as HTMLFormElement);
    const session: Session = {
      accessKeyId: String(form.get("access_key")).trim(),
      secretAccessKey: String(form.get("secret_key")),
      region: String(form.get("region")).trim() || "us-east-1",
    };
    setBusy(true);
    setError("");
    try {
      await new Client(session).admin("GET", "/me");
      saveSession(session);
      props.onSignedIn(session);
    } catch (err: any) {
      setError(`${err.code || "Error"}: ${err.message}`);
    } finally {
      setBusy(false);
    }
  }
  return (
    <main class="signin">
      <h1>objstore console</h1>
      <form onSubmit={submit} aria-describedby="signin-note">
        <p id="signin-note">
          Sign in to <strong>{window.location.origin}</strong> with an access key. The secret stays in this
          tab (session storage) and signs each request; it is never sent to the server.
        </p>
        <label>
          Access key ID <input name="access_key" autocomplete="username" required />
        </label>
        <label>
          Secret access key <input name="secret_key" type="password" autocomplete="current-password" required />
        </label>
        <label>
          Region <input name="region" placeholder="us-east-1" />
        </label>
        <button type="submit" disabled={busy}>{busy ? "Signing in…" : "Sign in"}</button>
        {error && <p role="alert" class="error">{error}</p>}
      </form>
    </main>
  );
}

function App() {
  const [session, setSession] = useState<Session | null>(loadSession);
  const route = useRoute();
  if (!session) return <SignIn onSignedIn={(s) => { setSession(s); navigate("/"); }} />;
  const client = new Client(session);
  const signOut = () => {
    clearSession();
    setSession(null);
  };
  const [, first, ...rest] = route.path.split("/");
  let page;
  if (first === "b" && rest[0] && rest[1] === "settings") page = <BucketSettingsPage client={client} bucket={decodeURIComponent(rest[0])} />;
  else if (first === "b" && rest[0]) page = <BrowsePage client={client} bucket={decodeURIComponent(rest[0])} prefix={route.query.get("prefix") || ""} />;
  else if (first === "iam") page = <IamPage client={client} />;
  else if (first === "ops") page = <OpsPage client={client} />;
  else if (first === "jobs") page = <JobsPage client={client} />;
  else if (first === "events") page = <EventsPage client={client} />;
  else page = <BucketsPage client={client} />;
  return (
    <>
      <header>
        <nav aria-label="Main">
          <Link to="/">Buckets</Link>
          <Link to="/iam">Access</Link>
          <Link to="/ops">Operations</Link>
          <Link to="/jobs">Jobs</Link>
          <Link to="/events">Events</Link>
        </nav>
        <span class="who">{session.accessKeyId}</span>
        <button type="button" onClick={signOut}>Sign out</button>
      </header>
      <main>{page}</main>
    </>
  );
}

render(<App />, document.getElementById("app")!);
